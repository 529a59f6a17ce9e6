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
# orchestrator's packages that are not core, by layer (docs/ARCHITECTURE.md).
NOT_CORE = {
    "orchestrator.model_client": "adapter (HTTP)",
    "orchestrator.fault_server": "adapter (our test model server)",
    "orchestrator.launch": "composition",
    "orchestrator.batch": "composition",
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
