"""Where the time goes: py-spy samples the leasekeeper and one worker during a drain.

py-spy attaches from outside (no change to the code under test);
``--nonblocking`` keeps it from pausing the process, so the drain runs at
nearly full speed while it is watched, and ``--gil`` samples only the thread
holding the GIL: in a CPU-bound Python process that is where the time goes
(threads waiting on a queue or a socket would otherwise fill the top). The collapsed stacks are
reduced to the functions holding the most samples ("self" time), which is
what ``BENCHMARKS.md`` lists as the top costs.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from benchmarks import procs, progress
from benchmarks.context import BenchContext
from benchmarks.ours import OurSystem

TOP = 12
# Jobs the profiled worker runs before sampling starts: it is serving by then.
WARM_JOBS = 500
IDLE_FRAMES = ("wait (threading.py", "select (selectors.py", "_wait_once", "sleep")


def py_spy() -> str | None:
    found = Path(sys.executable).parent / "py-spy"
    return str(found) if found.exists() else shutil.which("py-spy")


def profile_drain(
    ctx: BenchContext, queue: str, workers: int, schema_registry: str | None = None
) -> dict[str, Any]:
    """Drain ``queue`` again with ``workers`` workers for ``profile_s`` s under py-spy
    (in registry mode with ``schema_registry``: ``queue`` must be written in it)."""
    spy = py_spy()
    if spy is None:
        return {"status": "skipped: py-spy is not installed (pip install -e '.[bench]')"}
    config = ctx.config
    system = OurSystem(
        ctx.settings,
        queue,
        ctx.fresh_dir("profile"),
        partitions=config.partitions,
        schema_registry=schema_registry,
    )
    try:
        system.start_leasekeeper()
        system.start_workers("noop_app", workers, config.concurrency)
        assert system.leasekeeper is not None
        targets = {"leasekeeper": system.leasekeeper.pid, "worker": system.workers[0].pid}
        # Past the profiled worker's start-up (imports, the collector's one collection
        # before serving): a fixed 2 s sleep caught it on a slow machine.
        procs.wait_until(
            lambda: progress.count_of(system.progress_dir, targets["worker"]) >= WARM_JOBS,
            120,
            "the profiled worker's first jobs",
        )
        recorders = {
            name: _record(spy, pid, config.profile_s, system.workdir / f"{name}.folded")
            for name, pid in targets.items()
        }
        for recorder in recorders.values():
            recorder.wait(config.profile_s + 60)
        found = {}
        for name in targets:
            folded = system.workdir / f"{name}.folded"
            found[name] = summarize(folded) if folded.exists() else {"status": "no samples"}
            if folded.exists():  # kept beside the report: the input of a flame graph
                shutil.copyfile(folded, ctx.out_dir / f"profile-{name}.folded")
        return {"status": "ok", "seconds": config.profile_s, "workers": workers, **found}
    finally:
        system.stop()


def _record(spy: str, pid: int, seconds: float, out: Path) -> subprocess.Popen[bytes]:
    cmd = [
        spy, "record", "--pid", str(pid), "--duration", str(int(seconds)),
        "--rate", "200", "--nonblocking", "--gil", "--format", "raw", "--output", str(out),
    ]  # fmt: skip
    return procs.start(cmd, log=out.with_suffix(".log"))


def summarize(folded: Path) -> dict[str, Any]:
    """Top functions by self samples and by inclusive samples, from collapsed stacks."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in folded.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if not frames or any(idle in frames[-1] for idle in IDLE_FRAMES):
            continue
        total += count
        self_counts[_short(frames[-1])] += count
        for frame in {_short(f) for f in frames}:
            inclusive[frame] += count
    codec = Counter({k: v for k, v in inclusive.items() if _codec(k)})
    return {
        "busy_samples": total,
        "top_self": _shares(self_counts, total),
        "top_inclusive": _shares(Counter({k: v for k, v in inclusive.items() if _ours(k)}), total),
        # Where file and registry mode differ: the schema lookup and decoding.
        "codec_inclusive": _shares(codec, total),
    }


def _codec(frame: str) -> bool:
    return any(f"({m})" in frame for m in ("schemas/codec.py", "schemas/confluent.py"))


def _short(frame: str) -> str:
    """``func (path/to/module.py:123)`` -> ``func (module.py)``: lines split one cost apart."""
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"


def _ours(frame: str) -> bool:
    return any(f"({pkg}/" in frame for pkg in ("leasekeeper", "workers", "schemas", "jobcore"))


def _shares(counts: Counter[str], total: int) -> list[dict[str, Any]]:
    return [
        {"frame": frame, "samples": n, "share": round(n / total, 3) if total else 0.0}
        for frame, n in counts.most_common(TOP)
    ]
