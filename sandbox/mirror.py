"""Find the Debian mirror apt is already configured with.

Pure parsing of deb822 ``*.sources`` and one-line ``sources.list`` entries;
the host is never hard-coded, so a build uses whatever mirror (or snapshot
proxy) the machine already trusts.
"""

from __future__ import annotations

from pathlib import Path

from orchestrator.contract import Frozen
from sandbox.errors import ImageBuildError


class AptSource(Frozen):
    uri: str
    suite: str
    components: tuple[str, ...] = ()


def parse_deb822(text: str) -> list[AptSource]:
    """Entries of a deb822 ``.sources`` file (only ``Types: deb``)."""
    out: list[AptSource] = []
    for stanza in _stanzas(text):
        if "deb" not in stanza.get("types", "").split() or stanza.get("enabled", "yes") == "no":
            continue
        for uri in stanza.get("uris", "").split():
            for suite in stanza.get("suites", "").split():
                out.append(AptSource(uri=uri, suite=suite, components=tuple(stanza.get("components", "").split())))
    return out


def _stanzas(text: str) -> list[dict[str, str]]:
    stanzas: list[dict[str, str]] = []
    current: dict[str, str] = {}
    key = ""
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        if not line.strip():
            if current:
                stanzas.append(current)
            current, key = {}, ""
        elif line[0] in " \t" and key:
            current[key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            current[key] = value.strip()
    if current:
        stanzas.append(current)
    return stanzas


def parse_one_line(text: str) -> list[AptSource]:
    """Entries of a classic ``sources.list`` (``deb [opts] URI SUITE COMP...``)."""
    out: list[AptSource] = []
    for raw in text.splitlines():
        words = raw.split("#", 1)[0].split()
        if not words or words[0] != "deb":
            continue
        words = words[1:]
        if words and words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words = words[1:]
            words = words[1:]
        if len(words) >= 2:
            out.append(AptSource(uri=words[0], suite=words[1], components=tuple(words[2:])))
    return out


def primary_source(sources: list[AptSource]) -> AptSource:
    """The main archive: the first entry whose suite is a release name
    (not ``-updates``/``-security``/``-backports``) and whose URI is not a
    security archive."""
    for source in sources:
        if "-" not in source.suite and "security" not in source.uri:
            return source
    raise ImageBuildError(
        "no Debian release suite found in the apt sources; add a 'deb' entry for the main archive "
        "to /etc/apt/sources.list.d/*.sources or /etc/apt/sources.list",
    )


def configured_sources(etc_apt: Path = Path("/etc/apt")) -> list[AptSource]:
    """Every ``deb`` entry apt on this host is configured with."""
    found: list[AptSource] = []
    one_line = etc_apt / "sources.list"
    if one_line.is_file():
        found += parse_one_line(one_line.read_text(encoding="utf-8", errors="replace"))
    directory = etc_apt / "sources.list.d"
    if directory.is_dir():
        for path in sorted(directory.iterdir()):
            text = path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
            if path.suffix == ".sources":
                found += parse_deb822(text)
            elif path.suffix == ".list":
                found += parse_one_line(text)
    return found
