"""The CLI imports a sub-command's module only when that command runs, and
its help is the help of the eagerly built command set, word for word."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.core import TyperGroup
from typer.testing import CliRunner

from cli.main import COMMANDS, MODULES, SETTINGS, app, commands_of, root
from cli.usage import conventional

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("sqlalchemy", "sqlmodel", "docker", "httpx", "pydantic", "rich", "store", "sandbox", "orchestrator")


class ConventionalGroup(TyperGroup):
    """Help in the forms ``cli.usage`` gives, as the lazy group gives them."""

    def get_command(self, ctx, cmd_name):
        command = super().get_command(ctx, cmd_name)
        return None if command is None else conventional(command)


def eager_app() -> typer.Typer:
    """Every module registered up front, as the command was built before."""
    eager = typer.Typer(name="escrow", help=app.info.help, no_args_is_help=True, cls=ConventionalGroup, **SETTINGS)
    eager.callback()(root)
    for module in MODULES:
        importlib.import_module(f"cli.{module}").register(eager)
    return eager


def help_of(target: typer.Typer, *argv: str, columns: int = 80) -> str:
    result = CliRunner().invoke(target, [*argv, "--help"], env={"COLUMNS": str(columns)})
    assert result.exit_code == 0, result.output
    return result.output


def test_the_command_list_is_what_the_modules_register() -> None:
    registered = {name: module for module in MODULES for name in commands_of(module)}
    assert [(name, module) for name, module, _ in COMMANDS] == list(registered.items())
    group = typer.main.get_group(eager_app())
    assert [name for name, _, _ in COMMANDS] == group.list_commands(None)  # type: ignore[arg-type]
    for name, _, first_paragraph in COMMANDS:
        command = group.commands[name]
        assert first_paragraph == " ".join((command.help or "").partition("\n\n")[0].split()), name


@pytest.mark.parametrize("columns", [80, 120, 200])
def test_help_lists_every_command_as_the_eager_command_did(columns: int) -> None:
    lazy = help_of(app, columns=columns)
    assert lazy == help_of(eager_app(), columns=columns)
    listed = lazy.split("Commands:\n", 1)[1]
    assert [line.split()[0] for line in listed.splitlines() if line.startswith("  ")] == [n for n, _, _ in COMMANDS]


@pytest.mark.parametrize("name", [name for name, _, _ in COMMANDS])
def test_each_command_help_is_unchanged(name: str) -> None:
    assert help_of(app, name) == help_of(eager_app(), name)


def imported_after(*argv: str) -> list[str]:
    """The top-level packages and cli modules a fresh interpreter holds after ``escrow ARGV``."""
    probe = (
        "import sys, json\n"
        "from typer.testing import CliRunner\n"
        "from cli.main import app\n"
        f"result = CliRunner().invoke(app, {list(argv)!r})\n"
        "assert result.exit_code == 0, result.output\n"
        "print(json.dumps(sorted({m if m.startswith('cli.') else m.split('.')[0] for m in sys.modules})))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def test_help_imports_no_sub_command_and_no_store() -> None:
    loaded = imported_after("--help")
    assert not [m for m in loaded if m.startswith("cli.") and m != "cli.main"]
    assert not set(HEAVY) & set(loaded)


def test_a_command_imports_its_own_module_only() -> None:
    loaded = imported_after("show", "--help")
    assert "cli.store_cmd" in loaded
    others = {f"cli.{m}" for m in MODULES} - {"cli.store_cmd"}
    assert not others & set(loaded)
    assert not {"docker", "httpx"} & set(loaded)


@pytest.mark.parametrize(("argv", "code"), [(("report", "--help"), 0), (("report", "--by", "nothing"), 2),
                                            (("runs", "--help"), 0)])
def test_a_report_or_listing_help_or_usage_error_loads_no_store_and_no_launch(argv: tuple[str, ...],
                                                                               code: int) -> None:
    """The store (SQLAlchemy) and the launch package (the loop, Docker, HTTP)
    load when a report runs, not to print its help or refuse its flags."""
    probe = (
        "import sys, json\n"
        "from cli.main import main\n"
        f"sys.argv = ['escrow', *{list(argv)!r}]\n"
        "try:\n    main()\nexcept SystemExit as stop:\n    code = stop.code\n"
        "print(code, json.dumps(sorted(sys.modules)))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    exit_code, loaded = out.stdout.splitlines()[-1].split(" ", 1)
    assert int(exit_code) == code
    heavy = {"sqlalchemy", "sqlmodel", "orchestrator.composition.launch", "docker", "httpx"}
    assert not heavy & set(json.loads(loaded))
