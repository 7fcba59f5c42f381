"""Why one outbox row was not relayed, and what the relay does about it (pure).

A row's failure is that row's, never the relay's: a relay that died of a row would
read the same row first after its restart and die again, and so would every
standby. So each failure is sorted, as :func:`jobcore.kafka.classify_produce_error`
sorts a produce error, into one of two fates:

- **for good** (too large, unknown priority class, a topic missing for longer than
  the grace, not authorised, an envelope that does not decode): the row is set
  aside in ``job_outbox_dead`` (:class:`DeadReason` says why);
- **retriable** (anything else): the row stays, and its (queue, tenant) backs off,
  exponentially and capped, while the other tenants go on.

A missing topic is retriable during the grace (a queue being created, a topic
being recreated) and for good after it, counted from the first failure that named
that topic.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

from jobcore.kafka import KafkaError, ProduceFailure, classify_produce_error
from schemas.vocabulary import OnDead

__all__ = ["Classification", "DeadReason", "OnDead", "RowFailures", "Tenant", "classify"]

Tenant = tuple[str, str]  # (queue, tenant id): the unit a retriable failure holds back

_CODE = re.compile(r"code=(_?[A-Z][A-Z0-9_]*)")
_MISSING = re.compile(r"has no (?:delay tier )?topic (\S+)")
_UNKNOWN_TOPIC = frozenset((KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC))
_NOT_AUTHORISED = frozenset(
    (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError.CLUSTER_AUTHORIZATION_FAILED)
)


class DeadReason(StrEnum):
    """Why a row was set aside: the ``reason`` column of ``job_outbox_dead``."""

    TOO_LARGE = "too large"
    UNKNOWN_CLASS = "unknown priority class"
    MISSING_TOPIC = "missing topic"
    NOT_AUTHORISED = "not authorised"
    UNDECODABLE = "undecodable"
    INVALID = "invalid job"


@dataclass(frozen=True, slots=True, kw_only=True)
class Classification:
    """One failure, sorted: ``dead`` for good, else retriable (``missing_topic`` names
    a topic that does not exist, for good once past the grace)."""

    error: str
    dead: DeadReason | None = None
    missing_topic: str | None = None


def classify(exc: BaseException, *, topic: str) -> Classification:
    """Sort an exception raised on a row's way to Kafka (its destination check, its
    produce, its delivery report); ``topic`` is where it was going, when known."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, ValueError):  # the priority class check, or a queue name
        reason = DeadReason.UNKNOWN_CLASS if "priority class" in text else DeadReason.INVALID
        return Classification(error=text, dead=reason)
    code = _kafka_code(text)
    missing = _MISSING.search(text)
    if code in _UNKNOWN_TOPIC or (code is None and missing is not None):
        return Classification(error=text, missing_topic=missing.group(1) if missing else topic)
    if code in _NOT_AUTHORISED:
        return Classification(error=text, dead=DeadReason.NOT_AUTHORISED)
    if code is not None and classify_produce_error(KafkaError(code)) is ProduceFailure.TOO_LARGE:
        return Classification(error=text, dead=DeadReason.TOO_LARGE)
    return Classification(error=text)


def _kafka_code(text: str) -> int | None:
    """The KafkaError code an error's text names (``KafkaError{code=NAME,...}``)."""
    found = _CODE.search(text)
    code = getattr(KafkaError, found.group(1), None) if found else None
    return code if isinstance(code, int) else None


class RowFailures:
    """The relay's memory of failures: per (queue, tenant) backoff and, per missing
    topic, since when it is missing. Times are monotonic seconds, passed in."""

    def __init__(self, *, grace_s: float, backoff_base_s: float, backoff_max_s: float) -> None:
        self._grace_s = grace_s
        self._base_s = backoff_base_s
        self._max_s = backoff_max_s
        self._backoff: dict[Tenant, tuple[int, float]] = {}  # tenant -> (failures, until)
        self._missing: dict[str, float] = {}  # topic -> first failure naming it

    def judge(self, verdict: Classification, tenant: Tenant, now: float) -> DeadReason | None:
        """The reason to set the row aside, or None: then ``tenant`` backs off."""
        if verdict.dead is not None:
            return verdict.dead
        topic = verdict.missing_topic
        if topic is not None and now - self._missing.setdefault(topic, now) >= self._grace_s:
            return DeadReason.MISSING_TOPIC
        failures = self._backoff.get(tenant, (0, 0.0))[0] + 1
        delay = min(self._max_s, self._base_s * 2 ** min(failures - 1, 32))
        self._backoff[tenant] = (failures, now + delay)
        return None

    def delivered(self, tenant: Tenant, topic: str) -> None:
        """A row of ``tenant`` landed in ``topic``: both are healthy again."""
        self._backoff.pop(tenant, None)
        self._missing.pop(topic, None)

    def set_aside(self, tenant: Tenant) -> None:
        """The row that held ``tenant`` back is gone: its next rows start afresh."""
        self._backoff.pop(tenant, None)

    def failing(self, tenant: Tenant) -> bool:
        """Whether ``tenant``'s last row failed retriably: after its backoff, that row
        goes alone, so the tenant's later rows never land before it."""
        return tenant in self._backoff

    def waiting(self, now: float) -> list[Tenant]:
        """The tenants backing off at ``now``: their rows are not read."""
        return [tenant for tenant, (_, until) in self._backoff.items() if until > now]

    def next_due_s(self, now: float) -> float | None:
        """Seconds until the first backing-off tenant may go again (None: none waits)."""
        due = [until - now for _, until in self._backoff.values() if until > now]
        return min(due) if due else None

    def backoff_s(self, tenant: Tenant, now: float) -> float:
        """How long ``tenant`` still waits (0 when it does not)."""
        return max(0.0, self._backoff.get(tenant, (0, 0.0))[1] - now)
