"""The fetch's compiled fast path (``leasekeeper.kafka.fetch_path.gather``): ready jobs read
from their headers join ``due`` in fetch order, and the first record that needs the
loop's own handling stops the run at its index."""

from __future__ import annotations

from confluent_kafka import KafkaError, Message

from leasekeeper.core.leases import TopicPart
from leasekeeper.kafka.fetch_path import Due, gather
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from schemas.job_headers import Switch, job_headers, switch_header

CODEC = EnvelopeCodec(SchemaRegistry())
READY, OVERFLOW, TIER = "jobs.q", "jobs.q.overflow", "jobs.q.delay.1s"


def _record(n: int, topic: str = READY, partition: int = 0, *, headers: bool = True,
            switch: Switch | None = None) -> Message:  # fmt: skip
    job = Job(job_id=f"j-{n}", queue="q", tenant_id="t", type="noop",
              payload=CODEC.encode_payload("noop", {"n": n}), created_at_ms=1)  # fmt: skip
    value = CODEC.encode(job)
    found: list[tuple[str, str | bytes | None]] = [*job_headers(job, value)] if headers else []
    if switch is not None:
        found.append(switch_header(switch))
    return Message(topic=topic, partition=partition, offset=n, key=b"t", value=value,
                   headers=found)  # fmt: skip


def _parts() -> dict[str, dict[int, TopicPart]]:
    return {READY: {}, OVERFLOW: {}}


def _offsets(due: list[Due]) -> list[tuple[str, int, int, str]]:
    return [(tp.topic, tp.partition, offset, head.job_id) for tp, offset, head, _ in due]


def test_ready_jobs_join_due_in_fetch_order_with_one_topic_part_per_partition() -> None:
    messages = [_record(0), _record(1, partition=1), _record(2), _record(3, OVERFLOW, 1)]
    parts, due = _parts(), list[Due]()
    assert gather(messages, 0, parts, {}, OVERFLOW, due) == len(messages)
    assert _offsets(due) == [(READY, 0, 0, "j-0"), (READY, 1, 1, "j-1"), (READY, 0, 2, "j-2"),
                             (OVERFLOW, 1, 3, "j-3")]  # fmt: skip
    assert due[0][0] is due[2][0] is parts[READY][0]  # made once, then looked up
    assert due[0][3] == messages[0].value()


def test_the_first_record_that_needs_the_loop_stops_the_run_at_its_index() -> None:
    held = {TopicPart(READY, 1): 0}
    switch = Switch(READY, 0, 5, 0)
    needs_the_loop = [
        Message(topic=READY, partition=0, offset=9, error=KafkaError(KafkaError._PARTITION_EOF)),
        Message(topic=READY, partition=0, offset=9, value=None),  # a tombstone
        _record(9, TIER),  # a delay tier: not a ready topic
        _record(9, partition=1),  # its partition is held at a head
        _record(9, OVERFLOW, switch=switch),  # a diverted job: its switch is checked
        _record(9, headers=False),  # no headers: the envelope is decoded
    ]
    for record in needs_the_loop:
        due: list[Due] = []
        messages = [_record(0), _record(1), record, _record(2)]
        assert gather(messages, 0, _parts(), held, OVERFLOW, due) == 2, record
        assert _offsets(due) == [(READY, 0, 0, "j-0"), (READY, 0, 1, "j-1")]
        # The loop handles it, then the run goes on after it.
        assert gather(messages, 3, _parts(), held, OVERFLOW, due) == 4
        assert _offsets(due)[-1] == (READY, 0, 2, "j-2")
