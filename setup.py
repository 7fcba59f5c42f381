"""Build hook: the per-job hot path is compiled to C with mypyc; everything else,
and the whole package when compiling is impossible, stays plain Python.

Why: with all of a leasekeeper's and a worker's Python on one core, a no-op job
cost 0.109 ms of CPU, nearly all of it interpreted bytecode spread thinly over the
claim, settle and fairness code (no single cost above 8%). The modules below are
already fully typed (``mypy --strict``), so mypyc compiles them as they are; the
same drain then costs 0.083-0.095 ms a job (BENCHMARKS.md section 11). The package metadata lives in
pyproject.toml; this file only adds the extension modules.

- ``JOBS_COMPILE=0`` builds plain Python (a machine without a C compiler, or to
  debug with a pure-Python traceback).
- A failed compile (no compiler, no Python headers) warns and leaves plain Python:
  the compiled modules are an optimisation, never a requirement.
- After editing one of these modules in a source checkout, rebuild them
  (``make compile``; ``make test`` and ``make bench`` do it): a compiled module
  is imported in preference to its source. The test suite refuses to run against
  stale ones.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent

# One list, read by the tests' staleness check too (``devtools/compiled.py``).
HOT_PATH = [
    name
    for line in (ROOT / "compiled_modules.txt").read_text().splitlines()
    if (name := line.split("#", 1)[0].strip())
]


GROUP = "jobcore.hotpath"


class OptionalBuildExt(build_ext):
    """Build the compiled modules if possible; otherwise remove what was built and
    carry on as plain Python (a partial set would fail at import: every module
    needs the one shared library)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:
            for output in self.get_outputs():
                Path(output).unlink(missing_ok=True)
            print(
                f"warning: compiling the hot path failed ({exc}); plain Python it is",
                file=sys.stderr,
            )


def extensions() -> list[Any]:
    if os.environ.get("JOBS_COMPILE", "1") == "0":
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("warning: mypyc is not installed; plain Python it is", file=sys.stderr)
        return []
    # A build has none of the third-party packages (click, grpc, Kafka) nor their
    # stubs: their values are plain Python objects to compiled code either way, so
    # what strict checking says of them here is moot (``make lint`` checks it all).
    relaxed = ["--ignore-missing-imports", "--allow-subclassing-any", "--no-warn-unused-ignores"]
    try:
        # The modules' one shared library goes inside a package (jobcore/), under a
        # fixed name: at the top level, an editable install would not find it.
        return list(mypycify([*relaxed, *HOT_PATH], opt_level="3", group_name=GROUP))
    except (Exception, SystemExit) as exc:
        print(
            f"warning: the hot path cannot be compiled ({exc}); plain Python it is", file=sys.stderr
        )
        return []


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
