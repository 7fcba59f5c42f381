"""The consumer loop's fast path through a fetch, compiled with the hot path.

Nearly every record of a busy queue is a ready job whose head is in its headers:
its TopicPart is looked up, its head read, and it joins the records offered to the
engine under one lock. That per-record work ran as interpreted bytecode in the
loop, one of the leasekeeper's larger costs on a no-op drain; here it is compiled.
Anything else (an error or end-of-partition event, a record without a value, a
delay tier's record, a held partition, a switch to check, a head that must be
decoded from the envelope) stops the run and goes to the loop's own handling,
which keeps the engine seeing each partition's records in offset order.
"""

from __future__ import annotations

from collections.abc import Container

from jobcore.kafka import Message
from leasekeeper.core.leases import TopicPart
from schemas.job_headers import H_ORDERING_KEY, Headers, JobHead, read_head, read_switch

# What the engine is offered: a record's partition, offset, head and envelope; no
# head for a record held unread (``FetchPort.holding``), and its key for the value.
Due = tuple[TopicPart, int, JobHead | None, bytes]


def gather(
    messages: list[Message],
    start: int,
    ready_parts: dict[str, dict[int, TopicPart]],
    held: Container[TopicPart],
    overflow_topic: str,
    due: list[Due],
    holding: dict[TopicPart, bytes] | None = None,
) -> int:
    """Append the ready jobs of ``messages[start:]`` to ``due`` until one needs the
    slow path; return its index (``len(messages)`` when none does). ``ready_parts``:
    the ready topics' partitions by number (filled in here), ``held``: partitions
    held at a head (their records are fetched again later); ``holding``: per
    partition, the key whose records join ``due`` unread (a deferred flood's)."""
    n = len(messages)
    i = start
    while i < n:
        message = messages[i]
        if message.error() is not None:
            return i
        value = message.value()
        topic = message.topic()
        partition = message.partition()
        if value is None or topic is None or partition is None:
            return i
        parts = ready_parts.get(topic)
        if parts is None:
            return i  # a delay tier's record, or a topic the loop handles itself
        tp = parts.get(partition)
        if tp is None:
            tp = parts[partition] = TopicPart(topic, partition)
        if tp in held:
            return i
        if holding and _held(message, tp, holding, due):
            i += 1
            continue
        headers = message.headers()
        if topic == overflow_topic and read_switch(headers) is not None:
            return i  # a diverted job: its switch is checked by the loop
        head = read_head(message.key(), headers, value)
        offset = message.offset()
        if head is None or offset is None:
            return i
        due.append((tp, offset, head, value))
        i += 1
    return n


def _held(message: Message, tp: TopicPart, holding: dict[TopicPart, bytes], due: list[Due]) -> bool:
    """A deferred flood's record joins ``due`` by its offset alone: a flood is read
    past at the consumer's pace, not the decoder's. Not one with an ordering key:
    its line must see it when the partition is read (``ordering/settling.py``)."""
    key = holding.get(tp)
    if key is None or message.key() != key:
        return False
    headers: Headers | None = message.headers()
    if headers and H_ORDERING_KEY in dict(headers):
        return False  # an ordered job: its key's line keeps its order
    offset = message.offset()
    if offset is None:
        return False
    due.append((tp, offset, None, key))  # no head: the key where the value would be
    return True
