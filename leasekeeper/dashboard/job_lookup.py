"""Where a job is or how it ended: the live snapshots first, then the status topics.

A job held by a leasekeeper right now shows as leased (with its worker); a job
that ended shows its status record (succeeded, dead with the reason,
cancelled, skipped as a duplicate of which job). Anything else is reported
honestly as not found yet, with a note naming the source that can see a ready
or delayed job (``inspect job`` on the queue's leasekeeper). The states and the
report are ``jobcore.job_state``'s, shared by every reader.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace

from jobcore.job_state import (
    DASHBOARD_KNOWS,
    JobReport,
    JobState,
    from_status,
    progress_in,
    with_progress,
)
from jobcore.plain import plain
from jobcore.status import switched_off_note
from leasekeeper.dashboard.actions import Actions
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.html import e, table
from leasekeeper.dlq.entries import format_ms

__all__ = ["JobWhere", "job_page", "lookup"]


@dataclass(frozen=True, kw_only=True)
class JobWhere(JobReport):
    """The shared report, and the leasekeeper that holds a leased job and its lease id
    (``topic/partition/offset``: where the page reads the job itself)."""

    leasekeeper: str | None = None
    lease_id: str | None = None


def lookup(
    actions: Actions, fleet: FleetState, queues: list[str], job_id: str, now_ms: int
) -> JobWhere:
    for record in fleet.current(now_ms):
        for p in record["snapshot"].get("partitions", []):
            for lease in p.get("leases", []):
                if lease.get("job_id") == job_id:
                    found = JobWhere(
                        job_id=job_id,
                        state=JobState.LEASED,
                        source="live snapshots",
                        queue=str(record.get("queue")),
                        worker=str(lease.get("worker")),
                        attempt=int(lease.get("attempt", 0)),
                        leasekeeper=str(record.get("instance")),
                        lease_id=lease.get("lease_id"),
                    )
                    return with_progress(found, progress_in(lease))
    notes = []
    for queue in queues:
        status, switched_off = actions.finished(queue, job_id)
        if status is None and switched_off is not None:
            notes.append(switched_off_note(queue, switched_off.at_ms))
        if status is not None:
            source = f"status topic {actions.topics(queue).status}"
            found = JobWhere(**asdict(from_status(status, source=source, queue=queue)))
            if found.state is JobState.SUCCEEDED:
                found = replace(found, result=actions.result(queue, job_id))
            return found
    return JobWhere(
        job_id=job_id,
        state=JobState.NOT_FOUND,
        source="live snapshots and status topics",
        note="; ".join(notes) or DASHBOARD_KNOWS,
    )


def _cancel_form(base: str, found: JobWhere) -> str:
    """Cancel is offered for a job that has not finished, in a queue we know."""
    if found.queue is None or found.state is not JobState.LEASED:
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
    shown = {k: v for k, v in plain(found).items() if v is not None}
    hidden = ("at_ms", "until_ms", "duration_s", "note", "progress", "progress_message")
    rows = [(k, v) for k, v in shown.items() if k not in hidden]
    if found.progress_text is not None:
        rows.append(("progress", found.progress_text))
    if found.until_ms is not None:
        rows.append(("due", format_ms(found.until_ms)))
    if found.duration_s is not None:
        rows.append(("duration", f"{found.duration_s:.3f} s (handler run time)"))
    if found.at_ms:
        rows.append(("at", format_ms(found.at_ms)))
    note = ""
    if found.state is JobState.NOT_FOUND and found.note:
        note = f'<p class="muted" id="job-note">{e(found.note)}.</p>'
    if found.state is JobState.NOT_FOUND and found.note == DASHBOARD_KNOWS:
        note = (
            '<p class="muted" id="job-note">Not held by any leasekeeper and not finished: it '
            "may be ready or delayed in Kafka, not yet seen by a leasekeeper, or not enqueued "
            f"at all; {e(DASHBOARD_KNOWS)}.</p>"
        )
    cancel = _cancel_form(base, found) if can_act else ""
    state = f'<p id="job-state">{e(found.state.value)}</p>'
    return form + state + table(("field", "value"), rows) + note + cancel
