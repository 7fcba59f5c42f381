"""The settle ids a leasekeeper remembers: what a resend is answered from, bounded."""

from __future__ import annotations

from leasekeeper.core.leases import Grant
from leasekeeper.core.recent_settles import RecentSettles


def _grant(n: int, size: int = 10) -> Grant:
    return Grant(lease_id=f"jobs.q/0/{n}", token=f"t{n}", until_ms=1, attempt=1, lease_s=30,
                 envelope=b"e" * size, payload=b"")  # fmt: skip


def test_a_known_id_is_answered_with_its_grants_and_a_new_one_is_taken() -> None:
    settles = RecentSettles()
    assert settles.begin("w1", "a") is None
    assert settles.begin("w1", "a") == [], "still being answered: none, never a claim"
    grants = [_grant(1), _grant(2)]
    settles.answered("w1", "a", grants)
    assert [g.token for g in settles.begin("w1", "a") or []] == ["t1", "t2"]
    assert settles.begin("w2", "a") is None, "ids are per worker"


def test_each_worker_keeps_its_last_few_ids() -> None:
    settles = RecentSettles(ids_per_worker=3)
    for n in range(10):
        assert settles.begin("w1", f"s{n}") is None
        settles.answered("w1", f"s{n}", [_grant(n)])
    assert settles.ids() == 3
    assert settles.begin("w1", "s9") is not None and settles.begin("w1", "s7") is not None
    assert settles.size() == 30, "the bytes of those forgotten are given back"


def test_workers_heard_from_least_recently_are_forgotten_first() -> None:
    settles = RecentSettles(workers=100)
    for n in range(1000):
        settles.begin(f"w{n}", "s")
        settles.answered(f"w{n}", "s", [_grant(n)])
        settles.begin("w0", "s")  # w0 keeps being heard from
    assert settles.ids() == 100
    assert settles.begin("w0", "s") is not None
    assert settles.begin("w999", "s") is not None
    assert settles.begin("w500", "s") is None, "forgotten: a new id again"


def test_the_remembered_bytes_are_bounded_but_the_latest_answer_stays() -> None:
    settles = RecentSettles(max_bytes=1000)
    for n in range(50):
        settles.begin(f"w{n}", "s")
        settles.answered(f"w{n}", "s", [_grant(n, size=300)])
        assert settles.size() <= 1000
    assert settles.begin("w49", "s") is not None
    settles.begin("big", "s")
    settles.answered("big", "s", [_grant(99, size=5000)])
    assert settles.ids() == 1 and settles.begin("big", "s") is not None
