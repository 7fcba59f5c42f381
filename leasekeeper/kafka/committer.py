"""Every way the leasekeeper commits its partitions, and the answers to those commits.

A partition is committed at its lowest unresolved offset, with what is resolved
beyond it in the commit's metadata (``offset_metadata``). In steady state the loop
commits asynchronously, one commit at a time, its answer served by ``on_commit`` on
the loop's thread: a synchronous commit would block the reaper, delivery reports
and fetching for as long as the group coordinator is unreachable. A revoke and a
shutdown commit synchronously (``commit``), since they must not let go before the
commit is known. Failures back off, capped and exponential, the positions kept.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobcore.kafka import (
    Consumer,
    ErrorKind,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
    classify_error,
)
from jobcore.kafka_retry import Backoff
from leasekeeper.core.commit_port import CommitPort
from leasekeeper.core.leases import TopicPart
from leasekeeper.kafka.family_consumer import FamilyConsumer

log = logging.getLogger(__name__)

# How long an asynchronous commit may go unanswered before the next one is sent anyway.
ASYNC_COMMIT_PATIENCE_S = 30.0

# Commits and offset look-ups while the group coordinator is unreachable.
COMMIT_BACKOFF = Backoff(base_s=0.2, cap_s=10.0)

# How long a revoke or shutdown keeps retrying a commit the coordinator cannot take
# yet (it moves to another broker within seconds), and the pause between tries.
HANDOVER_COMMIT_PATIENCE_S = 15.0
COMMIT_RETRY_S = 0.2


class Committer:
    """The loop's commits. ``consumer`` gives the loop's consumer of the moment (a
    fatal error replaces it); ``producer`` serves delivery reports while a
    synchronous commit waits."""

    def __init__(
        self,
        *,
        commits: CommitPort,
        consumer: Callable[[], Consumer | FamilyConsumer],
        producer: Producer,
        clock: Callable[[], float],
        backoff: Backoff = COMMIT_BACKOFF,
    ) -> None:
        self._commits = commits
        self._consumer = consumer
        self._producer = producer
        self._clock = clock
        self._backoff = backoff
        self._failures = 0
        self._next = 0.0  # no commit before (a backoff after a failure)
        self._async_commit: dict[TopicPart, tuple[int, str]] | None = None
        self._async_commit_at = 0.0
        self.commits = 0

    def may_commit(self, now: float) -> bool:
        """Whether a failure's backoff is over."""
        return now >= self._next

    def forget(self) -> None:
        """The consumer failed for good: the commit on its way is no one's now."""
        self._async_commit = None

    def commit_async(self) -> None:
        """The steady-state commit: asynchronous, one at a time, its answer served by
        ``on_commit`` on this thread. A synchronous commit blocks for as long as the
        group coordinator is unreachable, and with it the reaper, delivery reports and
        fetching; an asynchronous one lets the loop go on through a broker outage."""
        if self._async_commit is not None:
            if self._clock() - self._async_commit_at < ASYNC_COMMIT_PATIENCE_S:
                return
            log.warning(
                "no answer to a commit after %.0fs; committing again", ASYNC_COMMIT_PATIENCE_S
            )
        positions = self._commits.commit_positions()
        if not positions:
            self._async_commit = None
            return
        offsets = [
            TopicPartition(tp.topic, tp.partition, offset, metadata=metadata)
            for tp, (offset, metadata) in positions.items()
        ]
        try:
            self._consumer().commit(offsets=offsets, asynchronous=True)
        except KafkaException as exc:
            self._async_commit = None
            self._failed(exc)
            return
        self._async_commit, self._async_commit_at = positions, self._clock()

    def on_commit(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        """The answer to an asynchronous commit (the consumer's ``on_commit``): forget
        what Kafka took, shrink metadata the broker refused as too large (the next
        commit carries less), back off on anything else. A commit through several
        consumers (one per topic family) is answered in parts: it is done once every
        part is."""
        positions = self._async_commit or {}
        # An answer naming no partition (a failed request) answers the whole commit.
        answered = {TopicPart(part.topic, part.partition) for part in partitions} or set(positions)
        left = {tp: at for tp, at in positions.items() if tp not in answered}
        self._async_commit = left or None
        done: dict[TopicPart, tuple[int, str]] = {}
        failure: KafkaError | None = None
        for part in partitions:
            tp = TopicPart(part.topic, part.partition)
            position = positions.get(tp)
            if position is None or part.offset != position[0]:
                continue  # not this commit's (a synchronous commit's answer)
            code = part.error.code() if part.error is not None else None
            if code is None and error is None:
                done[tp] = position
            elif code == KafkaError.OFFSET_METADATA_TOO_LARGE:
                self._commits.shrink_metadata(tp)
            else:
                failure = part.error or error
        if done:
            self._failures = 0
            self._next = 0.0
            self.commits += self._async_commit is None  # counted once, at its last part
            self._commits.committed(done)
        if failure is not None:
            self._failed(KafkaException(failure))

    def commit(
        self, only: set[TopicPart] | None = None, patience_s: float = 0.0, serve_group: bool = False
    ) -> None:
        """Commit each partition at its lowest unresolved offset, with the progress
        beyond it in the metadata, when either changed. Synchronous: for a revoke and
        for shutdown, which must not let go before the commit is known. A failure
        worth waiting out (the coordinator moving after a broker failure) is retried
        for ``patience_s``: a revoke that gives up hands the next owner a stale commit,
        and it runs again every job finished since.

        ``serve_group`` (shutdown, outside any rebalance callback): a rebalance in
        progress (another member joining) is waited out too, answering it meanwhile,
        because it cannot end until this consumer does. Giving up handed over every
        job finished since the last commit (106 ran twice in one CI run). The broker
        refuses such a commit as ``REBALANCE_IN_PROGRESS``, or as ``ILLEGAL_GENERATION``
        when the group's generation moved on while the commit was on its way (88 ran
        twice in a CI run that gave up on it); both are answered. A member whose
        partitions were lost for good has no positions left once answered: it stops
        at once."""
        positions = self._commits.commit_positions(only)
        if not positions:
            return
        deadline = self._clock() + patience_s
        while True:
            offsets = [
                TopicPartition(tp.topic, tp.partition, offset, metadata=metadata)
                for tp, (offset, metadata) in positions.items()
            ]
            try:
                self._consumer().commit(offsets=offsets, asynchronous=False)
                break
            except KafkaException as exc:
                error: KafkaError = exc.args[0]
                code = error.code()
                if code == KafkaError.OFFSET_METADATA_TOO_LARGE:
                    self._commit_each(positions)
                    return
                if _worth_waiting(error) and self._clock() < deadline:
                    log.warning("commit failed (%s); retrying", error)
                    self._producer.poll(COMMIT_RETRY_S)  # serves delivery reports meanwhile
                    continue
                if (
                    serve_group
                    and self._clock() < deadline
                    and code in (KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION)
                ):
                    log.warning("commit failed (%s); answering the rebalance first", error)
                    # Paused: nothing is fetched; a revoke served here commits its own.
                    self._consumer().consume(num_messages=1, timeout=COMMIT_RETRY_S)
                    self._producer.poll(0)
                    positions = self._commits.commit_positions(only)
                    if not positions:
                        return
                    continue
                self._failed(exc)
                return
        self._failures = 0
        self._next = 0.0
        self.commits += 1
        self._commits.committed(positions)

    def _commit_each(self, positions: dict[TopicPart, tuple[int, str]]) -> None:
        """Some partition's metadata is over the broker's limit (the others may have been
        committed): commit one by one, shrinking the refused metadata until it fits."""
        done: dict[TopicPart, tuple[int, str]] = {}
        for tp, first in positions.items():
            position: tuple[int, str] | None = first
            while position is not None:
                offset, metadata = position
                try:
                    self._consumer().commit(
                        offsets=[TopicPartition(tp.topic, tp.partition, offset, metadata=metadata)],
                        asynchronous=False,
                    )
                except KafkaException as exc:
                    if exc.args[0].code() != KafkaError.OFFSET_METADATA_TOO_LARGE or not metadata:
                        log.warning("commit of %s failed (will retry): %s", tp, exc)
                        break
                    position = self._commits.shrink_metadata(tp)
                    continue
                done[tp] = position
                break
        if done:
            self.commits += 1
            self._commits.committed(done)

    def _failed(self, exc: KafkaException) -> None:
        """Back off (capped, exponential) while commits fail, one log line per step:
        the positions are kept and committed once the group coordinator is back."""
        delay = self._backoff.delay(self._failures)
        self._failures += 1
        self._next = self._clock() + delay
        log.warning("commit failed (%s); retrying in %.1fs", exc.args[0], delay)


def _worth_waiting(error: KafkaError) -> bool:
    """A commit failure a moment's wait can cure: the cluster's transient errors (the
    coordinator moving or loading the group, a request that did not get through),
    except a rebalance in progress, which waits for this very callback to return."""
    return (
        classify_error(error) is ErrorKind.TRANSIENT
        and error.code() != KafkaError.REBALANCE_IN_PROGRESS
    )
