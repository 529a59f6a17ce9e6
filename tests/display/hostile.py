"""Terminal attacks a model or a tool can write, each with a marker so a test
can tell its own bytes from the display's: the raw form must never reach the
terminal, and its escaped form (``printable``) must be what is shown."""

from __future__ import annotations

PAYLOADS = {
    "osc52 clipboard": "\x1b]52;c;Y3VybCBldmlsLnNo\x07",
    "osc0 title": "\x1b]0;OWNEDTITLE\x07",
    "osc title with ST": "\x1b]2;OWNEDST\x1b\\",
    "sgr8 hidden text": "\x1b[8mHIDDENTEXT\x1b[0m",
    "cursor up and erase": "\x1b[3A\x1b[2KUPERASE",
    "clear screen": "\x1b[H\x1b[2JCLEARED",
    "c1 csi": "\u009b8mCONECSI",
    "c1 osc": "\u009d0;CONEOSC\u009c",
    "bare esc": "BARE\x1bESC",
    "bell": "RING\x07BELL",
    "backspace overwrite": "rm -rf ~\x08\x08\x08\x08\x08\x08\x08\x08BACKSP",
    "carriage return overwrite": "EVILCR\rGOODCR",
    "bidi override": "BIDI\u202etxt.exe",
    "bidi isolate": "ISO\u2066LATE\u2069",
    "delete": "DEL\x7fETE",
    "nul": "NUL\x00BYTE",
    "line separator": "LINE\u2028SEP",
}
RAW_CONTROL_CHARS = set("\x1b\x07\x08\x7f\x00\u009b\u009d\u009c\u202e\u2066\u2069\u2028")


def squeezed(text: str) -> str:
    """Text without its whitespace and the output's quote bar: what a shown
    text keeps once ``escrow show`` has folded it to the terminal's width."""
    return "".join(text.replace("│", "").split())
