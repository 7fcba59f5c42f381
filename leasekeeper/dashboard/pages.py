"""The pages' bodies, built from the fleet's snapshots and Kafka's offsets.

Each function returns the HTML inside ``<main>``; ``server.py`` wraps it in the
layout. Every snapshot field beyond the basic ones is read with ``.get``, so a
leasekeeper of another version still shows what it has.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from jobcore.progress import JobProgress
from leasekeeper.core.unhandled_warning import unhandled_text
from leasekeeper.dashboard.cron_view import CronRow
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.html import Raw, chart, e, link, live, table
from leasekeeper.dashboard.kafka_view import KafkaView, QueueOffsets
from leasekeeper.dlq.entries import format_ms
from leasekeeper.views.tier_rows import all_empty, by_delay, tiers_line

__all__ = [
    "cron_section",
    "leasekeepers_page",
    "overview_page",
    "queue_page",
    "scheduled_page",
    "unhandled_section",
]

Snapshot = dict[str, Any]


def _age(now_ms: int, at_ms: int | None) -> str:
    return "-" if at_ms is None or at_ms <= 0 else f"{max(0, now_ms - at_ms) / 1000:.1f} s"


def _by_queue(records: list[Snapshot], queue: str) -> list[Snapshot]:
    return [r for r in records if r.get("queue") == queue]


def _leases(records: Iterable[Snapshot]) -> list[tuple[str, Snapshot]]:
    return [
        (str(r.get("instance")), lease)
        for r in records
        for p in r["snapshot"].get("partitions", [])
        for lease in p.get("leases", [])
    ]


def overview_page(
    base: str, fleet: FleetState, kafka: KafkaView, queues: list[str], now_ms: int
) -> str:
    records = fleet.current(now_ms)
    rows = []
    measured = kafka.many(queues)
    for queue in queues:
        offsets = measured[queue]
        history = fleet.history(queue)
        last = history[-1] if history else None
        rows.append(
            (
                Raw(link(base, f"queues/{queue}", queue)),
                f"{last.processed:.1f}" if last else "-",
                f"{last.failed:.1f}" if last else "-",
                Raw(chart([p.processed for p in history], [p.failed for p in history])),
                offsets.backlog,
                _age(now_ms, offsets.oldest_ready_ms),
                Raw(link(base, f"dlq/{queue}", offsets.dlq_depth)),
                len(_by_queue(records, queue)),
            )
        )
    headers = (
        "queue",
        "processed/s",
        "failed/s",
        "last 3 min",
        "backlog",
        "oldest ready",
        "DLQ",
        "leasekeepers",
    )
    legend = '<p class="muted">chart: <span class="ok">processed</span> and '
    legend += '<span class="bad">failed</span> jobs per second</p>'
    return live("overview", table(headers, rows, numeric=(1, 2, 4, 6, 7)) + legend)


def queue_page(base: str, queue: str, fleet: FleetState, kafka: KafkaView, now_ms: int) -> str:
    offsets = kafka.offsets(queue)
    records = _by_queue(fleet.current(now_ms), queue)
    return live(
        "queue",
        _summary_cards(offsets, now_ms)
        + unhandled_section(records, now_ms)
        + "<h2>Partitions</h2>"
        + _partitions(offsets, records)
        + "<h2>Tenants</h2>"
        + _tenants(records)
        + _classes(records)
        + _blocked_keys(records, now_ms)
        + flood_section(records, now_ms)
        + "<h2>Retry tiers</h2>"
        + table(("tier topic", "backlog"), tier_rows(offsets.tiers), numeric=(1,))
        + f"<p>{link(base, f'dlq/{queue}', 'Dead letters')}: {offsets.dlq_depth}</p>",
    )


def unhandled_section(records: list[Snapshot], now_ms: int) -> str:
    """Ready jobs no connected worker runs, first on the queue's page: they wait
    silently until the DLQ takes them, and the fix is outside the queue."""
    rows = [
        (record.get("instance"), wait.get("type"), wait.get("jobs"),
         ", ".join(wait.get("handled") or ()) or "-", unhandled_text(wait, now_ms))
        for record in records
        for wait in record["snapshot"].get("unhandled") or ()
    ]  # fmt: skip
    if not rows:
        return ""
    headers = ("leasekeeper", "job type", "ready", "connected workers run", "what to do")
    return '<h2 class="bad">No worker runs these job types</h2>' + table(
        headers, rows, numeric=(2,)
    )


def tier_rows(tiers: dict[str, int]) -> list[tuple[str, int]]:
    """A queue's tier backlogs from the shortest delay up, or one row for them all
    while every one is empty (``leasekeeper.views.tier_rows``)."""
    rows = by_delay(tiers.items())
    return [(tiers_line(list(tiers)), 0)] if all_empty(rows) else rows


def _summary_cards(offsets: QueueOffsets, now_ms: int) -> str:
    cards = (
        ("backlog", offsets.backlog),
        ("oldest ready", _age(now_ms, offsets.oldest_ready_ms)),
        ("DLQ depth", offsets.dlq_depth),
    )
    inner = "".join(f'<div class="card">{e(k)}<br><b>{e(v)}</b></div>' for k, v in cards)
    return f'<div class="cards">{inner}</div>'


def _partitions(offsets: QueueOffsets, records: list[Snapshot]) -> str:
    """Kafka's lag per partition beside the owning leasekeeper's commit gaps."""
    owned: dict[int, tuple[str, Snapshot]] = {}
    for record in records:
        for p in record["snapshot"].get("partitions", []):
            if p.get("topic") == offsets.ready[0].topic if offsets.ready else False:
                owned[int(p["partition"])] = (str(record.get("instance")), p)
    rows = []
    for lag in offsets.ready:
        instance, view = owned.get(lag.partition, ("-", {}))
        gaps = view.get("unresolved", [])[:8]
        rows.append(
            (
                lag.partition,
                lag.end,
                lag.committed if lag.committed >= 0 else "none",
                lag.lag,
                view.get("unresolved_count", "-"),
                ", ".join(str(g) for g in gaps) or "-",
                len(view.get("leases", [])) if view else "-",
                instance,
            )
        )
    headers = (
        "partition",
        "end",
        "committed",
        "lag",
        "commit gaps",
        "holding the commit",
        "leases",
        "leasekeeper",
    )
    return table(headers, rows, numeric=(0, 1, 2, 3, 4, 6))


def _tenants(records: list[Snapshot]) -> str:
    ready: dict[str, int] = {}
    flight: dict[str, int] = {}
    for record in records:
        snap = record["snapshot"]
        for tenant, n in (snap.get("ready_by_tenant") or {}).items():
            ready[tenant] = ready.get(tenant, 0) + int(n)
        for tenant, n in (snap.get("in_flight_by_tenant") or {}).items():
            flight[tenant] = flight.get(tenant, 0) + int(n)
    rows = [(t, ready.get(t, 0), flight.get(t, 0)) for t in sorted(set(ready) | set(flight))]
    return table(("tenant", "ready", "in flight"), rows, numeric=(1, 2))


def _classes(records: list[Snapshot]) -> str:
    """Priority classes, caps and weights, when the leasekeepers report them."""
    rows = []
    for record in records:
        fairness = record["snapshot"].get("fairness") or record["snapshot"].get("classes")
        if isinstance(fairness, dict):
            for name, value in sorted(fairness.items()):
                rows.append((record.get("instance"), name, value))
    if not rows:
        return ""
    return "<h2>Classes</h2>" + table(("leasekeeper", "name", "state"), rows)


def _blocked_keys(records: list[Snapshot], now_ms: int) -> str:
    """Ordering keys whose head is out (retrying, parked or dead), as ``inspect``
    shows them: a blocked key holds back only its own jobs, so it is easy to miss."""
    rows = []
    for record in records:
        for b in record["snapshot"].get("blocked_keys") or []:
            if b.get("state") == "dead":
                when = "until replayed or skipped"
            elif int(b.get("due_ms", 0)) > now_ms:
                when = f"in {(int(b['due_ms']) - now_ms) / 1000:.0f}s"
            else:
                when = "coming back"
            rows.append((record.get("instance"), b.get("tenant"), b.get("key"),
                         b.get("job_id"), b.get("state"), when, b.get("held"),
                         b.get("reason")))  # fmt: skip
    if not rows:
        return ""
    headers = ("leasekeeper", "tenant", "ordering key", "head job", "state", "back",
               "held behind", "why")  # fmt: skip
    return "<h2>Blocked ordering keys</h2>" + table(headers, rows, numeric=(6,))


def flood_section(records: list[Snapshot], now_ms: int) -> str:
    """Floods read past (``inspect`` shows them too): whose, where, since when."""
    rows = [
        (record.get("instance"), f.get("tenant"), f"{f.get('topic')}/{f.get('partition')}",
         f"{max(0, now_ms - int(f.get('since_ms', now_ms))) / 1000:.0f}s", f.get("waiting"),
         f.get("read_past"))
        for record in records
        for f in record["snapshot"].get("floods") or []
    ]  # fmt: skip
    if not rows:
        return ""
    headers = ("leasekeeper", "tenant", "partition", "for", "its jobs waiting in Kafka",
               "others read past")  # fmt: skip
    return "<h2>Floods read past</h2>" + table(headers, rows, numeric=(4, 5))


def _progress_cell(lease: Snapshot) -> str:
    """A lease's progress as its worker last said ("40% rendered ..."), or nothing."""
    value = JobProgress.from_fields(lease.get("progress"), lease.get("progress_message"))
    return "" if value is None else value.text()


