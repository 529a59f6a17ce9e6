"""One list of the core. `.importlinter`'s core-is-pure contract, the strict
mypy modules in pyproject.toml and the core block of docs/ARCHITECTURE.md's
diagram name the same modules, and every top-level module of orchestrator/
is either core or one of the named adapter and composition packages, so a
new module cannot sit outside every check."""

from __future__ import annotations

import configparser
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# orchestrator's packages that are not core, by layer (docs/ARCHITECTURE.md),
# and the packages each may hold: a module of either is named for its layer.
NOT_CORE = {
    "orchestrator.adapters": {"model_client", "fault_server"},
    "orchestrator.composition": {"launch", "batch"},
}


def importlinter_core() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    return set(config["importlinter:contract:core-is-pure"]["source_modules"].split())


def strict_mypy_core() -> set[str]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (strict,) = [o for o in pyproject["tool"]["mypy"]["overrides"] if o.get("disallow_untyped_defs")]
    return {m for m in strict["module"] if not m.endswith(".*")}


def diagram_core() -> set[str]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    block = text.split("core (pure)", 1)[1].split("```", 1)[0]
    names = {n.strip() for n in re.split(r"[,\n]", block) if n.strip()}
    return {n.rstrip("/") if n.startswith("policies") else f"orchestrator.{n.rstrip('/')}" for n in names}


def orchestrator_modules() -> set[str]:
    found = set()
    for path in (ROOT / "orchestrator").iterdir():
        if path.name == "__init__.py" or path.name.startswith((".", "__pycache__")):
            continue
        if path.suffix == ".py" or (path / "__init__.py").exists():
            found.add(f"orchestrator.{path.stem}")
    return found


def test_the_three_lists_of_the_core_agree():
    contract = importlinter_core()
    assert len(contract) > 20  # the contract was read, not an empty section
    assert strict_mypy_core() == contract, "pyproject.toml's strict mypy list vs .importlinter's core-is-pure"
    assert diagram_core() == contract, "docs/ARCHITECTURE.md's core block vs .importlinter's core-is-pure"


def test_every_orchestrator_module_has_a_layer():
    core = importlinter_core()
    unplaced = sorted(orchestrator_modules() - core - set(NOT_CORE))
    assert unplaced == [], f"modules in no layer (add to the core lists, or to NOT_CORE with its layer): {unplaced}"
    assert not (core & set(NOT_CORE))


def test_the_adapter_and_composition_packages_hold_only_their_named_packages():
    for package, members in NOT_CORE.items():
        folder = ROOT / package.replace(".", "/")
        found = {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}
        loose = {p.name for p in folder.glob("*.py") if p.name != "__init__.py"}
        assert found == members and not loose, f"{package}: {sorted(found | loose)}"
        docstring = (folder / "__init__.py").read_text()
        assert all(f"``{m}``" in docstring for m in members), f"{package}'s docstring names its packages"


def test_the_core_may_import_neither_layer_package_whole():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    forbidden = set(config["importlinter:contract:core-is-pure"]["forbidden_modules"].split())
    assert set(NOT_CORE) <= forbidden


def test_store_is_grouped_by_job():
    """store/'s modules sit in schema/, write/, read/ or check/, but for the
    few every job shares (docs/ARCHITECTURE.md)."""
    shared = {"__init__", "store", "engine", "errors", "chain", "transactions", "text_codec", "text_escape"}
    top = {p.stem for p in (ROOT / "store").glob("*.py")}
    assert top == shared, f"store/ modules outside schema/, write/, read/, check/: {sorted(top - shared)}"
    jobs = {p.name for p in (ROOT / "store").iterdir() if (p / "__init__.py").exists()}
    assert jobs == {"schema", "write", "read", "check"}


# Basenames that several modules may share, each with one meaning wherever it
# appears: a package's errors, its Protocols (ports) and its web app.
SHARED_BASENAMES = {"__init__.py", "errors.py", "ports.py", "app.py"}


def test_one_basename_per_meaning():
    names: dict[str, list[str]] = {}
    for top in ("orchestrator", "sandbox", "store", "policies", "cli", "bench", "scripts"):
        for path in (ROOT / top).rglob("*.py"):
            names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    repeated = {n: paths for n, paths in names.items() if len(paths) > 1 and n not in SHARED_BASENAMES}
    assert repeated == {}, repeated
