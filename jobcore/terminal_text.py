"""Text a handler or a producer chose, made safe to show on an operator's terminal.

Error messages, tracebacks, job ids, types, tenants, ordering keys and payloads
come from code the operator does not control. Printed as they are, an escape
sequence in them reaches the terminal (clearing the screen, setting the window
title, writing a hyperlink), and, in ``rich`` output, square brackets read as
markup: ``[/data/in.csv]`` or ``[/]`` make ``rich`` raise, so one bad row breaks a
whole listing, and ``[link=...]`` forges one. Every command that shows such
text passes it through :func:`printable` (plain output) or :func:`escaped`
(text put into ``rich`` markup or table cells).
"""

from __future__ import annotations

from rich.markup import escape
from rich.text import Text

__all__ = ["cell", "escaped", "printable"]

# C0 controls (ESC among them), DEL and C1 controls (CSI, OSC, ... in one byte), shown
# as their escape (``\x1b``) so the text reads as it is and nothing reaches the terminal;
# and the bidirectional overrides and isolates, which reorder what follows them.
_VISIBLE = {code: f"\\x{code:02x}" for code in (*range(0x00, 0x20), 0x7F, *range(0x80, 0xA0))} | {
    code: f"\\u{code:04x}" for code in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))
}
_ONE_LINE = str.maketrans(_VISIBLE)
# A traceback keeps its lines and indentation.
_LINES = str.maketrans({code: shown for code, shown in _VISIBLE.items() if chr(code) not in "\n\t"})


def printable(value: object, *, lines: bool = False) -> str:
    """``value`` as text with every control character shown as its escape; newlines
    and tabs are kept only with ``lines`` (a traceback), else a value cannot start a
    line of its own that looks like the command's."""
    return str(value).translate(_LINES if lines else _ONE_LINE)


def escaped(value: object, *, lines: bool = False) -> str:
    """:func:`printable`, with ``rich`` markup escaped: for a table cell or a line
    that ``rich`` reads as markup."""
    return escape(printable(value, lines=lines))


def cell(value: object, *, wrap: bool = False) -> Text:
    """A table cell of :func:`printable` text that keeps to one line, ending in an
    ellipsis where its column is too narrow (unless ``wrap``): a row of a listing
    folded letter by letter over eight lines of an 80-column terminal cannot be read.
    ``Text`` is never read as markup, so nothing needs escaping."""
    if wrap:
        return Text(printable(value), overflow="fold")
    return Text(printable(value), no_wrap=True, overflow="ellipsis")