def leasekeepers_page(fleet: FleetState, now_ms: int) -> str:
    records = fleet.current(now_ms)
    rows = []
    for r in records:
        snap = r["snapshot"]
        parts = [f"{p['topic']}/{p['partition']}" for p in snap.get("partitions", [])]
        workers = snap.get("workers") or {}
        rows.append(
            (
                r.get("instance"),
                r.get("queue"),
                snap.get("kafka", "-"),
                len(parts),
                snap.get("ready", 0),
                snap.get("leases_total", len(_leases([r]))),
                ", ".join(sorted(workers)) or "-",
                _age(now_ms, int(r["published_at_ms"])),
            )
        )
    headers = (
        "instance",
        "queue",
        "kafka",
        "partitions",
        "ready",
        "in flight",
        "workers",
        "published",
    )
    lease_rows = [
        (
            x.get("job_id"),
            x.get("type"),
            x.get("tenant"),
            x.get("worker"),
            x.get("attempt"),
            f"{float(x.get('age_s', 0)):.1f} s",
            _progress_cell(x),
            instance,
        )
        for instance, x in sorted(_leases(records), key=lambda item: -float(item[1]["age_s"]))
    ][:200]
    return live(
        "fleet",
        table(headers, rows, numeric=(3, 4, 5))
        + "<h2>Leases in flight</h2>"
        + table(
            ("job", "type", "tenant", "worker", "attempt", "age", "progress", "leasekeeper"),
            lease_rows,
            numeric=(4, 5),
        ),
    )


