"""Jinja2 templates for the viewer, with autoescaping on for every template
(model output, tool output and tasks are hostile text). ``Links`` is the
one place that knows whether pages are served or exported to files."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from jinja2 import Environment, PackageLoader, select_autoescape


@dataclass(frozen=True)
class Links:
    """URLs between pages: server routes, or flat file names in a bundle."""

    static: bool = False

    def runs(self) -> str:
        return "index.html" if self.static else "/"

    def run(self, run_id: str) -> str:
        return f"run-{run_id}.html" if self.static else f"/run/{run_id}"

    def chain(self, run_id: str, seq: int | None = None) -> str:
        base = f"chain-{run_id}.html" if self.static else f"/run/{run_id}/chain"
        return base if seq is None else f"{base}#seq-{seq}"

    def compare(self, a: str, b: str) -> str:
        return f"compare-{a}-{b}.html" if self.static else "/compare?" + urlencode({"a": a, "b": b})


def when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


def dollars(value: float | None) -> str:
    return "-" if value is None else f"${value:.6f}"


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def signed(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    if not value:
        return "0"
    return f"{value:+.{digits}f}"


def size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


def make_environment() -> Environment:
    env = Environment(
        loader=PackageLoader("cli.view", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters.update(when=when, dollars=dollars, secs=secs, signed=signed, size=size, short=lambda s: (s or "")[:12])
    return env


class Renderer:
    def __init__(self, links: Links) -> None:
        self.links = links
        self.env = make_environment()

    def page(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(links=self.links, static=self.links.static, **context)
