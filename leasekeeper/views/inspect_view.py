"""``leasekeeper inspect``: fetch a running leasekeeper's snapshot and show it.

The rich view is for a person at a terminal during an incident; ``--json``
prints the snapshot as it came and is what scripts should read. Every section
beyond the partitions reads its fields with ``.get``, so the view still works
against a leasekeeper of an older version that does not send them. Job data in
it (ids, types, tenants, workers, keys, reasons) is shown through
``jobcore.terminal_text``: neither read as markup nor passed on as control codes.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime
from typing import Any

import grpc
from rich import box
from rich.console import Console
from rich.table import Table

from jobcore.config import AUTH_METADATA_KEY
from jobcore.job_state import progress_in
from jobcore.terminal_text import cell, escaped, printable
from leasekeeper.core.unhandled_warning import unhandled_lines
from leasekeeper.deferral.lines import flood_lines
from leasekeeper.limits.lines import limit_lines
from leasekeeper.views.tier_rows import all_empty, tier_delay, tiers_line
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
    snapshot: dict[str, Any],
    console: Console | None = None,
    now_ms: int | None = None,
    *,
    wide: bool = False,
) -> None:
    """Print the snapshot; ``now_ms`` (epoch ms) turns due times into "in N s".
    ``wide`` lists every retry-tier partition instead of one row per tier."""
    console = console or Console()
    now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    console.print(
        f"[bold]queue[/] {escaped(snapshot.get('queue'))}  "
        f"member {escaped(snapshot.get('member'))}  "
        f"ready {snapshot['ready']}  commits {snapshot.get('commits')}"
    )
    for line in [*kafka_lines(snapshot), *unhandled_lines(snapshot, now)]:
        console.print(line, highlight=False)
    queue = str(snapshot.get("queue") or "")
    console.print(_partitions_table(snapshot["partitions"], queue, wide))
    leases = [lease for p in snapshot["partitions"] for lease in p["leases"]]
    if leases:
        console.print(_leases_table(leases))
    counters = snapshot["counters"]
    console.print("  ".join(f"{k} {v}" for k, v in counters.items()))
    tenants = snapshot.get("in_flight_by_tenant") or {}
    if tenants and not snapshot.get("tenants"):
        in_flight = ", ".join(f"{escaped(t)} {n}" for t, n in tenants.items())
        console.print(f"in flight by tenant: {in_flight}")
    for line in fairness_lines(snapshot):
        console.print(line, highlight=False)
    for line in retry_lines(snapshot, now):
        console.print(line, highlight=False)
    for line in [*limit_lines(snapshot, now), *flood_lines(snapshot, now)]:
        console.print(line, highlight=False)
    control = control_line(snapshot)
    if control:
        console.print(control, highlight=False)
    for line in breaker_lines(snapshot):
        console.print(line, highlight=False)
    for line in blocked_key_lines(snapshot, now):
        console.print(line, highlight=False)


def kafka_lines(snapshot: dict[str, Any]) -> list[str]:
    """Kafka "down" (no broker answers) or still "connecting", with the last error."""
    kafka, why = snapshot.get("kafka"), snapshot.get("kafka_last_error")
    if kafka in (None, "connected"):
        return []
    return [f"[bold red]kafka {escaped(kafka)}[/]" + (f": {escaped(why)}" if why else "")]


# Blocked ordering keys listed by inspect before "… N more".
BLOCKED_SHOWN = 20


def blocked_key_lines(snapshot: dict[str, Any], now_ms: int) -> list[str]:
    """One line per ordering key whose head is out of its partition: which job, why,
    when it comes back, and how many jobs wait behind it; nothing from an older
    leasekeeper."""
    blocked = snapshot.get("blocked_keys") or []
    lines = []
    for b in blocked[:BLOCKED_SHOWN]:
        if b["state"] == "dead":
            when = "until an operator replays or skips it (leasekeeper ordering)"
        elif b["due_ms"] > now_ms:
            when = f"back in {(b['due_ms'] - now_ms) / 1000:.0f}s"
        else:
            when = "coming back"
        lines.append(
            f"[bold]blocked key[/] {escaped(b['key'])} (tenant {escaped(b['tenant'])}, "
            f"{escaped(b['topic'])}/{b['partition']}): job {escaped(b['job_id'])} {b['state']}, "
            f"{when}; {b['held']} held behind it; {escaped(b['reason'])}"
        )
    if len(blocked) > BLOCKED_SHOWN:
        lines.append(f"… {len(blocked) - BLOCKED_SHOWN} more blocked keys (--json lists all)")
    return lines


def breaker_lines(snapshot: dict[str, Any]) -> list[str]:
    """One line per job type with a breaker: state, failure rate of its window, calls,
    the next probe, and jobs parked; nothing from an older leasekeeper."""
    lines = []
    for b in snapshot.get("breakers") or []:
        if b["state"] == "open":
            probe = (
                "held open by an operator"
                if b["forced"]
                else (f"next probe in {b['next_probe_in_s']:.0f}s (cool-down {b['cooldown_s']:g}s)")
            )
        elif b["state"] == "half_open":
            probe = f"probing ({b['probes_out']} out)"
        else:
            probe = f"rule {b['rule']}"
        why = f"; {escaped(b['reason'])}" if b["reason"] and b["state"] != "closed" else ""
        lines.append(
            f"[bold]breaker[/] {escaped(b['type'])}: {b['state']}, failure rate "
            f"{b['failure_rate'] * 100:.0f}% of {b['calls']} calls, {probe}, "
            f"parked {b['parked']}{why}"
        )
    return lines


# Tenants listed by inspect before "… N more": the busiest (ready plus in flight).
TENANTS_SHOWN = 10


def fairness_lines(snapshot: dict[str, Any]) -> list[str]:
    """Per priority class (ready, weight, oldest ready age) and the busiest tenants
    (ready, in flight, cap, weight, overflow backlog); nothing from an older leasekeeper."""
    lines = []
    classes = snapshot.get("classes") or []
    if classes:
        lines.append("[bold]classes[/] " + "  ".join(_class_cell(c) for c in classes))
    tenants = snapshot.get("tenants") or []
    for t in tenants[:TENANTS_SHOWN]:
        cap = "-" if t["cap"] is None else t["cap"]
        lines.append(
            f"  tenant {escaped(t['tenant'])}: ready {t['ready']}, in flight {t['in_flight']}, "
            f"cap {cap}, weight {t['weight']:g}, overflow {t.get('overflow', 0)}"
        )
    if len(tenants) > TENANTS_SHOWN:
        lines.append(f"  … {len(tenants) - TENANTS_SHOWN} more tenants (--json lists all)")
    return lines


def _class_cell(view: dict[str, Any]) -> str:
    age = view.get("oldest_ready_age_ms")
    oldest = "" if age is None else f", oldest {age / 1000:.1f}s"
    return f"{escaped(view['name'])} (weight {view['weight']}): ready {view['ready']}{oldest}"


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
    if snapshot.get("switch_holds"):
        lines.append(
            f"[bold]diverted floods[/] held at their switch {snapshot['switch_holds']} times "
            "(waiting for their tenant's older ready jobs)"
        )
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


def _offset(value: int) -> str:
    """An offset, or ``none`` where Kafka has none yet (committed -1001, fetched -1)."""
    return "none" if value < 0 else str(value)


def _gaps(offsets: list[int], count: int) -> str:
    gaps = ", ".join(str(o) for o in offsets[:8])
    if count > 8:
        gaps += f" … ({count})"
    return gaps or "-"


def _is_tier(topic: str, queue: str) -> bool:
    """A delay tier of the queue: ``retry.1m`` or a class's ``critical.retry.1m``."""
    _, sep, rest = topic.partition(f".{queue}.")
    return bool(sep) and (rest.startswith("retry.") or rest.split(".")[1:2] == ["retry"])


