"""The commit tracker never lets a partition commit past an unresolved offset."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from leasekeeper.core.commit_tracker import CommitTracker


def test_commits_only_past_the_contiguous_resolved_prefix() -> None:
    tracker = CommitTracker(10)
    for offset in range(10, 15):
        tracker.fetched(offset)
    tracker.resolve(12)
    tracker.resolve(11)
    assert tracker.committable == 10
    assert tracker.unresolved() == [10, 13, 14]
    tracker.resolve(10)
    assert tracker.committable == 13
    tracker.resolve(14)
    tracker.resolve(13)
    assert tracker.committable == 15
    assert tracker.unresolved_count() == 0


def test_gaps_in_offsets_do_not_block_the_commit() -> None:
    tracker = CommitTracker(0)
    for offset in (0, 1, 5, 9):  # 2-4 and 6-8 were transaction markers
        tracker.fetched(offset)
    for offset in (0, 1, 5):
        tracker.resolve(offset)
    assert tracker.committable == 9
    tracker.resolve(9)
    assert tracker.committable == 10


def test_nothing_fetched_commits_the_start() -> None:
    assert CommitTracker(42).committable == 42
    assert CommitTracker(42).highest_fetched == 41


def test_resolving_an_offset_never_fetched_is_an_error() -> None:
    tracker = CommitTracker(0)
    tracker.fetched(0)
    with pytest.raises(ValueError, match="never fetched"):
        tracker.resolve(3)


@settings(max_examples=300, deadline=None)
@given(
    count=st.integers(min_value=1, max_value=200),
    start=st.integers(min_value=0, max_value=10_000),
    data=st.data(),
)
def test_committable_is_always_the_lowest_unresolved_offset(
    count: int, start: int, data: st.DataObject
) -> None:
    gaps = data.draw(st.lists(st.integers(1, 3), min_size=count, max_size=count))
    offsets = []
    position = start
    for gap in gaps:
        offsets.append(position)
        position += gap
    order = data.draw(st.permutations(offsets))
    fetch_upto = data.draw(st.integers(min_value=1, max_value=count))
    tracker = CommitTracker(start)
    fetched = offsets[:fetch_upto]
    for offset in fetched:
        tracker.fetched(offset)
    resolved: set[int] = set()
    for offset in (o for o in order if o in set(fetched)):
        tracker.resolve(offset)
        resolved.add(offset)
        unresolved = [o for o in fetched if o not in resolved]
        expected = min(unresolved) if unresolved else fetched[-1] + 1
        assert tracker.committable == expected
        # never beyond an unresolved offset
        assert all(tracker.committable <= o for o in unresolved)
        assert all(tracker.is_resolved(o) for o in resolved)
