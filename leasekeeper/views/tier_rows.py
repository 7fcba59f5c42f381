"""Delay-tier rows as ``inspect`` and the dashboard list them: shortest delay first,
and one line in place of them all while every one is empty.

A queue has a tier topic per delay and priority class (six by default, more with
classes), so by name ``retry.10m`` sorts before ``retry.1d`` before ``retry.1h``
and an idle queue shows a screen of zeros; in delay order the rows read as the
path a retried job takes, and the single line says "nothing is waiting" at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from jobcore.delay_tiers import parse_duration

__all__ = ["all_empty", "by_delay", "tier_delay", "tiers_line"]


def tier_delay(topic: str) -> float:
    """The delay a tier topic names in its last part (``jobs.q.retry.1m`` is 60);
    a name that is not a duration sorts last."""
    try:
        return parse_duration(topic.rsplit(".", 1)[-1])
    except ValueError:
        return float("inf")


def by_delay(counts: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
    """``(topic, count)`` pairs from the shortest delay up; one delay's classes by name."""
    return sorted(counts, key=lambda item: (tier_delay(item[0]), item[0]))


def all_empty(counts: Sequence[tuple[str, int]]) -> bool:
    """Whether the rows would all say zero (and there are some)."""
    return bool(counts) and all(n == 0 for _, n in counts)


def tiers_line(topics: Sequence[str]) -> str:
    """The row shown for empty tiers: how many, and the shortest and longest delay."""
    ordered = [topic for topic, _ in by_delay((t, 0) for t in topics)]
    short = [topic.rsplit(".", 1)[-1] for topic in ordered]
    span = short[0] if len(set(short)) == 1 else f"{short[0]}-{short[-1]}"
    return f"{len(ordered)} tiers, empty ({span})"
