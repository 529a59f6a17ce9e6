"""The program that starts the executor in the container is whole: every
``sandbox`` module the executor's modules import is shipped in it, after
the module it needs; they import nothing else but the standard library; the
program compiles and fits in one argument; and, run as the container runs it
(``python3 -I -S -c``, where no ``sandbox`` package can be found), it builds
its modules and the executor says hello. No module of sandbox/ hides a name
from the linter (``noqa: F821``): each imports what it uses."""

from __future__ import annotations

import ast
import json
import struct
import subprocess
import sys
from pathlib import Path

from sandbox.executor import COMMAND, GUEST_MODULES, GUEST_SOURCES, PROGRAM

SANDBOX = Path(__file__).resolve().parents[2] / "sandbox"
MAX_ARG_STRLEN = 32 * 4096  # Linux's cap on one argv string


def imported(source: str) -> set[str]:
    """The top-level names of the modules ``source`` imports, dotted for sandbox's."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_every_sandbox_module_the_executor_imports_is_shipped_before_its_importer():
    shipped: list[str] = []
    for name, source in GUEST_SOURCES.items():
        needs = {module for module in imported(source) if module.split(".")[0] == "sandbox"}
        assert needs <= set(shipped), f"{name} imports {sorted(needs - set(shipped))}, not shipped before it"
        shipped.append(name)
    assert shipped == [f"sandbox.{module}" for module in GUEST_MODULES]
    assert shipped[-1] == "sandbox.executor_script"


def test_the_executor_modules_use_only_the_standard_library():
    for name, source in GUEST_SOURCES.items():
        outside = {module for module in imported(source)
                   if module.split(".")[0] not in sys.stdlib_module_names and not module.startswith("sandbox.")}
        assert outside == set(), f"{name} imports {sorted(outside)}, which the container's python3 lacks"
    loader = imported((SANDBOX / "guest_loader.py").read_text(encoding="utf-8"))
    assert {module.split(".")[0] for module in loader} <= sys.stdlib_module_names


def test_the_program_compiles_and_fits_in_one_argument():
    compile(PROGRAM, "escrow-executor", "exec")
    assert len(PROGRAM.encode()) < MAX_ARG_STRLEN
    assert COMMAND[-2] == PROGRAM and COMMAND[-1] == "escrow-executor"


def test_run_as_in_the_container_the_program_builds_its_modules_and_says_hello(tmp_path):
    """With its stdin closed the executor says hello and ends (the host is
    gone before any request, so nothing is forked or killed)."""
    done = subprocess.run([sys.executable, *COMMAND[1:]], stdin=subprocess.DEVNULL, capture_output=True,
                          cwd=tmp_path, timeout=30, check=False)
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    kind, size = struct.unpack_from(">BI", done.stdout)
    assert chr(kind) == "H" and len(done.stdout) == 5 + size
    hello = json.loads(done.stdout[5:])
    assert hello["version"] == 1 and hello["pid"] > 0


def test_no_module_of_sandbox_hides_a_name_from_the_linter():
    hiding = [str(path.relative_to(SANDBOX)) for path in sorted(SANDBOX.rglob("*.py"))
              if "noqa: F821" in path.read_text(encoding="utf-8")]
    assert hiding == []
