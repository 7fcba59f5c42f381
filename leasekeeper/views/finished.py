"""``inspect job`` for a job the leasekeeper no longer holds: how it ended, from
``jobs.Q.status`` (the record the leasekeeper wrote when it succeeded, died, was
cancelled or was skipped as a duplicate).

Only tried when the leasekeeper does not hold the job, and only when
Kafka is named (``--bootstrap``/``KAFKA_BOOTSTRAP``, ``--kafka-config``/``KAFKA_CONFIG``,
or the address
``dev kafka start`` recorded). A
failure to read leaves the answer ``unknown``: inspect must work during an
incident even when Kafka does not.
"""

from __future__ import annotations

import logging
from pathlib import Path

from jobcore.config import Environment
from jobcore.control import JobStatus
from jobcore.job_state import state_of
from jobcore.kafka import KafkaException, KafkaSetupError
from jobcore.status import StatusError, StatusReader, ended_status
from jobcore.topics import QueueTopics
from leasekeeper.views.id_prefix import MIN_PREFIX

log = logging.getLogger(__name__)

_CLIENT_ID = "leasekeeper-inspect"
# States in which the leasekeeper does not hold the job: it may have ended. A
# cancellation recorded after a job succeeded does not make it cancelled.
_NOT_HELD = frozenset({"unknown", "cancellation recorded"})
# A uuid4 hex id: shorter input is a prefix (of 8+ characters), looked up among the
# status topic's most recent records (``jobcore.status.MAX_SCAN``: a million).
WHOLE_ID = 32


def finished_view(
    view: dict[str, object],
    queue: str,
    env: Environment,
    *,
    bootstrap: str | None = None,
    kafka_config: Path | None = None,
) -> dict[str, object]:
    """``view`` with how the job ended, when it is ``unknown`` here and the status
    topic of ``queue`` has it; ``view`` unchanged otherwise. ``bootstrap`` and
    ``kafka_config`` are the flags (their variables are in ``env``)."""
    job_id = str(view["job_id"])
    kafka_named = (
        bootstrap is not None
        or kafka_config is not None
        or env.bootstrap_from_env
        or env.kafka_config is not None
        or env.dev_bootstrap is not None
    )
    if view.get("state") not in _NOT_HELD or len(job_id) < MIN_PREFIX or not queue:
        return view
    if not kafka_named:  # no guessing at a default broker: inspect answers at once
        return view
    try:
        settings = env.kafka(_CLIENT_ID, bootstrap=bootstrap, kafka_config=kafka_config)
        topic = QueueTopics(queue=queue, prefix=env.topic_prefix).status
        if len(job_id) < WHOLE_ID:
            with StatusReader(settings, topic) as reader:
                found = reader.by_prefix(job_id, timeout_s=10)
        else:
            whole, _ = ended_status(settings, topic, job_id, timeout_s=10)
            found = {} if whole is None else {job_id: whole}
    except (KafkaException, KafkaSetupError, StatusError, ValueError) as exc:
        log.debug("no status for %s: %s", job_id, exc)
        return view
    if len(found) > 1:
        shown = ", ".join(sorted(found)[:5])
        problem = f"{len(found)} finished jobs start with {job_id} ({shown}): give more of the id"
        return {"job_id": job_id, "state": "ambiguous", "member_knows": False, "problem": problem}
    if not found:
        return view
    (status,) = found.values()
    ended = status_view(status)
    if "cancelled_at_ms" in view and status.state.value != "cancelled":
        ended["cancellation_recorded_at_ms"] = view["cancelled_at_ms"]
    return ended


def status_view(status: JobStatus) -> dict[str, object]:
    """A finished job as ``inspect job`` shows it."""
    view: dict[str, object] = {
        "job_id": status.job_id,
        "state": state_of(status).value,
        "member_knows": False,
        "ended_at_ms": status.at_ms,
        "attempt": status.attempt,
    }
    if status.reason:
        view["reason"] = status.reason
    if status.worker:
        view["worker"] = status.worker
    if status.last_error:
        view["last_error"] = status.last_error
    if status.duration_s is not None:
        view["duration_s"] = status.duration_s
    if status.duplicate_of:
        view["duplicate_of"] = status.duplicate_of
    if status.progress is not None:
        view.update(status.progress.fields())
    return view
