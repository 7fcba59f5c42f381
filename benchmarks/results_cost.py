"""``python -m benchmarks.results_cost``: what job results cost a drain.

The same no-op drain (one leasekeeper, ``--workers`` worker processes, a backlog of
``--jobs`` jobs) in up to three variants, ``--pairs`` rounds, the order rotated each
round (the machine's speed drifts through a run; a fixed order would favour the side
that runs last):

- ``before``: the code from before results (``--before DIR``, a checkout of it, put
  first on the processes' ``PYTHONPATH``), handlers returning None (or, with
  ``--before-app result_app``, any older checkout returning 100 bytes: what a change
  to the result path saved);
- ``none``: this code, handlers returning None (no field on the wire, no record);
- ``100 B``: this code, handlers returning a 100-byte value (a result record each).

Measured per drain: jobs/s and the CPU-s per 1,000 jobs of the leasekeeper, the
workers and the broker; reported: each side's median, and each median against
``none`` (and ``none`` against ``before``). Written to ``results_cost.json``.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

from benchmarks.config import BenchConfig
from benchmarks.context import REPO, BenchContext, standalone
from benchmarks.scenarios.drain import drain_ours

DEFAULT_OUT = REPO / "benchmarks" / "results"
COMPONENTS = ("leasekeeper", "workers", "broker")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.results_cost")
    parser.add_argument("--jobs", type=int, default=50_000, help="jobs per drain [50000]")
    parser.add_argument("--pairs", type=int, default=5, help="rounds of every variant [5]")
    parser.add_argument("--workers", type=int, default=2, help="worker processes [2]")
    parser.add_argument("--before", type=Path, help="a checkout of the code before results")
    parser.add_argument("--before-app", default="noop_app", choices=("noop_app", "result_app"),
                        help="the before checkout's handlers: returning None, or 100 bytes "
                             "(what a change to the result path saves) [noop_app]")  # fmt: skip
    parser.add_argument("--only", action="append", choices=("before", "none", "100 B"),
                        help="run only this variant (repeatable) [all]")  # fmt: skip
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting one")
    parser.add_argument("--out", type=Path, help="results directory [benchmarks/results]")
    return parser.parse_args(argv)


def _variants(args: argparse.Namespace) -> list[tuple[str, str, list[str]]]:
    """(label, worker app, command prefix) of each variant."""
    found: list[tuple[str, str, list[str]]] = [("none", "noop_app", []),
                                               ("100 B", "result_app", [])]  # fmt: skip
    if args.before is not None:  # its own code first, this checkout's after
        found.insert(0, ("before", args.before_app,
                         ["env", f"PYTHONPATH={args.before.resolve()}"]))  # fmt: skip
    return [v for v in found if not args.only or v[0] in args.only]


def _drain(ctx: BenchContext, args: argparse.Namespace, queue: str, variant: tuple[
    str, str, list[str]
]) -> dict[str, Any]:  # fmt: skip
    label, app, prefix = variant
    row = drain_ours(ctx, workers=args.workers, concurrency=ctx.config.concurrency, app=app,
                     jobs=args.jobs, queue=queue, variant=label, prefix=prefix).row()  # fmt: skip
    per = row["cpu_s_per_1000_jobs"]
    per["total"] = round(sum(per.get(k, 0.0) for k in COMPONENTS), 4)
    return {"variant": label, "jobs_per_s": row["jobs_per_s"], "cpu_s_per_1000_jobs": per,
            "capped": row["capped"]}  # fmt: skip


def run(ctx: BenchContext, args: argparse.Namespace) -> dict[str, Any]:
    queue = ctx.backlog(args.jobs)
    variants = _variants(args)
    runs: list[dict[str, Any]] = []
    for pair in range(args.pairs):
        shift = pair % len(variants)
        for variant in variants[shift:] + variants[:shift]:
            row = _drain(ctx, args, queue, variant)
            row["pair"] = pair + 1
            runs.append(row)
            cpu = row["cpu_s_per_1000_jobs"]
            print(f"pair {pair + 1} {row['variant']:>6}: {row['jobs_per_s']:>9,.0f} jobs/s, "
                  f"CPU-s/1000 jobs {cpu['total']:.4f} (leasekeeper "
                  f"{cpu.get('leasekeeper', 0):.4f}, workers {cpu.get('workers', 0):.4f}, "
                  f"broker {cpu.get('broker', 0):.4f})", flush=True)  # fmt: skip
    medians = {
        label: {
            key: round(statistics.median(
                r["cpu_s_per_1000_jobs"].get(key, 0.0) for r in runs if r["variant"] == label
            ), 4)
            for key in (*COMPONENTS, "total")
        } | {"jobs_per_s": statistics.median(r["jobs_per_s"] for r in runs
                                              if r["variant"] == label)}
        for label, _, _ in variants
    }  # fmt: skip
    against = {
        f"{label} vs {base}": {
            key: _percent(medians[label][key], medians[base][key]) for key in (*COMPONENTS, "total")
        }
        for label, base in (("100 B", "none"), ("none", "before"), ("100 B", "before"))
        if not (base == "before" and label == "none" and args.before_app == "result_app")
        if label in medians and base in medians
    }
    return {"jobs": args.jobs, "workers": args.workers, "before_app": args.before_app,
            "runs": runs, "medians": medians,
            "percent": against}  # fmt: skip


def _percent(value: float, base: float) -> float | None:
    return round(100 * (value - base) / base, 1) if base else None


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.WARNING)
    args = parse(argv)
    out_dir = args.out or DEFAULT_OUT
    config = replace(BenchConfig.full(), jobs=args.jobs)
    with standalone(config, out_dir, pin=False, bootstrap=args.bootstrap) as ctx:
        result = run(ctx, args)
    (out_dir / "results_cost.json").write_text(json.dumps(result, indent=2) + "\n")
    for label, median in result["medians"].items():
        print(f"median {label:>6}: {median['jobs_per_s']:,.0f} jobs/s, CPU-s/1000 jobs "
              f"{median['total']:.4f}")  # fmt: skip
    for name, percent in result["percent"].items():
        # No broker figure with --bootstrap: that broker is not the benchmark's own.
        parts = ", ".join(
            f"{key} {percent[key]:+.1f}%" for key in COMPONENTS if percent[key] is not None
        )
        print(f"{name}: total {percent['total']:+.1f}% ({parts})")


if __name__ == "__main__":
    main()
