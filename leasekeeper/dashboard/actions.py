"""What the dashboard reads on demand and the one write action it performs: replay.

Replay reuses ``leasekeeper dlq replay``'s ``Replayer`` and its consumer group per
selection, so a replay started from the page and one started from the terminal
continue each other's progress instead of replaying twice.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import NamedTuple
from urllib.parse import parse_qs

from jobcore.control import Cancellation, JobStatus, StatusSwitchedOff
from jobcore.kafka import KafkaException, KafkaSettings, make_consumer, make_producer
from jobcore.result_reader import ResultsUnreadable, stored_result
from jobcore.results import result_text
from jobcore.status import ended_status
from jobcore.topics import QueueTopics
from leasekeeper.dashboard.status_index import StatusIndex
from leasekeeper.dlq.entries import DeadLetterFilter, DlqEntry, parse_time_ms
from leasekeeper.dlq.paging import Cursor, CursorError, DlqPage, read_dead_letter, read_page
from leasekeeper.dlq.replay import Replayer, ReplayOptions, ReplayReport, default_group
from schemas.codec import EnvelopeCodec

__all__ = ["Actions", "FilterError", "page_cursors", "selection_from_query"]


class FilterError(ValueError):
    """A filter of the DLQ page that cannot be used (e.g. a time that is not ISO 8601)."""


def selection_from_query(query: str) -> DeadLetterFilter:
    """The DLQ filter of a page's query string; empty fields match everything."""
    values = {k: v[0].strip() for k, v in parse_qs(query).items() if v and v[0].strip()}
    try:
        since = parse_time_ms(values["since"]) if "since" in values else None
        until = parse_time_ms(values["until"]) if "until" in values else None
    except ValueError as exc:
        raise FilterError(str(exc)) from None
    return DeadLetterFilter(
        type=values.get("type"),
        tenant=values.get("tenant"),
        error_class=values.get("error_class"),
        reason=values.get("reason"),
        since_ms=since,
        until_ms=until,
        job_id=values.get("job_id"),
    )


def page_cursors(query: str) -> tuple[Cursor | None, Cursor | None]:
    """The DLQ page's ``before`` and ``after`` cursors of the query string, if any."""
    values = {k: v[0].strip() for k, v in parse_qs(query).items() if v and v[0].strip()}
    try:
        before = Cursor.parse(values["before"]) if "before" in values else None
        after = Cursor.parse(values["after"]) if "after" in values else None
    except CursorError as exc:
        raise FilterError(str(exc)) from None
    if before is not None and after is not None:
        raise FilterError("a page is either before or after a cursor, not both")
    return before, after


class Finished(NamedTuple):
    """What the status topic says of one job: its record, and the queue's switch."""

    status: JobStatus | None
    switched_off: StatusSwitchedOff | None


@dataclass(frozen=True, kw_only=True)
class Actions:
    kafka: KafkaSettings
    prefix: str
    codec: EnvelopeCodec
    # The RocksDB index of the status topics; None: every lookup scans the topic.
    index: StatusIndex | None = None

    def topics(self, queue: str) -> QueueTopics:
        return QueueTopics(queue=queue, prefix=self.prefix)

    def dead_letters(
        self,
        queue: str,
        selection: DeadLetterFilter,
        *,
        before: Cursor | None = None,
        after: Cursor | None = None,
    ) -> DlqPage:
        """One page, newest first: never the whole DLQ, which may hold gigabytes."""
        topic = self.topics(queue).dlq
        return read_page(self.kafka, topic, self.codec, selection, before=before, after=after)

    def dead_letter(self, queue: str, partition: int, offset: int) -> DlqEntry | None:
        return read_dead_letter(self.kafka, self.topics(queue).dlq, self.codec, partition, offset)

    def replay(self, queue: str, selection: DeadLetterFilter, *, dry_run: bool) -> ReplayReport:
        topics = self.topics(queue)
        options = ReplayOptions(
            topics=topics,
            selection=selection,
            group=default_group(topics, selection),
            dry_run=dry_run,
        )
        consumer = make_consumer(self.kafka, options.group)
        producer = None if dry_run else make_producer(self.kafka)
        try:
            return Replayer(
                consumer=consumer, producer=producer, codec=self.codec, options=options
            ).run()
        finally:
            consumer.close()
            if producer is not None:
                producer.flush(10)

    def cancel(self, queue: str, job_id: str, *, reason: str) -> None:
        """Record the cancellation on ``jobs.Q.control``, as ``producer cancel`` does: the
        job is skipped wherever it waits, a running one loses its lease. Returns once
        the broker acknowledged it."""
        record = Cancellation(job_id=job_id, cancelled_at_ms=round(time.time() * 1000),
                              reason=reason)  # fmt: skip
        producer = make_producer(self.kafka)
        producer.produce(self.topics(queue).control, key=record.key, value=record.encode())
        if producer.flush(30) > 0:
            raise KafkaException(f"the cancellation of {job_id} was not acknowledged in 30 s")

    def result(self, queue: str, job_id: str) -> str | None:
        """The value job ``job_id`` returned, as JSON text, while its results partition
        keeps it (read from a minute before its id's time); None for none or unreadable
        (a queue from before results has no results topic)."""
        try:
            value = stored_result(self.kafka, self.topics(queue), job_id)
        except ResultsUnreadable:
            return None
        return None if value is None else result_text(value, self.codec.registry)

    def finished(self, queue: str, job_id: str) -> Finished:
        """How the job ended, from the index once it caught up with the queue's status
        topic, else from a scan of the topic; and whether the queue's status records are
        switched off (then "not finished" may only mean "not recorded")."""
        if self.index is not None:
            self.index.want(queue)
            if self.index.caught_up(queue):
                return Finished(self.index.get(queue, job_id), self.index.switched_off(queue))
        status, switched_off = ended_status(
            self.kafka, self.topics(queue).status, job_id, timeout_s=10
        )
        return Finished(status, switched_off)
