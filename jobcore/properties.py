"""librdkafka client properties from a file, in the Java ``.properties`` format.

kcat (``-F``), the Kafka command-line tools (``--command-config``) and managed
Kafka consoles all hand out client settings in this format, so a user can pass
the very file they already have (``security.protocol=SASL_SSL``, ``sasl.*``,
``ssl.*``) to every command here with ``--kafka-config FILE`` or ``KAFKA_CONFIG``.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["PropertiesError", "load_properties", "parse_properties"]

_SEPARATORS = "=: \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


class PropertiesError(ValueError):
    """A properties file that cannot be read or parsed; the message names where."""


def load_properties(path: Path) -> dict[str, str]:
    """Read ``path``; raises PropertiesError naming the file (and line) on a mistake."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PropertiesError(f"cannot read Kafka config file {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise PropertiesError(f"Kafka config file {path} is not UTF-8 text") from None
    try:
        return parse_properties(text)
    except PropertiesError as exc:
        raise PropertiesError(f"Kafka config file {path}: {exc}") from None


def parse_properties(text: str) -> dict[str, str]:
    """Keys and values of ``text``: ``key=value``, ``key: value`` or ``key value``;
    ``#`` and ``!`` comment lines; a trailing backslash continues a line; backslash
    escapes (``\\t``, ``\\n``, ``\\uXXXX``, ``\\=``...) as Java reads them."""
    result: dict[str, str] = {}
    for number, line in _logical_lines(text):
        key, value = _split(line, number)
        if not key:
            raise PropertiesError(f"line {number}: a value with no key")
        result[key] = value
    return result


def _logical_lines(text: str) -> list[tuple[int, str]]:
    """Non-blank, non-comment lines with continuations joined, and where each began."""
    lines: list[tuple[int, str]] = []
    pending: str | None = None
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.lstrip(" \t\f")
        if pending is None:
            if not stripped or stripped[0] in "#!":
                continue
            start, pending = number, stripped
        else:
            pending += stripped
        if _continues(pending):
            pending = pending[:-1]
            continue
        lines.append((start, pending))
        pending = None
    if pending is not None:
        lines.append((start, pending))
    return lines


def _continues(line: str) -> bool:
    """An odd number of trailing backslashes: the last one joins the next line."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split(line: str, number: int) -> tuple[str, str]:
    """The key ends at the first unescaped separator; whitespace around it and one
    ``=`` or ``:`` belong to neither side."""
    i = 0
    while i < len(line) and line[i] not in _SEPARATORS:
        i += 2 if line[i] == "\\" else 1
    key, rest = line[:i], line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    return _unescape(key, number), _unescape(rest, number)


def _unescape(text: str, number: int) -> str:
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char != "\\" or i + 1 == len(text):
            out.append(char)
            i += 1
            continue
        code = text[i + 1]
        if code == "u":
            digits = text[i + 2 : i + 6]
            if len(digits) != 4 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise PropertiesError(f"line {number}: malformed \\uXXXX escape")
            out.append(chr(int(digits, 16)))
            i += 6
            continue
        out.append(_ESCAPES.get(code, code))
        i += 2
    return "".join(out)
