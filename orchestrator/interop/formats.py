"""Which format a source file is in, and reading it: source bytes in,
SourceTrajectory records out. Pure: no file or database access."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from orchestrator.interop import atif, inspect_eval, mini_swe_agent, openhands, openhands_v1, swe_agent
from orchestrator.interop.errors import FormatMismatch
from orchestrator.interop.records import FORMATS, SourceTrajectory
from orchestrator.interop.safe_read import ReadLimits, parse_json


class JsonFormat(Protocol):
    """A reader of one JSON trajectory format (each such module is one)."""

    def looks_like(self, doc: Any) -> bool: ...

    def parse(self, doc: Any, name: str) -> list[SourceTrajectory]: ...


JSON_FORMATS: dict[str, JsonFormat] = {
    atif.FORMAT: atif,
    swe_agent.FORMAT: swe_agent,
    mini_swe_agent.FORMAT: mini_swe_agent,
    openhands.FORMAT: openhands,
}


def detect_json(doc: Any) -> str | None:
    for fmt, module in JSON_FORMATS.items():
        if module.looks_like(doc):
            return fmt
    return None


def detect(data: bytes, name: str) -> str:
    """The format of ``data``, or FormatMismatch when it is in none we read."""
    if inspect_eval.looks_like(data):
        return inspect_eval.FORMAT
    fmt = detect_json(parse_json(data, name))
    if fmt is None:
        raise FormatMismatch(f"{name}: not a trajectory in any format Escrow reads ({', '.join(FORMATS)})", path=name)
    return fmt


def read_trajectories(
    data: bytes, name: str, fmt: str = "auto", limits: ReadLimits | None = None
) -> list[SourceTrajectory]:
    """Every trajectory in one source file. ``fmt`` is a format name or
    "auto"; a named format that does not fit the file is refused."""
    if fmt != "auto" and fmt not in FORMATS:
        raise FormatMismatch(f"--format takes auto or one of {', '.join(FORMATS)}, not {fmt!r}", format=fmt)
    if fmt == inspect_eval.FORMAT or (fmt == "auto" and inspect_eval.looks_like(data)):
        return inspect_eval.parse(data, name, limits)
    if inspect_eval.looks_like(data):
        raise FormatMismatch(f"{name}: is a zip archive (an Inspect .eval log?), not {fmt}", path=name, format=fmt)
    doc = parse_json(data, name)
    found = detect_json(doc)
    if fmt == "auto":
        if found is None:
            raise FormatMismatch(
                f"{name}: not a trajectory in any format Escrow reads ({', '.join(FORMATS)})", path=name
            )
        fmt = found
    elif not JSON_FORMATS[fmt].looks_like(doc):
        hint = f" (it looks like {found})" if found else ""
        raise FormatMismatch(f"{name}: not a {fmt} trajectory{hint}", path=name, format=fmt)
    return JSON_FORMATS[fmt].parse(doc, name)


def read_folder(files: Mapping[str, bytes], name: str, fmt: str = "auto") -> list[SourceTrajectory]:
    """The trajectory of a folder of source files (an OpenHands V1
    conversation: ``files`` by path relative to the folder)."""
    if not openhands_v1.looks_like(files):
        raise FormatMismatch(
            f"{name} is a directory but not an OpenHands V1 conversation folder "
            f"({openhands_v1.STATE} and events/event-*.json); give trajectory files", path=name)
    if fmt not in ("auto", openhands_v1.FORMAT):
        raise FormatMismatch(f"{name}: is an OpenHands V1 conversation folder, not {fmt}", path=name, format=fmt)
    return openhands_v1.parse(files, name)
