"""``python -m benchmarks [--scenario NAME] [--quick] ...``: run, write results, summarise.

A scenario that fails is recorded as "error: ..." and the run goes on, so one
broken peer never costs the numbers of the others.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import time
import traceback
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

from benchmarks import charts, meta, procs, report
from benchmarks.config import CODECS, SCENARIOS, BenchConfig, select
from benchmarks.context import REPO, BenchContext
from benchmarks.scenarios import registry

DEFAULT_OUT = Path(__file__).resolve().parent / "results"

log = logging.getLogger("benchmarks")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument(
        "--scenario", action="append", default=[], help=f"one of {', '.join(SCENARIOS)} or 1-9"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a small load (minutes, not half an hour)"
    )
    parser.add_argument("--jobs", type=int, help="override the drain backlog size")
    parser.add_argument("--concurrency", type=int, help="handler slots per worker process")
    parser.add_argument("--bootstrap", help="use this Kafka instead of starting one")
    parser.add_argument("--out", type=Path, help="results directory [benchmarks/results(/quick)]")
    parser.add_argument("--no-pin", action="store_true", help="do not pin servers and clients")
    parser.add_argument("--no-profile", action="store_true", help="skip the py-spy profile")
    parser.add_argument("--no-charts", action="store_true", help="write JSON only")
    parser.add_argument(
        "--codec",
        choices=CODECS,
        default="file",
        help="drain in file mode, in registry mode (starts a local Schema Registry), or "
        "both: file and registry drains interleaved, --rounds times each, medians compared",
    )
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode of --codec both [3]")
    parser.add_argument(
        "--status-cost",
        type=int,
        metavar="N",
        help="pairs of drains with and without status records, interleaved [3; 0: none]",
    )
    parser.add_argument(
        "--ordering-cost",
        type=int,
        metavar="N",
        default=0,
        help="pairs of drains with 1,000 ordering keys and without, interleaved [0: none]",
    )
    return parser.parse_args(argv)


def build_config(args: argparse.Namespace) -> BenchConfig:
    config = BenchConfig.quick_mode() if args.quick else BenchConfig.full()
    if args.jobs:
        config = config.with_jobs(args.jobs)
    if args.concurrency:
        config = replace(config, concurrency=args.concurrency)
    if args.no_profile:
        config = replace(config, profile_s=0.0)
    if args.rounds < 1:
        raise SystemExit("--rounds must be at least 1")
    config = replace(config, codec=args.codec, codec_rounds=args.rounds)
    if args.status_cost is not None:
        if args.status_cost < 0:
            raise SystemExit(f"--status-cost must be 0 or more, got {args.status_cost}")
        config = replace(config, status_cost_repeats=args.status_cost)
    if args.ordering_cost < 0:
        raise SystemExit(f"--ordering-cost must be 0 or more, got {args.ordering_cost}")
    return replace(config, ordering_cost_repeats=args.ordering_cost)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    args = parse(argv)
    config = build_config(args)
    # Every process the run starts imports this source tree, whatever is installed.
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p
    )
    out_dir = args.out or (DEFAULT_OUT / "quick" if config.quick else DEFAULT_OUT)
    out_dir.mkdir(parents=True, exist_ok=True)
    chosen = select(args.scenario)
    config = replace(config, big_flood=chosen == ["noisy"] and not config.quick)
    ctx = BenchContext(
        config=config,
        out_dir=out_dir,
        pinning=procs.Pinning.plan(not args.no_pin),
        bootstrap=args.bootstrap,
    )
    # SIGTERM unwinds like Ctrl-C, so every broker, server and worker is stopped.
    signal.signal(signal.SIGTERM, _interrupt)
    started = time.monotonic()
    run_info: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": meta.machine(),
        "versions": meta.versions(),
        "source": meta.source(REPO),
        "pinning": ctx.pinning.describe(),
        "broker": "external (--bootstrap)" if args.bootstrap else "started by the benchmark",
        "config": config.as_dict(),
        "scenarios": chosen,
    }
    try:
        ctx.start()
        for name in chosen:
            _run_one(ctx, name, not args.no_charts)
    finally:
        ctx.close()
    run_info["wall_s"] = round(time.monotonic() - started, 1)
    run_info["enqueue"] = ctx.enqueue_rates
    # run.json describes the last run of every scenario; a partial run (one
    # SCENARIO) gets its own file, so it never relabels the full run's numbers.
    name = "run.json" if chosen == list(SCENARIOS) else f"run-{'-'.join(chosen)}.json"
    (out_dir / name).write_text(json.dumps(run_info, indent=2) + "\n")
    print(report.render(out_dir))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _run_one(ctx: BenchContext, name: str, with_chart: bool) -> None:
    log.info("scenario %s: starting", name)
    began = time.monotonic()
    try:
        outcome = registry()[name](ctx)
    except Exception as exc:  # one scenario's failure must not lose the others' numbers
        log.exception("scenario %s failed", name)
        outcome = {
            "scenario": name,
            "status": f"error: {type(exc).__name__}: {exc}"[:500],
            "traceback": traceback.format_exc()[-3000:],
            "rows": [],
        }
    outcome["wall_s"] = round(time.monotonic() - began, 1)
    outcome["pinning"] = ctx.pinning.describe()
    ctx.results[name] = outcome
    if with_chart and outcome.get("rows"):
        outcome["chart"] = charts.draw(outcome, ctx.out_dir)
    (ctx.out_dir / f"{name}.json").write_text(json.dumps(outcome, indent=2) + "\n")
    log.info("scenario %s: %s in %.0fs", name, outcome["status"], outcome["wall_s"])
