"""``escrow show``'s patch: binary parts described by their sizes, never as base85; lines never folded."""

from __future__ import annotations

import io

from rich.console import Console

from cli.display.show import binary_described
from cli.display.whole import diff_line, print_whole

PATCH = """diff --git a/x.png b/x.png
new file mode 100644
index 0000000..1111111
GIT binary patch
literal 1234
zcmV+b1pLWlT

literal 0
HcmV?d00001

diff --git a/y.bin b/y.bin
index 2222222..3333333 100644
GIT binary patch
delta 20
bcmV+b1pLWlT

delta 40
HcmV?d00001

diff --git a/calc.py b/calc.py
--- a/calc.py
+++ b/calc.py
@@ -1 +1 @@
-a
+b""".splitlines()


def test_binary_parts_are_described_by_their_sizes_and_the_text_is_kept():
    shown = binary_described(PATCH)
    assert "zcmV+b1pLWlT" not in shown and "HcmV?d00001" not in shown
    assert shown[3:6] == ["(binary content, shown as its size; show --json has the exact patch)",
                          "  after: whole content, 1,234 bytes", "  before: whole content, 0 bytes"]
    assert "  after: a delta, 20 bytes" in shown and "  before: a delta, 40 bytes" in shown
    assert shown[-6:] == PATCH[-6:]


def test_a_patch_without_binary_parts_is_unchanged():
    assert binary_described(PATCH[-6:]) == PATCH[-6:]


def test_a_long_diff_line_reaches_a_narrow_terminal_whole():
    """Issue 27: rich folded a diff line at the console's width, so a copy
    from the screen was no longer the patch. Each line is one logical line."""
    long_line = "+x = '" + "long " * 30 + "'"
    out = io.StringIO()
    print_whole(Console(file=out, width=40, force_terminal=True, color_system=None),
                [diff_line(line) for line in [*PATCH[-6:], long_line]])
    assert out.getvalue().splitlines() == [*PATCH[-6:], long_line]
