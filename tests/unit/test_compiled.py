"""The hot path runs compiled (setup.py, ``make compile``) unless JOBS_COMPILE=0 asked
for plain Python: a build that fell back to plain Python without being asked (no
compiler, a module mypyc cannot compile) would pass every other test and be a third
slower; here it fails."""

from __future__ import annotations

import importlib
import os
import time

import pytest

from devtools import compiled


def test_compiled_modules_txt_names_existing_modules() -> None:
    sources = compiled.hot_path()
    assert sources, "compiled_modules.txt lists the hot path"
    assert all(source.exists() for source in sources), "a listed module was moved or removed"


@pytest.mark.skipif(os.environ.get("JOBS_COMPILE") == "0", reason="plain Python was asked for")
def test_every_hot_path_module_is_imported_compiled() -> None:
    plain = [
        compiled.module_name(source)
        for source in compiled.hot_path()
        if not str(importlib.import_module(compiled.module_name(source)).__file__).endswith(".so")
    ]
    assert plain == [], "imported as plain Python; run `make compile` and read its warnings"


def test_a_source_edited_after_compiling_is_reported_stale() -> None:
    source = compiled.hot_path()[0]
    built = compiled.compiled_file(source)
    if built is None:
        pytest.skip("not compiled (JOBS_COMPILE=0)")
    before = source.stat().st_mtime
    try:
        os.utime(source, (time.time(), built.stat().st_mtime + 10))
        assert compiled.stale() == [str(source.relative_to(compiled.ROOT))]
    finally:
        os.utime(source, (before, before))
    assert compiled.stale() == []
