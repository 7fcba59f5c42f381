"""``leasekeeper inspect``: fetch a running leasekeeper's snapshot and show it."""

from __future__ import annotations

import json
from typing import Any

import grpc
from rich.console import Console
from rich.table import Table

from jobcore.config import AUTH_METADATA_KEY
from schemas import worker_pb2 as pb
from schemas import worker_pb2_grpc as pb_grpc


def fetch_snapshot(target: str, token: str | None, timeout: float = 10.0) -> dict[str, Any]:
    metadata: tuple[tuple[str, str | bytes], ...] | None = (
        ((AUTH_METADATA_KEY, token),) if token else None
    )
    with grpc.insecure_channel(target) as channel:
        stub = pb_grpc.LeaseKeeperStub(channel)
        response = stub.Inspect(pb.InspectRequest(), timeout=timeout, metadata=metadata)
    snapshot: dict[str, Any] = json.loads(response.snapshot_json)
    return snapshot


def render_snapshot(snapshot: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console()
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
