"""Commit metadata carries resolved offsets and claim counts within the broker's limit."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from leasekeeper.core.offset_metadata import (
    MAX_SPAN,
    METADATA_LIMIT,
    Progress,
    decode,
    describe,
    encode,
)


@settings(max_examples=200, deadline=None)
@given(
    committed=st.integers(0, 10**12),
    resolved=st.sets(st.integers(0, 5_000), max_size=2_000),
    claims=st.dictionaries(st.integers(0, 5_000), st.integers(1, 50), max_size=200),
)
def test_round_trip(committed: int, resolved: set[int], claims: dict[int, int]) -> None:
    progress = Progress(
        resolved=frozenset(committed + o for o in resolved),
        claims={committed + o: n for o, n in claims.items()},
    )
    text = encode(committed, progress)
    assert len(text) <= METADATA_LIMIT
    back = decode(committed, text)
    assert back.resolved == progress.resolved
    assert back.claims == progress.claims


def test_the_worst_case_span_still_fits() -> None:
    rng = random.Random(7)
    resolved = frozenset(o for o in range(MAX_SPAN) if rng.random() < 0.5) | {MAX_SPAN - 1}
    claims = {o: rng.randint(1, 8) for o in range(MAX_SPAN) if o not in resolved}
    text = encode(0, Progress(resolved=resolved, claims=claims))
    assert len(text) <= METADATA_LIMIT
    back = decode(0, text)
    assert back.resolved == resolved  # resolution is never dropped
    assert back.claims.items() <= claims.items()  # claims may be cut to fit


def test_foreign_or_broken_metadata_means_no_progress() -> None:
    for text in ("", None, "something else", "lq1:12:%%%:", "lq1:x:y:z"):
        assert decode(5, text) == Progress(resolved=frozenset(), claims={})


def test_a_sparse_span_far_past_the_plain_one_is_described_in_full() -> None:
    """Past a deferred flood: a few acks 200,000 offsets beyond the commit compress to a
    few bytes, so the partition may be read on (``describe`` says it is all there)."""
    resolved = frozenset({3, 150_000, 150_001, 199_999})
    text, whole = describe(0, Progress(resolved=resolved, claims={5: 2}))
    assert whole and len(text) <= METADATA_LIMIT
    assert decode(0, text) == Progress(resolved=resolved, claims={5: 2})


def test_what_does_not_fit_is_cut_to_a_prefix_that_does() -> None:
    rng = random.Random(11)
    resolved = frozenset(o for o in range(200_000) if rng.random() < 0.3)
    text, whole = describe(0, Progress(resolved=resolved, claims={}))
    assert not whole and 0 < len(text) <= METADATA_LIMIT
    back = decode(0, text).resolved
    # A prefix of the resolved offsets, as long as fits: the next owner re-runs only
    # those past it, and nothing is said resolved that was not.
    assert back and back == frozenset(o for o in resolved if o <= max(back))
    assert len(back) > 2_000  # bisected: about as many as the limit holds, not a few
    assert encode(0, Progress(resolved=resolved, claims={})) == text
