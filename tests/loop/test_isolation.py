"""The core is pure at run time too: importing every core module (the
``core-is-pure`` contract's source modules, read from ``.importlinter``)
loads no HTTP, Docker, database or CLI library. import-linter checks the
import statements; this catches what it cannot see (an import inside a
function, a package ``__init__`` that pulls in an adapter). Checked in a
fresh interpreter."""

import configparser
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IO_LIBRARIES = ("httpx", "docker", "sqlalchemy", "sqlite3", "sqlmodel", "typer", "rich")


def core_modules() -> list[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    listed = config["importlinter:contract:core-is-pure"]["source_modules"].split()
    return sorted(listed)


def walk_code(modules: list[str]) -> str:
    return (
        "import importlib, pkgutil, sys\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        "    for info in pkgutil.walk_packages(getattr(module, '__path__', []), name + '.'):\n"
        "        importlib.import_module(info.name)\n"
        f"print(','.join(sorted(m for m in {IO_LIBRARIES!r} if m in sys.modules)))\n"
    )


def test_the_core_list_is_the_contracts_and_covers_the_loop():
    modules = core_modules()
    assert {"orchestrator.agent", "orchestrator.replay", "orchestrator.context", "orchestrator.costing",
            "orchestrator.toolset", "policies"} <= set(modules)


def test_importing_the_whole_core_loads_no_io_library():
    out = subprocess.run([sys.executable, "-c", walk_code(core_modules())], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "", f"the core loads I/O libraries: {out.stdout.strip()}"


def test_the_check_sees_an_adapter():
    # The same walk over an adapter does report its library: the check can fail.
    out = subprocess.run([sys.executable, "-c", walk_code(["orchestrator.adapters.model_client"])], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    assert "httpx" in out.stdout
