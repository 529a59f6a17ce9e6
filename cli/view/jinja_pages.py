"""Jinja2 templates for the viewer, with autoescaping on for every template
(model output, tool output and tasks are hostile text). ``Links`` is the
one place that knows whether pages are served or exported to files."""

from __future__ import annotations

import base64
import hashlib
import re
import time
from dataclasses import dataclass
from functools import cache
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from orchestrator.canonical import readable_text
from orchestrator.costing import money

SAFE_NAME = re.compile(r"[A-Za-z0-9_-]{1,100}")


def file_id(value: str) -> str:
    """An id from the store as part of a bundle's file name: as is when it is
    plainly safe there, else its sha256 (a hostile store's id cannot name a
    path outside the bundle)."""
    return value if SAFE_NAME.fullmatch(value) else hashlib.sha256(value.encode()).hexdigest()[:32]


@dataclass(frozen=True)
class Links:
    """URLs between pages: server routes, or flat file names in a bundle."""

    static: bool = False

    def runs(self) -> str:
        return "index.html" if self.static else "/"

    def run(self, run_id: str) -> str:
        return f"run-{file_id(run_id)}.html" if self.static else f"/run/{run_id}"

    def turn(self, run_id: str, turn: int, page: int | None) -> str:
        """A turn on the run page; served pages show some turns per page."""
        if self.static or page is None:
            return f"#turn-{turn}"
        return f"/run/{run_id}?page={page}#turn-{turn}"

    def chain(self, run_id: str, seq: int | None = None) -> str:
        base = f"chain-{file_id(run_id)}.html" if self.static else f"/run/{run_id}/chain"
        return base if seq is None else f"{base}#seq-{seq}"

    def chain_status(self, run_id: str) -> str:
        """The served frame that verifies a run's chain and shows the outcome."""
        return f"/run/{run_id}/verified"

    def compare(self, a: str, b: str) -> str:
        return f"compare-{file_id(a)}-{file_id(b)}.html" if self.static else "/compare?" + urlencode({"a": a, "b": b})

    def batches(self) -> str:
        return "batches.html" if self.static else "/batches"

    def batch(self, batch_id: str) -> str:
        """A batch's page (in a bundle, named by ``file_id``)."""
        return f"batch-{file_id(batch_id)}.html" if self.static else "/batch/" + quote(batch_id, safe="")

    def batch_runs(self, batch_id: str) -> str | None:
        """The runs page filtered to a batch (served pages only)."""
        return None if self.static else "/?" + urlencode({"batch": batch_id})


def when(ts: float | None) -> str:
    return "-" if ts is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(ts)) + "Z"


dollars = money.dollars  # the viewer's figures read as the terminal's


def secs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}s"


def count(value: float | None) -> str:
    """A token count; "-" when absent (the server sent none), never 0."""
    return "-" if value is None else f"{value:.0f}"


