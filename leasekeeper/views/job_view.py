"""What ``inspect job ID`` answers, built from what one leasekeeper knows (pure).

The engine finds the job (in its window, its timer, or the store's notes on
delayed and skipped jobs); these helpers turn what it found into the view, so
that every answer says only what this leasekeeper can know. A cancellation for
a job it does not hold is reported as recorded, not as done: the job may have
finished before the cancellation came.
"""

from __future__ import annotations

from enum import StrEnum

from jobcore.control import Cancellation
from jobcore.job_state import JobState as Shared
from leasekeeper.core.store_values import JobNote, NoteKind


class InspectState(StrEnum):
    """The states ``inspect job`` reports: the shared ones (``jobcore.job_state``), and
    three of its own that say what this leasekeeper does not know (``from_inspect``
    reads them as not found); ``UNKNOWN`` and ``AMBIGUOUS`` exit 1."""

    READY = Shared.READY.value
    DELAYED = Shared.DELAYED.value
    LEASED = Shared.LEASED.value
    CANCELLED = Shared.CANCELLED.value
    CANCEL_RECORDED = "cancellation recorded"
    SKIPPED_DUPLICATE = Shared.SKIPPED.value
    UNKNOWN = "unknown"
    AMBIGUOUS = "ambiguous"


_CANCELLED_HOW = {
    NoteKind.CANCELLED_WAITING: "skipped while waiting: it never ran",
    NoteKind.CANCELLED_RUNNING: "its lease ended while it ran",
}


def base_view(job_id: str) -> dict[str, object]:
    return {"job_id": job_id, "member_knows": True}


def note_view(note: JobNote, cancellation: Cancellation | None) -> dict[str, object]:
    """A delayed tier record or a skipped duplicate, from the store's note."""
    view = base_view(note.job_id)
    where = {"topic": note.topic, "partition": note.partition, "offset": note.offset}
    if note.kind is NoteKind.SKIPPED_DUPLICATE:
        view.update(
            state=InspectState.SKIPPED_DUPLICATE.value,
            duplicate_of=note.duplicate_of,
            skipped_at_ms=note.seen_ms,
            **where,
        )
        return view
    if note.kind in _CANCELLED_HOW:
        view.update(
            state=InspectState.CANCELLED.value,
            how=_CANCELLED_HOW[note.kind],
            **where,
            **(_cancelled(cancellation) if cancellation else {"cancelled_at_ms": note.seen_ms}),
        )
        return view
    view.update(state=InspectState.DELAYED.value, due_ms=note.due_ms, **where)
    if cancellation is not None:
        view.update(state=InspectState.CANCELLED.value, **_cancelled(cancellation))
    return view


def cancelled_view(job_id: str, cancellation: Cancellation) -> dict[str, object]:
    """A job in hand that is cancelled: it will be skipped, or its lease ended."""
    view = base_view(job_id)
    view.update(state=InspectState.CANCELLED.value, **_cancelled(cancellation))
    return view


def cancel_recorded_view(job_id: str, cancellation: Cancellation) -> dict[str, object]:
    """A cancellation for a job this leasekeeper does not hold: recorded, nothing more."""
    view = base_view(job_id)
    view.update(
        state=InspectState.CANCEL_RECORDED.value, member_knows=False, **_cancelled(cancellation)
    )
    return view


def unknown_view(job_id: str, problem: str = "") -> dict[str, object]:
    state = InspectState.AMBIGUOUS if problem else InspectState.UNKNOWN
    view = base_view(job_id)
    view.update(state=state.value, member_knows=False)
    if problem:
        view["problem"] = problem
    return view


def _cancelled(cancellation: Cancellation) -> dict[str, object]:
    return {"cancelled_at_ms": cancellation.cancelled_at_ms, "reason": cancellation.reason}