def scheduled_page(base: str, fleet: FleetState, kafka: KafkaView, now_ms: int) -> str:
    records = fleet.current(now_ms)
    rows = []
    for r in records:
        snap = r["snapshot"]
        due = snap.get("next_delayed_due_ms")
        rows.append(
            (
                r.get("queue"),
                r.get("instance"),
                snap.get("delayed", 0),
                format_ms(int(due)) if due else "-",
                len(snap.get("held_tiers") or {}),
            )
        )
    tiers = [
        (Raw(link(base, f"queues/{q}", q)), topic, n)
        for q, offsets in kafka.many(fleet.queues(now_ms)).items()
        for topic, n in tier_rows(offsets.tiers)
    ]
    return live(
        "scheduled",
        "<h2>Delayed jobs by due time</h2>"
        + table(
            ("queue", "leasekeeper", "on the timer", "next due", "held tier partitions"),
            rows,
            numeric=(2, 4),
        )
        + "<h2>Delay tiers</h2>"
        + table(("queue", "tier topic", "waiting"), tiers, numeric=(2,))
        + cron_section(base, kafka.cron(), now_ms),
    )


# A leader fires within a fraction of a second and then shows the next fire; a next
# fire this far in the past means no scheduler of the group is firing.
CRON_OVERDUE_MS = 30_000


def cron_section(base: str, rows: list[CronRow], now_ms: int) -> str:
    """Cron entries of every scheduler group, with their next and last fires."""
    if not rows:
        return (
            '<h2>Cron entries</h2><p class="muted" id="cron-none">No cron scheduler has '
            "published entries (<code>producer cron run</code>).</p>"
        )
    cells = [
        (
            r.scheduler,
            Raw(f'<span class="cron-entry">{e(r.name)}</span>'),
            f"{r.view.schedule} ({r.view.timezone})" if r.view else "unknown",
            Raw(link(base, f"queues/{r.view.queue}", r.view.queue)) if r.view else "-",
            r.view.type if r.view else "-",
            Raw(_next_fire(r, now_ms)),
            Raw(_last_fire(base, r, now_ms)),
            r.view.leader if r.view else "-",
        )
        for r in rows
    ]
    headers = ("scheduler", "entry", "schedule", "queue", "type", "next fire", "last fire",
               "leader")  # fmt: skip
    return "<h2>Cron entries</h2>" + table(headers, cells)


def _relative(at_ms: int, now_ms: int) -> str:
    """How far from now at a glance: "in 40 s", "12 min ago", "in 5 h", "in 3 d"."""
    seconds = round((at_ms - now_ms) / 1000)
    size = abs(seconds)
    if size < 100:
        amount = f"{size} s"
    elif size < 100 * 60:
        amount = f"{round(size / 60)} min"
    elif size < 48 * 3600:
        amount = f"{round(size / 3600)} h"
    else:
        amount = f"{round(size / 86400)} d"
    return f"in {amount}" if seconds >= 0 else f"{amount} ago"


def _next_fire(row: CronRow, now_ms: int) -> str:
    if row.view is None or row.view.next_fire_ms is None:
        return '<span class="muted">unknown (no leader has published it)</span>'
    due = row.view.next_fire_ms
    text = f"{format_ms(due)} ({_relative(due, now_ms)})"
    if now_ms - due > CRON_OVERDUE_MS:
        return f'<span class="bad cron-next">{e(text)}: overdue, no leader is firing</span>'
    return f'<span class="cron-next">{e(text)}</span>'


def _last_fire(base: str, row: CronRow, now_ms: int) -> str:
    if row.last_fire_ms is None:
        return '<span class="muted cron-last">never</span>'
    text = f"{format_ms(row.last_fire_ms)} ({_relative(row.last_fire_ms, now_ms)})"
    job = ""
    if row.last_job_id and row.view is not None:
        path = f"job?id={row.last_job_id}&queue={row.view.queue}"
        job = " job " + link(base, path, row.last_job_id[:12], **{"class": "cron-job"})
    return f'<span class="cron-last">{e(text)}</span>{job}'
