"""The README's layout table names every top-level directory of the tree, and only those."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Made by tools, not part of the tree a clone holds.
GENERATED = re.compile(r"^(\..*|__pycache__|build|dist|.*\.egg-info)$")


def layout_paths() -> set[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)/` \|", section, re.M))


def test_the_layout_table_matches_the_top_level_directories() -> None:
    directories = {p.name for p in ROOT.iterdir() if p.is_dir() and not GENERATED.match(p.name)}
    assert layout_paths() == directories


RUNTIME = ("jobcore", "leasekeeper", "producer", "workers", "schemas")


def layout_rows() -> dict[str, str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"^\| `([^`]+)/` \| (.*) \|$", section, re.M))


def test_each_runtime_package_row_names_its_folders() -> None:
    """The second level too: a runtime package's row names each folder of it (the
    leasekeeper's concept folders, the producer's scheduler and outbox), and no folder
    that is gone."""
    rows = layout_rows()
    for package in RUNTIME:
        folders = {p.parent.name for p in (ROOT / package).glob("*/__init__.py")}
        named = set(re.findall(r"`(?:[\w]+/)?([\w]+)/`", rows[package]))
        assert folders <= named, f"{package}/: the README's layout row lacks {folders - named}"
        stale = {n for n in named if (ROOT / package / n).is_dir() is False} - {package}
        assert not stale, f"{package}/: the README's layout row names {stale}, which are gone"
