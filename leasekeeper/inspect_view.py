"""``leasekeeper inspect``: fetch a running leasekeeper's snapshot and show it.

The rich view is for a person at a terminal during an incident; ``--json``
prints the snapshot as it came and is what scripts should read. Every section
beyond the partitions reads its fields with ``.get``, so the view still works
against a leasekeeper of an older version that does not send them.
"""

from __future__ import annotations

import json
import time
from typing import Any

import grpc
from rich.console import Console
from rich.table import Table

from jobcore.config import AUTH_METADATA_KEY
from schemas import worker_pb2 as pb
from schemas import worker_pb2_grpc as pb_grpc


def fetch_snapshot(
    target: str,
    token: str | None,
    timeout: float = 10.0,
    job_id: str = "",
    tls_ca: bytes | None = None,
) -> dict[str, Any]:
    metadata: tuple[tuple[str, str | bytes], ...] | None = (
        ((AUTH_METADATA_KEY, token),) if token else None
    )
    channel = (
        grpc.insecure_channel(target)
        if tls_ca is None
        else grpc.secure_channel(target, grpc.ssl_channel_credentials(root_certificates=tls_ca))
    )
    with channel:
        stub = pb_grpc.LeaseKeeperStub(channel)
        request = pb.InspectRequest(job_id=job_id)
        response = stub.Inspect(request, timeout=timeout, metadata=metadata)
    snapshot: dict[str, Any] = json.loads(response.snapshot_json)
    return snapshot


def render_snapshot(
    snapshot: dict[str, Any], console: Console | None = None, now_ms: int | None = None
) -> None:
    """Print the snapshot; ``now_ms`` (epoch ms) turns due times into "in N s"."""
    console = console or Console()
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    console.print(
        f"[bold]queue[/] {snapshot.get('queue')}  member {snapshot.get('member')}  "
        f"ready {snapshot['ready']}  commits {snapshot.get('commits')}"
    )
    console.print(_partitions_table(snapshot["partitions"]))
    leases = [lease for p in snapshot["partitions"] for lease in p["leases"]]
    if leases:
        console.print(_leases_table(leases))
    counters = snapshot["counters"]
    console.print("  ".join(f"{k} {v}" for k, v in counters.items()))
    tenants = snapshot.get("in_flight_by_tenant") or {}
    if tenants:
        console.print("in flight by tenant: " + ", ".join(f"{t} {n}" for t, n in tenants.items()))
    for line in retry_lines(snapshot, now):
        console.print(line, highlight=False)
    control = control_line(snapshot)
    if control:
        console.print(control, highlight=False)


def control_line(snapshot: dict[str, Any]) -> str:
    """Control-state size and the start-up read; empty from an older leasekeeper."""
    control = snapshot.get("control")
    if not control:
        return ""
    caught_up = control.get("catch_up_s")
    read = (
        ""
        if caught_up is None
        else f", read {control['catch_up_records']} records in {caught_up:.2f}s at start"
    )
    return (
        f"[bold]control state[/] cancellations {control['cancellations']}, "
        f"dedupe keys {control['dedupe_claims']}, pruned {control['pruned']}{read}"
    )


# Held tier partitions listed before "… (N)": a queue has partitions x tiers of
# them, and the soonest few say whether retries are moving.
HELD_SHOWN = 8


def retry_lines(snapshot: dict[str, Any], now_ms: int) -> list[str]:
    """The retry path in a few lines: jobs waiting on the timer, held tier
    partitions, and the retry budget. Empty when the snapshot has none of them.

    During a dependency outage these answer "are retries waiting, and why":
    in the in-memory timer (the last part of a delay, shorter than the
    smallest tier), in a held tier partition (its head is not due yet), or
    deferred by the budget (retries over their share of the queue's throughput).
    """
    lines = []
    if "delayed" in snapshot:
        due = snapshot.get("next_delayed_due_ms")
        when = "" if due is None else f" (next due {_due(due, now_ms)})"
        lines.append(f"[bold]delayed[/] {snapshot['delayed']} jobs waiting on the timer{when}")
    held = snapshot.get("held_tiers")
    if held is not None:
        soonest = sorted(held.items(), key=lambda item: (item[1], item[0]))
        listed = ", ".join(f"{tp} {_due(at, now_ms)}" for tp, at in soonest[:HELD_SHOWN])
        if len(soonest) > HELD_SHOWN:
            listed += f" … ({len(soonest)})"
        lines.append(f"[bold]held tier partitions[/] {len(held)}" + (f": {listed}" if held else ""))
    budget = snapshot.get("retry_budget")
    if budget:
        lines.append(
            f"[bold]retry budget[/] {budget['share']:.0%} of first attempts over "
            f"{budget['window_s']:g}s: first attempts {budget['first_attempts_in_window']}, "
            f"allowed {budget['allowed_in_window']}, retries {budget['retries_in_window']}, "
            f"scheduled ahead {budget['retries_scheduled_ahead']}; since start admitted "
            f"{budget['retries_admitted']}, deferred {budget['retries_deferred']} "
            f"(longest {budget['longest_deferral_s']:.1f}s)"
        )
    return lines


def _due(at_ms: int, now_ms: int) -> str:
    """A due time as the wait left: what an operator compares with the tiers."""
    seconds = (at_ms - now_ms) / 1000
    return "now" if seconds <= 0 else f"in {seconds:.1f}s"


def _partitions_table(partitions: list[dict[str, Any]]) -> Table:
    table = Table(title="partitions")
    for column in ("topic", "partition", "committed", "highest fetched", "unresolved", "leases"):
        table.add_column(column, justify="right" if column != "topic" else "left")
    for p in sorted(partitions, key=lambda p: (p["topic"], p["partition"])):
        gaps = ", ".join(str(o) for o in p["unresolved"][:8])
        if p["unresolved_count"] > 8:
            gaps += f" … ({p['unresolved_count']})"
        table.add_row(
            p["topic"],
            str(p["partition"]),
            str(p["committed"]),
            str(p["highest_fetched"]),
            gaps or "-",
            str(len(p["leases"])),
        )
    return table


def _leases_table(leases: list[dict[str, Any]]) -> Table:
    table = Table(title="leases in flight")
    for column in ("job id", "type", "tenant", "worker", "attempt", "age s", "expires in s"):
        table.add_column(column)
    for lease in sorted(leases, key=lambda x: -x["age_s"])[:50]:
        table.add_row(
            lease["job_id"],
            lease["type"],
            lease["tenant"],
            lease["worker"],
            str(lease["attempt"]),
            f"{lease['age_s']:.1f}",
            f"{lease['expires_in_s']:.1f}",
        )
    return table
