"""Which hot-path modules run compiled (mypyc, see setup.py), and which compiled
ones are older than their sources.

A compiled module is imported in preference to its ``.py``: after an edit, until
``make compile`` runs again, the edit would silently not run. The test suite
refuses to start then (``tests/conftest.py``), and a unit test checks that a
build meant to compile did (``tests/unit/test_compiled.py``).
"""

from __future__ import annotations

import importlib.machinery
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIST = ROOT / "compiled_modules.txt"


def hot_path() -> list[Path]:
    """The sources compiled_modules.txt names (empty outside a source checkout)."""
    if not LIST.exists():
        return []
    names = (line.split("#", 1)[0].strip() for line in LIST.read_text().splitlines())
    return [ROOT / name for name in names if name]


def compiled_file(source: Path) -> Path | None:
    """The extension module built from ``source``, if there is one."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        built = source.with_suffix(suffix)
        if built.exists():
            return built
    return None


def stale() -> list[str]:
    """Sources edited after their module was compiled."""
    found = []
    for source in hot_path():
        built = compiled_file(source)
        if built is not None and source.stat().st_mtime > built.stat().st_mtime:
            found.append(str(source.relative_to(ROOT)))
    return found


def module_name(source: Path) -> str:
    return ".".join(source.relative_to(ROOT).with_suffix("").parts)
