"""The leasekeeper's folders and their layers, read from the source with ``ast``.

``leasekeeper/`` holds one folder per concept and no module of its own. The folders
are layered: a module imports its own folder and the layers below it, never one
beside or above. ``core`` (the lease state machine) is at the bottom, the features
on top of it (the core calls them only through ``core/hooks.py``), the views that read
both, then ``engine``, the composition root that builds the core, the features and
their ports; then the Kafka side and the RPC front that drive the engine, the
dead-letter tools, the dashboard, and the operator's commands at the top.

``CROSSINGS`` lists the modules allowed to import across, each a debt; it is empty
and may only shrink: a new crossing fails, and so does an entry that no longer crosses
(delete it).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "leasekeeper"

LAYERS = {
    "core": 0,
    "breaker": 1,
    "deferral": 1,
    "fairness": 1,
    "limits": 1,
    "ordering": 1,
    "overflow": 1,
    "views": 2,
    "engine": 3,
    "kafka": 4,
    "rpc": 4,
    "dlq": 5,
    "dashboard": 6,
    "ops": 7,
}

CROSSINGS: dict[str, set[str]] = {}


def folders_imported(path: Path) -> set[str]:
    """The leasekeeper folders ``path`` imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        for name in names:
            parts = name.split(".")
            if parts[0] == "leasekeeper" and len(parts) > 1:
                found.add(parts[1])
    return found


def crossings() -> dict[str, set[str]]:
    """Per module, the folders it imports that are beside or above its own."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) < 2:
            continue
        folder = relative.parts[0]
        upward = {
            other
            for other in folders_imported(path)
            if other != folder and LAYERS[other] >= LAYERS[folder]
        }
        if upward:
            found[path.relative_to(ROOT).as_posix()] = upward
    return found


def test_every_module_lives_in_a_concept_folder() -> None:
    loose = [p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"modules at the top of leasekeeper/: {loose}; put each in its folder"
    folders = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()}
    assert folders == set(LAYERS), f"folders {sorted(folders)}; LAYERS names {sorted(LAYERS)}"


def test_no_module_imports_a_layer_beside_or_above_its_own() -> None:
    found = crossings()
    new = {
        module: sorted(folders - CROSSINGS.get(module, set()))
        for module, folders in found.items()
        if folders - CROSSINGS.get(module, set())
    }
    assert not new, (
        f"imports beside or above the module's layer: {new}; move the shared value down, "
        "or pass it in (see the layers in this test's docstring)"
    )


def test_the_list_of_crossings_only_shrinks() -> None:
    found = crossings()
    stale = {
        module: sorted(folders - found.get(module, set()))
        for module, folders in CROSSINGS.items()
        if folders - found.get(module, set())
    }
    assert not stale, f"crossings listed that no longer exist, delete them: {stale}"
