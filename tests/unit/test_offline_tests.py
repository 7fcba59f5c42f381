"""The runner of the no-Kafka tests hides Java and turns skips into failures: what
lets CI prove the testing package and the examples need neither."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from devtools.offline_tests import path_without_java


def test_the_rebuilt_path_finds_every_program_but_java(tmp_path: Path) -> None:
    bin_a, bin_b = tmp_path / "a", tmp_path / "b"
    for directory, names in ((bin_a, ["java", "tool"]), (bin_b, ["tool", "other", "javac"])):
        directory.mkdir()
        for name in names:
            program = directory / name
            program.write_text("#!/bin/sh\n")
            program.chmod(0o755)
    path = path_without_java(f"{bin_a}{os.pathsep}{bin_b}", tmp_path / "out")
    assert shutil.which("java", path=path) is None
    assert shutil.which("javac", path=path) is None
    assert Path(shutil.which("tool", path=path) or "").resolve() == bin_a / "tool"
    assert shutil.which("other", path=path) is not None


def test_a_skipped_test_fails_the_run(tmp_path: Path) -> None:
    (tmp_path / "test_skips.py").write_text(
        "import pytest\n\ndef test_ran():\n    pass\n\ndef test_skipped():\n    pytest.skip('no')\n"
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "devtools.no_skips", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), str(tmp_path)],
        capture_output=True, text=True, check=False, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
    )  # fmt: skip
    assert run.returncode == 1, run.stdout
    assert "1 failed, 1 passed" in run.stdout
    assert "skipped in a run where every test must run" in run.stdout
