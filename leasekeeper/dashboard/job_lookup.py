"""Where a job is or how it ended: the live snapshots first, then the status topics.

A job held by a leasekeeper right now shows as leased (with its worker); a job
that ended shows its status record (succeeded, dead with the reason,
cancelled). Anything else is reported honestly as not found yet: it may be
ready or delayed in Kafka, or not enqueued at all.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from jobcore.status import switched_off_note
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.html import e, table
from leasekeeper.dlq.entries import format_ms

__all__ = ["JobWhere", "job_page", "lookup"]


@dataclass(frozen=True, kw_only=True)
class JobWhere:
    job_id: str
    state: str  # leased, succeeded, dead, cancelled, not found yet
    queue: str | None = None
    worker: str | None = None
    attempt: int | None = None
    reason: str | None = None
    last_error: str | None = None
    at_ms: int | None = None
    # The handler's run time in the last attempt, as its worker reported it.
    duration_s: float | None = None
    leasekeeper: str | None = None
    # Why a job may be missing although it finished: its queue records no statuses.
    note: str | None = None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def lookup(
    actions: Actions, fleet: FleetState, queues: list[str], job_id: str, now_ms: int
) -> JobWhere:
    for record in fleet.current(now_ms):
        for p in record["snapshot"].get("partitions", []):
            for lease in p.get("leases", []):
                if lease.get("job_id") == job_id:
                    return JobWhere(
                        job_id=job_id,
                        state="leased",
                        queue=str(record.get("queue")),
                        worker=str(lease.get("worker")),
                        attempt=int(lease.get("attempt", 0)),
                        leasekeeper=str(record.get("instance")),
                    )
    notes = []
    for queue in queues:
        status, switched_off = actions.finished(queue, job_id)
        if status is None and switched_off is not None:
            notes.append(switched_off_note(queue, switched_off.at_ms))
        if status is not None:
            return JobWhere(
                job_id=job_id,
                state=status.state.value,
                queue=queue,
                attempt=status.attempt,
                reason=status.reason or None,
                worker=status.worker or None,
                last_error=status.last_error or None,
                at_ms=status.at_ms,
                duration_s=status.duration_s,
            )
    return JobWhere(job_id=job_id, state="not found yet", note="; ".join(notes) or None)


def _cancel_form(base: str, found: JobWhere) -> str:
    """Cancel is offered for a job that has not finished, in a queue we know."""
    if found.queue is None or found.state != "leased":
        return ""
    return (
        f'<form method="post" action="{e(base + "/job/cancel")}">'
        f'<input type="hidden" name="queue" value="{e(found.queue)}">'
        f'<input type="hidden" name="id" value="{e(found.job_id)}">'
        '<button class="danger" id="cancel">Cancel this job</button></form>'
    )


def job_page(base: str, job_id: str, found: JobWhere | None, *, can_act: bool = False) -> str:
    form = (
        f'<form method="get" action="{e(base + "/job")}"><label>job id '
        f'<input name="id" value="{e(job_id)}" size="40"></label> '
        '<label>queue <input name="queue" placeholder="any with a leasekeeper"></label> '
        '<button type="submit">Look up</button></form>'
    )
    if found is None:
        return form
    shown = {k: v for k, v in found.to_dict().items() if v is not None}
    rows = [(k, v) for k, v in shown.items() if k not in ("at_ms", "duration_s", "note")]
    if found.duration_s is not None:
        rows.append(("duration", f"{found.duration_s:.3f} s (handler run time)"))
    if found.at_ms:
        rows.append(("at", format_ms(found.at_ms)))
    note = ""
    if found.state == "not found yet" and found.note:
        note = f'<p class="muted" id="job-note">{e(found.note)}.</p>'
    elif found.state == "not found yet":
        note = (
            '<p class="muted">Not held by any leasekeeper and not finished: it may be ready '
            "or delayed in Kafka, not yet seen by a leasekeeper, or not enqueued at all.</p>"
        )
    cancel = _cancel_form(base, found) if can_act else ""
    state = f'<p id="job-state">{e(found.state)}</p>'
    return form + state + table(("field", "value"), rows) + note + cancel
