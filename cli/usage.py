"""How help reads: usage lines and metavars in click's conventional forms.

typer 0.29 writes a required argument as ``{task}``, an optional list as
``[[RUN]...]...`` typed ``<list[str]>``, and every text option as ``<str>``,
even one with a fixed set of values. Escrow's help reads ``TASK``,
``[RUN]...`` and ``--by <model|day|...>`` instead."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from typer.core import TyperArgument, TyperOption


def element_type(shown: str) -> str:
    """``<list[str]>`` as ``<str>``: the name or the help says it repeats."""
    return shown.replace("<list[", "<").replace("]>", ">")


class ConventionalArgument(TyperArgument):
    """A positional argument shown as NAME, [NAME] or NAME... ."""

    def _shown(self) -> str:
        return (self.metavar or self.name or "").upper()

    def _usage_display_name(self) -> str:
        name = self._shown() if self.required else f"[{self._shown()}]"
        return name + ("..." if self.nargs != 1 else "")

    def _rich_display_name(self) -> str:
        return self._shown() + ("..." if self.nargs != 1 else "")

    def display_type(self, ctx: Any) -> str:
        return element_type(super().display_type(ctx))


class ConventionalOption(TyperOption):
    """A repeatable option typed by its element, as click shows one."""

    def display_type(self, ctx: Any) -> str:
        return element_type(super().display_type(ctx))


def conventional(command: Any) -> Any:
    """The command (and a group's subcommands) with conventional argument
    forms. (typer vendors its own click: its classes are typer's.)"""
    for param in command.params:
        if type(param) is TyperArgument:
            param.__class__ = ConventionalArgument  # same state, other help forms
        elif type(param) is TyperOption:
            param.__class__ = ConventionalOption
    for sub in getattr(command, "commands", {}).values():
        conventional(sub)
    return command


def choices(values: Iterable[Any]) -> str:
    """An option's metavar listing its fixed values: ``<a|b|c>``."""
    return "<" + "|".join(str(v) for v in values) + ">"