def signed(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    if not value:
        return "0"
    return f"{value:+.{digits}f}"


def rate(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def size(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n} B" if n < 1024 else f"{n / 1024:.1f} KiB"


GOOD = frozenset({"COMPLETED", "PASS", "finished", "COMMITTED", "allow", "verified"})
NEUTRAL = frozenset({"IMPORTED"})
"""Neither a pass nor a failure: an imported run was never verified here."""
WARN = frozenset({"SUSPECT"})
"""The verifier passed, but the patch reached for the verification: never a pass."""
LONG_CHARS = 600
LONG_LINES = 12
MARK = "<mark>"


def badge(status: str | None) -> Markup:
    kind = "ok" if status in GOOD else "neutral" if status in NEUTRAL else "warn" if status in WARN else "bad"
    return Markup(f'<span class="badge {kind}">{escape(status or "-")}</span>')


def marked(text: str | None, query: str | None = None) -> Markup:
    """``text`` escaped, each occurrence of ``query`` (any case) in a <mark>.
    The text and the query are both escaped: neither can open a tag."""
    text = text or ""
    if not query:
        return escape(text)
    parts: list[str] = []
    at = 0
    for hit in re.finditer(re.escape(query), text, re.IGNORECASE):
        parts += [escape(text[at:hit.start()]), f"{MARK}{escape(hit.group())}</mark>"]
        at = hit.end()
    return Markup("".join(parts)) + escape(text[at:])


def text_block(text: str | None, label: str = "output", query: str | None = None, css: str = "") -> Markup:
    """Text in a <pre>, collapsed in a <details> when long; a search's hits
    are marked and open the <details> they are in."""
    if not text:
        return Markup('<span class="muted">(empty)</span>')
    body = marked(text, query)
    pre = Markup(f'<pre class="{escape(css)}">' if css else "<pre>") + body + Markup("</pre>")
    lines = text.count("\n") + 1
    if len(text) > LONG_CHARS or lines > LONG_LINES:
        opened = " open" if MARK in body else ""
        return Markup(f"<details{opened}><summary>{escape(label)} ({len(text)} characters, {lines} lines)</summary>"
                      ) + pre + Markup("</details>")
    return pre


def _diff_class(line: str) -> str:
    if line[:3] in ("+++", "---"):
        return "file"
    if line[:2] == "@@":
        return "hunk"
    return {"+": "add", "-": "del"}.get(line[:1], "ctx")


def diff_block(text: str) -> Markup:
    spans = "".join(f'<span class="{_diff_class(line)}">{escape(line)}</span>' for line in text.splitlines())
    return Markup(f'<pre class="diff">{spans}</pre>')


def _readable(value: object) -> object:
    """Every printed value as text a page can be encoded in: a recorded name
    or output byte that is not UTF-8 shows as \\xNN (``readable_text``)."""
    if isinstance(value, Markup):
        return Markup(readable_text(value))
    return readable_text(value) if isinstance(value, str) else value


@cache
def make_environment() -> Environment:
    """One environment per process: compiled templates are kept across
    applications and bundles (nothing in it depends on them)."""
    env = Environment(
        loader=PackageLoader("cli.view", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True, lstrip_blocks=True, finalize=_readable,
    )
    env.filters.update(when=when, dollars=dollars, secs=secs, signed=signed, count=count, size=size,
                       short=lambda s: (s or "")[:12])
    env.globals.update(rate=rate, badge=badge, text_block=text_block, diff_block=diff_block, hl=marked, MARK=MARK)
    return env


SCRIPTS = ("run_search", "runs_filter")
"""The only scripts a page may run: inline, for the static bundle, allowed
by their sha256 in the page's Content-Security-Policy. Anything else (a
script that got past escaping, an event handler attribute) is blocked."""


def content_security_policy(scripts: dict[str, str]) -> str:
    hashes = " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()}'" for text in scripts.values()
    )
    return (
        f"default-src 'none'; style-src 'unsafe-inline'; script-src {hashes}; img-src data:; frame-src 'self'; "
        "form-action 'self'"
    )


class Renderer:
    def __init__(self, links: Links) -> None:
        self.links = links
        self.env = make_environment()
        loader = self.env.loader
        assert loader is not None
        self.scripts = {name: loader.get_source(self.env, f"{name}.js")[0] for name in SCRIPTS}
        self.csp = content_security_policy(self.scripts)

    def chain(self, run_id: str, seq: int) -> Markup:
        """A link to a row's position in its run's hash chain."""
        return Markup(
            f'<a class="chainlink" href="{escape(self.links.chain(run_id, seq))}" title="hash-chain '
            f'position">#{seq}</a>'
        )

    def page(self, name: str, **context: Any) -> str:
        return self.env.get_template(name).render(
            links=self.links,
            static=self.links.static,
            chain=self.chain,
            scripts={k: Markup(v) for k, v in self.scripts.items()},
            csp=self.csp,
            **context,
        )
