"""One name per concept: no two runtime classes share a name.

Two classes of one name (two ``Outcome``s, two ``Outbox``es) make a reader ask which
one a module means, and an import of the wrong one type-checks more often than not.
The allow-list is what is left to rename (the architecture issue's ratchet): it may
only shrink. Generated gRPC modules (``*_pb2*``) are not counted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("jobcore", "leasekeeper", "producer", "workers", "schemas")

# Names still defined more than once, with where (none today; an entry may only go).
ALLOWED: dict[str, set[str]] = {}


def defined() -> dict[str, set[str]]:
    where: dict[str, set[str]] = defaultdict(set)
    for package in RUNTIME:
        for path in (ROOT / package).rglob("*.py"):
            if "_pb2" in path.name:
                continue
            for node in ast.parse(path.read_text()).body:
                if isinstance(node, ast.ClassDef):
                    where[node.name].add(path.relative_to(ROOT).as_posix())
    return where


def test_no_two_runtime_classes_share_a_name() -> None:
    shared = {name: paths for name, paths in defined().items() if len(paths) > 1}
    new = {name: paths for name, paths in shared.items() if not paths <= ALLOWED.get(name, set())}
    assert not new, f"classes defined more than once (rename one): {new}"
    gone = {name for name in ALLOWED if name not in shared or shared[name] != ALLOWED[name]}
    assert not gone, f"renamed: take them out of ALLOWED (or narrow their entry): {gone}"