def _short(topic: str, queue: str) -> str:
    """A topic of the queue by what follows the queue's name (``retry.1m``), indented
    under the queue; the whole name elsewhere. Names are never cut."""
    _, sep, rest = topic.partition(f".{queue}.")
    return f"  {rest}" if sep and rest else topic


def _order(p: dict[str, Any], queue: str) -> tuple[bool, float, str, int]:
    """The queue's own topics first, then its tiers from the shortest delay up."""
    topic = p["topic"]
    tier = _is_tier(topic, queue)
    return (tier, tier_delay(topic) if tier else 0.0, topic, p["partition"])


def _partitions_table(partitions: list[dict[str, Any]], queue: str, wide: bool) -> Table:
    """The queue's partitions one per row, its retry tiers grouped under it: one row per
    tier (partitions summed) unless ``wide``, since a queue has partitions x tiers of them,
    and one row for them all while none holds anything."""
    table = Table(title="partitions", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    table.add_column("topic", no_wrap=True)
    for column in ("partition", "committed", "highest fetched"):
        table.add_column(column, justify="right")
    for column in ("unresolved", "leases"):
        table.add_column(column, justify="right")
    ordered = sorted(partitions, key=lambda p: _order(p, queue))
    tiers: dict[str, list[dict[str, Any]]] = {}
    for p in ordered:
        if _is_tier(p["topic"], queue) and not wide:
            tiers.setdefault(p["topic"], []).append(p)
            continue
        table.add_row(
            escaped(_short(p["topic"], queue)),
            str(p["partition"]),
            _offset(p["committed"]),
            _offset(p["highest_fetched"]),
            cell(_gaps(p["unresolved"], p["unresolved_count"])),
            str(len(p["leases"])),
        )
    held = [
        (t, sum(p["unresolved_count"] + len(p["leases"]) for p in ps)) for t, ps in tiers.items()
    ]
    if all_empty(held):
        every = sum(len(rows) for rows in tiers.values())
        table.add_row(f"  {tiers_line(list(tiers))}", f"{every} parts", "-", "-", "-", "0")
        tiers = {}
    for topic, rows in tiers.items():
        unresolved = sum(p["unresolved_count"] for p in rows)
        leases = sum(len(p["leases"]) for p in rows)
        parts = f"{len(rows)} parts"
        table.add_row(escaped(_short(topic, queue)), parts, "-", "-", str(unresolved), str(leases))
    return table


def _leases_table(leases: list[dict[str, Any]]) -> Table:
    """Leases in flight, oldest first, one line each. The job id is never cut or wrapped:
    it is what a person pastes into ``inspect job``; the other columns end in an
    ellipsis where 80 columns run out (``--json`` has them whole)."""
    table = Table(
        title="leases in flight", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False
    )
    table.add_column("job id", no_wrap=True)
    for column in ("type", "tenant", "worker"):
        table.add_column(column)
    for column in ("try", "age", "expires"):
        table.add_column(column, no_wrap=True, justify="right")
    for lease in sorted(leases, key=lambda x: -x["age_s"])[:50]:
        table.add_row(
            escaped(lease["job_id"]),
            cell(lease["type"]),
            cell(lease["tenant"]),
            cell(lease["worker"]),
            str(lease["attempt"]),
            f"{lease['age_s']:.1f}s",
            f"in {lease['expires_in_s']:.1f}s",
        )
    return table


# States of ``inspect job`` that mean "not found here": the command exits 1.
NOT_FOUND_STATES = frozenset({"unknown", "ambiguous"})
_HIDDEN = frozenset({"job_id", "state", "member_knows", "problem", "progress_message"})


def job_lines(view: dict[str, Any], now_ms: int) -> list[str]:
    """``inspect job`` for a person: the state first, then each field, times as ISO
    with the wait left or the time passed (never raw epoch milliseconds)."""
    state = view["state"]
    headline = f"job {printable(view['job_id'])}: {state}"
    if state == "skipped" and view.get("duplicate_of"):
        headline += f": duplicate of {printable(view['duplicate_of'])}"
    lines = [headline]
    if view.get("problem"):
        return [*lines, f"  {printable(view['problem'])}"]
    for key, value in view.items():
        if key in _HIDDEN:
            continue
        if key.endswith("_ms") and isinstance(value, int):
            lines.append(f"  {key[:-3]}: {when(value, now_ms) if value > 0 else 'none'}")
        elif key == "progress" and (told := progress_in(view)) is not None:
            lines.append(f"  progress: {printable(told.text())}")
        else:
            lines.append(f"  {key}: {printable(value)}")
    lines.extend(_job_hint(view))
    return lines


def _job_hint(view: dict[str, Any]) -> list[str]:
    if view["state"] == "cancellation recorded":
        return [
            "  (this leasekeeper does not hold the job: it will be skipped if it has not "
            "run yet; a job that already finished is not undone)"
        ]
    if view["state"] == "unknown":
        return [
            "  (not held by this leasekeeper: finished, not fetched yet, owned by another "
            "leasekeeper, or in the DLQ: see `leasekeeper dlq show`)"
        ]
    return []


def when(at_ms: int, now_ms: int) -> str:
    """ISO 8601 UTC to the second, and how far from now: "in 12 s" or "12 s ago"."""
    iso = datetime.fromtimestamp(at_ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    seconds = round((at_ms - now_ms) / 1000)
    relative = f"in {seconds} s" if seconds >= 0 else f"{-seconds} s ago"
    return f"{iso} ({relative})"
