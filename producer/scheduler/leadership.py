"""Leadership from Kafka group membership: the member holding partition 0 of the
one-partition leader topic is the leader.

Kafka's group coordinator already does what an election needs: it notices a dead
member after ``session.timeout.ms`` and hands its partition to a live one. The
assignor is cooperative-sticky so a member joining does not move leadership; a
leader gives it up only by leaving, dying or being fenced. No records are ever
read from the topic: membership is the whole point.
"""

from __future__ import annotations

import logging

from jobcore.kafka import Consumer, KafkaError, KafkaSettings, TopicPartition, make_consumer
from producer.scheduler.options import SchedulerOptions

__all__ = ["KafkaLeadership"]

log = logging.getLogger(__name__)


class KafkaLeadership:
    """``term`` is None while not leader, and a new number each time leadership is won,
    so a leader that lost and regained it in one poll still re-reads the state."""

    def __init__(self, settings: KafkaSettings, options: SchedulerOptions) -> None:
        self._topic = options.leader_topic
        self._consumer: Consumer = make_consumer(
            settings,
            options.group,
            **{
                "session.timeout.ms": options.session_timeout_ms,
                # A follower learns of the leader's death at its next heartbeat.
                "heartbeat.interval.ms": max(100, options.session_timeout_ms // 10),
                "partition.assignment.strategy": "cooperative-sticky",
            },
        )
        self._term: int | None = None
        self._terms = 0

    @property
    def term(self) -> int | None:
        return self._term

    def start(self) -> None:
        self._consumer.subscribe(
            [self._topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def poll(self, timeout: float) -> None:
        """Take part in the group for up to ``timeout`` s; leadership changes happen here."""
        message = self._consumer.poll(timeout)
        error = message.error() if message is not None else None
        if error is not None and error.code() != KafkaError._PARTITION_EOF:
            log.warning("leader topic: %s", error)

    def close(self) -> None:
        """Leave the group, so a follower takes over at once rather than after a timeout."""
        self._term = None
        self._consumer.close()

    def _holds_leadership(self, partitions: list[TopicPartition]) -> bool:
        return any(tp.topic == self._topic and tp.partition == 0 for tp in partitions)

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._holds_leadership(partitions):
            self._terms += 1
            self._term = self._terms
            log.info("became the cron leader (term %d)", self._term)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._holds_leadership(partitions) and self._term is not None:
            self._term = None
            log.info("gave up cron leadership (revoked)")

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if self._holds_leadership(partitions) and self._term is not None:
            self._term = None
            log.warning("lost cron leadership (session expired)")
