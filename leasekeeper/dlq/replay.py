"""Replay dead letters to the ready topic, crash-safe through a consumer group.

The replay reads ``jobs.Q.dlq`` from its consumer group's committed offsets to
the end offsets captured at start. Each matching dead letter becomes its job
again on its class's topic (``jobs.Q`` for the default class): the original job
id (the handler's idempotency key), the error history kept, ``attempt`` reset
to 0, ``replay_count`` + 1, an ordered job's ``ordering_seq`` cleared. A DLQ offset
is committed only once every record up to it is handled: a replayed job's
delivery report said Kafka acked it, or the record was skipped. The per
partition ``CommitTracker`` keeps that contiguous, as in the leasekeeper, so a
``kill -9`` mid-replay loses nothing and a re-run replays again at most what
was in flight since the last commit.

The group's offsets mean "this selection is handled up to here": a filtered
replay commits past the records it did not select too. The default group is
therefore named after the selection (``dlq-replay.jobs.Q`` without filters,
``dlq-replay.jobs.Q.<fingerprint>`` with them): re-running the same replay
continues where it stopped, and a replay with other filters starts over on its
own group instead of finding its records already passed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from jobcore.kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
    produce_reliably,
)
from jobcore.topics import QueueTopics
from leasekeeper.core.commit_tracker import CommitTracker
from leasekeeper.dlq.entries import DeadLetterFilter, DlqEntry, decode_entry
from leasekeeper.dlq.reader import PartitionRange, plan_ranges, scan
from schemas.codec import EnvelopeCodec
from schemas.job import Job
from schemas.job_headers import job_headers

__all__ = ["ReplayOptions", "ReplayReport", "Replayer", "default_group", "replay_job"]

log = logging.getLogger(__name__)


def default_group(topics: QueueTopics, selection: DeadLetterFilter) -> str:
    """The consumer group that remembers how far this selection was replayed."""
    group = f"dlq-replay.{topics.ready}"
    return group if selection.is_empty else f"{group}.{selection.fingerprint()}"


def replay_job(job: Job, *, now_ms: int) -> Job:
    """The job to enqueue again: same id and history, attempts reset, due now.

    An ordered job's ``ordering_seq`` (its first offset, kept while it went through
    the ordering lane) is cleared: the replay is a new job of its key, at the end of
    the key's line (docs/ordering.md). With the old place it would run ahead of the
    jobs of its key enqueued since, or be taken for the key's dead head and skipped.
    """
    return replace(
        job, attempt=0, replay_count=job.replay_count + 1, run_at_ms=now_ms, ordering_seq=-1
    )


@dataclass(frozen=True, kw_only=True)
class ReplayOptions:
    topics: QueueTopics
    selection: DeadLetterFilter
    group: str
    dry_run: bool = False
    rate: float | None = None  # replayed records per second at most (None: as fast as Kafka)
    commit_interval_s: float = 0.2
    flush_timeout_s: float = 60.0


@dataclass(kw_only=True)
class ReplayReport:
    """What a replay did; in a dry run ``selected`` lists what it would replay."""

    group: str
    dry_run: bool
    to_scan: int = 0
    scanned: int = 0
    replayed: int = 0
    not_matching: int = 0
    undecodable: list[DlqEntry] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    selected: list[DlqEntry] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.failed


class Replayer:
    """One replay run over a queue's DLQ; see the module docstring.

    ``producer`` may be None for a dry run. ``clock`` (monotonic seconds) paces
    ``rate`` and commits; ``wall`` (epoch seconds) stamps the replayed jobs.
    """

    def __init__(
        self,
        *,
        consumer: Consumer,
        producer: Producer | None,
        codec: EnvelopeCodec,
        options: ReplayOptions,
        on_progress: Callable[[ReplayReport], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if producer is None and not options.dry_run:
            raise ValueError("a replay that is not a dry run needs a producer")
        self._consumer = consumer
        self._producer = producer
        self._codec = codec
        self._options = options
        self._on_progress = on_progress or (lambda report: None)
        self._clock = clock
        self._wall = wall
        self._dlq = options.topics.dlq
        self._trackers: dict[int, CommitTracker] = {}
        self._committed: dict[int, int] = {}
        self._in_flight = 0
        self._produced = 0
        self._started = 0.0
        self._last_commit = 0.0
        self.report = ReplayReport(group=options.group, dry_run=options.dry_run)

    def run(self) -> ReplayReport:
        ranges = plan_ranges(self._consumer, self._dlq, from_committed=True)
        self._start(ranges)
        for record in scan(self._consumer, self._dlq, ranges):
            self._trackers[record.partition].fetched(record.offset)
            entry = decode_entry(self._codec, record.partition, record.offset, record.value)
            self._handle(entry)
            self.report.scanned += 1
            self._on_progress(self.report)
            self._serve()
        self._finish()
        self._on_progress(self.report)
        return self.report

    def _start(self, ranges: list[PartitionRange]) -> None:
        self._trackers = {r.partition: CommitTracker(r.start) for r in ranges}
        self._committed = {r.partition: r.start for r in ranges}
        self.report.to_scan = sum(r.size for r in ranges)
        self._started = self._last_commit = self._clock()
        self._on_progress(self.report)

    def _handle(self, entry: DlqEntry) -> None:
        job = entry.job
        if job is None:
            self.report.undecodable.append(entry)  # reported, never replayed
            self._resolve(entry)
        elif not self._options.selection.matches(entry):
            self.report.not_matching += 1
            self._resolve(entry)
        elif self._options.dry_run:
            self.report.selected.append(entry)
            self._resolve(entry)
        else:
            self._throttle()
            self._produce(entry, replay_job(job, now_ms=round(self._wall() * 1000)))

    def _resolve(self, entry: DlqEntry) -> None:
        self._trackers[entry.partition].resolve(entry.offset)

    def _produce(self, entry: DlqEntry, job: Job) -> None:
        assert self._producer is not None
        source = f"{self._dlq}/{entry.partition}/{entry.offset}"
        try:
            value = self._codec.encode(job)
            produce_reliably(
                self._producer,
                self._options.topics.of_class(job.priority_class),  # its class, its line
                key=job.tenant_id.encode(),
                value=value,
                headers=[*job_headers(job, value), ("replayed_from", source.encode())],
                on_delivery=self._delivered(entry, source),
            )
        except KafkaException as exc:  # refused locally, e.g. too large
            self.report.failed.append(f"{source} (job {job.job_id}): {exc}")
            return
        self._in_flight += 1
        self._produced += 1

    def _delivered(
        self, entry: DlqEntry, source: str
    ) -> Callable[[KafkaError | None, Message], None]:
        def report(error: KafkaError | None, _message: Message) -> None:
            self._in_flight -= 1
            if error is not None:
                # Left unresolved: the commit stops before it and a re-run retries it.
                self.report.failed.append(f"{source}: {error}")
                return
            self.report.replayed += 1
            self._resolve(entry)

        return report

    def _throttle(self) -> None:
        if self._options.rate is None:
            return
        due = self._started + self._produced / self._options.rate
        while (now := self._clock()) < due:
            self._serve(wait_s=min(due - now, 0.05))

    def _serve(self, wait_s: float = 0.0) -> None:
        """Deliver reports (which resolve offsets), then commit when the interval passed."""
        if self._producer is not None:
            self._producer.poll(wait_s)
        if self._clock() - self._last_commit >= self._options.commit_interval_s:
            self._commit()

    def _finish(self) -> None:
        deadline = self._clock() + self._options.flush_timeout_s
        while self._in_flight > 0 and self._clock() < deadline:
            self._serve(wait_s=0.1)
        if self._in_flight > 0:
            self.report.failed.append(f"{self._in_flight} replayed jobs unacknowledged at exit")
        self._commit()

    def _commit(self) -> None:
        self._last_commit = self._clock()
        if self._options.dry_run:
            return
        moved = {
            p: t.committable
            for p, t in self._trackers.items()
            if t.committable > self._committed[p]
        }
        if not moved:
            return
        offsets = [TopicPartition(self._dlq, p, offset) for p, offset in moved.items()]
        try:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as exc:
            log.warning("committing replay progress failed (will retry): %s", exc)
            return
        self._committed.update(moved)
