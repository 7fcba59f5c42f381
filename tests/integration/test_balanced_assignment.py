"""Balanced assignment against the real broker (issue 10): two leasekeepers each own
their share of every class's ready partitions and of the delay tiers, also after one
of them is killed (-9) and started again. A group balanced by its total partition
count could leave one of them with tier partitions only, its workers idle."""

from __future__ import annotations

from collections import Counter

import pytest

from jobcore.delay_tiers import DelayTiers
from jobcore.priority import PriorityClasses
from tests.system import Leasekeeper, System, wait_until

CLASSES = PriorityClasses().names
# Short sessions: a member that stopped answering leaves the group sooner.
FAST = ["--session-timeout-ms", "6000", "--drain-grace", "1"]


def owned(leasekeeper: Leasekeeper, system: System) -> Counter[str]:
    """How many partitions of each family ``leasekeeper`` owns: each class's ready
    topic by class name, every delay tier together as ``tiers``."""
    snapshot = leasekeeper.snapshot() or {}
    family = {system.topics.of_class(c): c for c in CLASSES}
    return Counter(
        family.get(p["topic"], "tiers" if system.topics.is_tier(p["topic"]) else p["topic"])
        for p in snapshot.get("partitions", [])
    )


def balanced(pair: list[Leasekeeper], system: System) -> bool:
    """Each class's ready partitions split evenly, and the tiers within one partition."""
    first, second = (owned(lk, system) for lk in pair)
    tiers = len(DelayTiers().topics(system.topics, CLASSES)) * system.partitions
    half = system.partitions // 2
    return (
        all(first[c] == second[c] == half for c in CLASSES)
        and first["tiers"] + second["tiers"] == tiers
        and abs(first["tiers"] - second["tiers"]) <= 1
    )


@pytest.mark.parametrize("static", [True, False], ids=["instance-id", "dynamic"])
def test_both_leasekeepers_own_their_share_of_each_class_also_after_a_kill(
    system: System, static: bool
) -> None:
    """With ``--instance-id`` the restarted one takes its partitions back at once; without,
    the group hands them to the other when the killed one's session ends, and the
    restarted one gets its share of every family back."""
    system.static = static
    first = system.new_leasekeeper("first", extra=FAST)
    second = system.new_leasekeeper("second", extra=FAST)
    system.leasekeepers += [first, second]
    first.start()
    second.start()
    pair = [first, second]
    wait_until(lambda: balanced(pair, system), 90, "a balanced assignment",
               describe=lambda: [owned(lk, system) for lk in pair])  # fmt: skip

    first.kill()  # kill -9: no revoke, no leave
    again = system.new_leasekeeper("first", extra=FAST)
    system.leasekeepers.append(again)
    again.start()
    pair = [again, second]
    wait_until(lambda: balanced(pair, system), 90, "a balanced assignment after the restart",
               describe=lambda: [owned(lk, system) for lk in pair])  # fmt: skip
