"""The README's ``receipts.py`` is tested in at most 10 lines with the plugin's
fixtures: the README's own test, run by pytest as a user runs it (in a project of
its own, warnings as errors, strict markers), with no Kafka."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w+)(?: ([\w.]+))?\n(.*?)^```", re.S | re.M)


def _blocks() -> dict[str, str]:
    return {name: body for _, name, body in BLOCK.findall((ROOT / "README.md").read_text())}


def test_the_readme_tests_receipts_in_ten_lines_with_the_fixtures(tmp_path: Path) -> None:
    blocks = _blocks()
    test = blocks["test_receipts.py"]
    assert len([line for line in test.splitlines() if line.strip()]) <= 10
    assert "def test_send_receipt(job_queue, job_producer)" in test
    (tmp_path / "receipts.py").write_text(blocks["receipts.py"])
    (tmp_path / "test_receipts.py").write_text(test)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    env.pop("KAFKA_BOOTSTRAP", None)
    # Loaded by name, as its entry point loads it once the package is installed.
    command = [sys.executable, "-m", "pytest", "-p", "jobtesting.plugin", "-p", "no:cacheprovider",
               "-W", "error", "--strict-markers", "-q", "test_receipts.py"]  # fmt: skip
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout
