"""One exit-code table: every error class takes its code from it, no code has
two names, and docs/ARCHITECTURE.md prints exactly the generated table."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

import pytest

from orchestrator.errors import EscrowError
from orchestrator.exit_codes import ExitCode, markdown_table

ROOT = Path(__file__).resolve().parents[1]
# Run inside the container, read stdin.
SCRIPTS = {"sandbox.export_script", "sandbox.executor_script", "sandbox.command_seccomp"}


def _all_error_classes() -> list[type[EscrowError]]:
    for package in ("orchestrator", "store", "sandbox", "policies", "cli"):
        root = importlib.import_module(package)
        for info in pkgutil.walk_packages(root.__path__, package + "."):
            if info.name not in SCRIPTS and not info.name.startswith("orchestrator.adapters.fault_server.__main__"):
                importlib.import_module(info.name)
    found, todo = [], [EscrowError]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found


def test_every_error_class_uses_a_code_from_the_table():
    classes = _all_error_classes()
    assert len(classes) > 30  # the walk found the whole tree, not just the root
    strays = {cls.__qualname__: cls.exit_code for cls in classes if not isinstance(cls.exit_code, ExitCode)}
    assert strays == {}


def test_no_code_has_two_names():
    values = [code.value for code in ExitCode]
    assert len(values) == len(set(values))


@pytest.mark.parametrize("code, name", [(3, "STORE_MISSING"), (65, "POLICY_INVALID"), (9, "REPLAY_RECORDING_ENDS"),
                                        (11, "NOT_REPLAYABLE"), (71, "SANDBOX_FAILED")])
def test_codes_that_once_had_two_meanings_have_one(code, name):
    meanings = {cls.exit_code.name for cls in _all_error_classes() if int(cls.exit_code) == code}
    assert meanings <= {name} and ExitCode(code).name == name


def test_the_architecture_document_prints_the_table():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    printed = text.split("<!-- exit-codes:begin -->\n", 1)[1].split("\n<!-- exit-codes:end -->", 1)[0]
    assert printed == markdown_table()


def _tree_codes() -> dict[str, set[int]]:
    """Each class the docstring tree of ``orchestrator/errors.py`` names, with
    the codes bracketed after it (``A, B [2]`` gives both A and B code 2)."""
    import re

    import orchestrator.errors as errors

    doc = errors.__doc__ or ""
    tree = doc.split("::", 1)[1].split("\n\n", 2)[1]
    named: dict[str, set[int]] = {}
    for line in tree.splitlines():
        # The drawing and the note after two spaces are not names.
        drawn = re.split(r"\s{2,}", line.lstrip(" │├└─"), maxsplit=1)[0]
        pending: list[str] = []
        for token in re.finditer(r"([A-Z][A-Za-z]+)|\[(?:[A-Z_]+ )?(\d+)\]", drawn):
            if token[1]:
                pending.append(token[1])
            else:
                for name in pending:
                    named.setdefault(name, set()).add(int(token[2]))
                pending = []
    return named


def test_the_error_tree_in_the_docstring_names_every_class_with_its_code():
    """The tree drawn in orchestrator/errors.py is the exception reference, as
    httpx's is: every class is in it, with the code it really exits with."""
    drawn = _tree_codes()
    classes = {cls.__name__: int(cls.exit_code) for cls in _all_error_classes()}
    missing = sorted(set(classes) - set(drawn))
    assert missing == [], f"error classes missing from the tree in orchestrator/errors.py: {missing}"
    wrong = {name: (sorted(drawn[name]), code) for name, code in classes.items() if drawn[name] != {code}}
    assert wrong == {}, "tree code(s) vs the class's exit_code"
    stale = sorted(set(drawn) - set(classes))
    assert stale == [], f"the tree names classes that do not exist: {stale}"
