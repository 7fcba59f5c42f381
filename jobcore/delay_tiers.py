"""The delay tiers of a queue: which retry topic a job waits in until its ``run_at``.

Kafka has no per-record delay, so a queue gets a few topics with fixed delays
(``jobs.Q.retry.1s``, ``.10s``, ``.1m``, ...). A job waiting ``d`` seconds goes
to the largest tier not longer than ``d``. The tier's consumer reads in offset
order and releases a record at ``min(run_at, produced_at + tier)``: records in
one tier were produced in time order, so that release time grows along the
partition and a consumer never waits on its head longer than one tier length.
On release a job that is due goes back to its class; one that is not yet due
(a delay longer than the largest tier) *hops*: it is produced again to the tier
``next_hop`` names, until it is due. Pure: times are passed in, in epoch ms.

Each priority class has tiers of its own (``jobs.Q.critical.retry.10s``; the
default class keeps ``jobs.Q.retry.10s``): a tier partition is read in order, so
in shared tiers a critical retry would wait for the bulk retries ahead of it to
be fetched, and a partition over its share of a full window is not fetched.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import pairwise

from jobcore.topics import DEFAULT_CLASS, QueueTopics

__all__ = ["DEFAULT_TIERS", "MAX_DELAY", "DelayTiers", "parse_duration"]

# The longest delay: a cancellation must outlive the job it concerns, so the control
# topic keeps records a little longer than this (``jobcore.topic_admin`` derives its
# retention from it), and the leasekeepers hold that many days of cancellations.
# The bound also makes a delay in the wrong unit (ms passed as seconds) fail loudly.
MAX_DELAY = timedelta(days=30)
DEFAULT_TIERS = ("1s", "10s", "1m", "10m", "1h")

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
# Lower-case digits and a unit: also a legal, readable Kafka topic-name fragment.
_DURATION = re.compile(r"^([1-9][0-9]*)(ms|s|m|h|d)$")


def parse_duration(text: str) -> float:
    """``"500ms"``, ``"10s"``, ``"1m"``, ``"2h"``, ``"1d"`` in seconds; ValueError otherwise."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError(
            f"invalid delay tier {text!r}: a whole number and a unit (ms, s, m, h, d), e.g. 10s"
        )
    return int(match.group(1)) * _UNITS[match.group(2)]


@dataclass(frozen=True, kw_only=True)
class DelayTiers:
    """A queue's delay tiers, shortest first; ``seconds`` are parsed from ``names``."""

    names: tuple[str, ...] = DEFAULT_TIERS
    seconds: tuple[float, ...] = field(init=False)

    def __post_init__(self) -> None:
        if not self.names:
            raise ValueError("at least one delay tier is needed")
        seconds = tuple(parse_duration(name) for name in self.names)
        if any(a >= b for a, b in pairwise(seconds)):
            raise ValueError(f"delay tiers must be strictly increasing, got {self.names}")
        object.__setattr__(self, "names", tuple(self.names))
        object.__setattr__(self, "seconds", seconds)

    @classmethod
    def parse(cls, spec: str | Sequence[str]) -> DelayTiers:
        """From ``"1s,10s,1m"`` (a CLI flag) or a sequence of names."""
        names = spec.split(",") if isinstance(spec, str) else list(spec)
        return cls(names=tuple(name.strip() for name in names if name.strip()))

    @property
    def largest(self) -> str:
        return self.names[-1]

    def seconds_of(self, tier: str) -> float:
        try:
            return self.seconds[self.names.index(tier)]
        except ValueError:
            raise ValueError(
                f"unknown delay tier {tier!r} (tiers: {', '.join(self.names)})"
            ) from None

    def tier_for(self, delay_s: float) -> str:
        """The largest tier not longer than ``delay_s``.

        A delay shorter than the smallest tier still waits in the smallest one:
        its consumer releases it at ``run_at``, before the tier's full length.
        """
        chosen = self.names[0]
        for name, seconds in zip(self.names, self.seconds, strict=True):
            if seconds > delay_s:
                break
            chosen = name
        return chosen

    def next_hop(self, run_at_ms: int, now_ms: int) -> str | None:
        """Where a job due at ``run_at_ms`` waits next, or None when it is due now.

        Used both when a retry is scheduled and when a tier releases a record
        that is not yet due: the remaining wait picks the tier, so a long delay
        hops through the largest tier and finishes in a shorter one.
        """
        remaining_ms = run_at_ms - now_ms
        if remaining_ms <= 0:
            return None
        return self.tier_for(remaining_ms / 1000)

    def release_at_ms(self, *, tier: str, produced_at_ms: int, run_at_ms: int) -> int:
        """When a tier's consumer lets a record go: at ``run_at``, or after the tier's wait."""
        return min(run_at_ms, produced_at_ms + round(self.seconds_of(tier) * 1000))

    def topics(
        self, queue: QueueTopics, classes: Sequence[str] = (DEFAULT_CLASS,)
    ) -> tuple[str, ...]:
        """The retry topic of each tier of each class in ``classes`` (the default class
        only, unless told): ``jobs.Q.retry.<tier>``, ``jobs.Q.critical.retry.<tier>``."""
        return tuple(topic for _, _, topic in self.class_topics(queue, classes))

    def class_topics(
        self, queue: QueueTopics, classes: Sequence[str]
    ) -> tuple[tuple[str, str, str], ...]:
        """``(class, tier, topic)`` of each tier of each class: every class has tiers of
        its own, so a retry waits behind the retries of its own class only."""
        ordered = sorted(dict.fromkeys(classes), key=lambda n: n != DEFAULT_CLASS)
        return tuple(
            (klass, name, queue.retry(name, klass)) for klass in ordered for name in self.names
        )
