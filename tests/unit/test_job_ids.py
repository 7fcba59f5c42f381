"""Job ids carry the millisecond they were built, at their end: the readers' index."""

from __future__ import annotations

import uuid

from hypothesis import given
from hypothesis import strategies as st

from jobcore.job_ids import ID_CHARS, SKEW_MS, built_at_ms, new_job_id, search_from_ms

WEEK_MS = 7 * 24 * 3600 * 1000
NOW_MS = 1_780_000_000_000


@given(st.floats(min_value=0, max_value=8_000_000_000, allow_nan=False))
def test_an_id_says_when_it_was_built(now_s: float) -> None:
    job_id = new_job_id(now_s)
    assert len(job_id) == ID_CHARS and int(job_id, 16) >= 0
    assert built_at_ms(job_id) == int(now_s * 1000)


def test_ids_of_the_same_millisecond_differ_in_their_first_characters() -> None:
    """Short prefixes (what people type, what tables show) stay distinct."""
    ids = [new_job_id(NOW_MS / 1000) for _ in range(1000)]
    assert len(set(ids)) == 1000
    assert len({job_id[:8] for job_id in ids}) == 1000


def test_a_reader_starts_a_minute_before_the_id_s_time_and_never_outside_its_window() -> None:
    window_from = NOW_MS - WEEK_MS
    hour_ago = new_job_id((NOW_MS - 3600_000) / 1000)
    assert search_from_ms(hour_ago, window_from, NOW_MS) == NOW_MS - 3600_000 - SKEW_MS
    # Built just inside the window: the window's start, never before it.
    edge = new_job_id((window_from + 1000) / 1000)
    assert search_from_ms(edge, window_from, NOW_MS) == window_from


def test_an_id_with_no_plausible_time_is_searched_for_in_the_whole_window() -> None:
    window_from = NOW_MS - WEEK_MS
    older = new_job_id((window_from - 1) / 1000)
    future = new_job_id((NOW_MS + SKEW_MS + 1) / 1000)
    for job_id in (older, future, "not-an-id", "abc", "g" * ID_CHARS, ""):
        assert search_from_ms(job_id, window_from, NOW_MS) == window_from
    # A random (uuid4) id of another client: almost surely no time in the window.
    strays = [uuid.uuid4().hex for _ in range(1000)]
    assert sum(search_from_ms(i, window_from, NOW_MS) != window_from for i in strays) <= 1
