"""The circuit breaker's state machine (pure, times passed in) and its rule syntax."""

from __future__ import annotations

import pytest

from leasekeeper.breaker.policy import Breaker, BreakerBoard, CallOutcome
from leasekeeper.breaker.settings import BreakerRule, BreakerSettings
from leasekeeper.breaker.states import BreakerState

RULE = BreakerRule(rate=0.5, min_calls=4, window_s=10)
SETTINGS = BreakerSettings(default=RULE, cooldown_s=10, cooldown_max_s=35, probes=2)


def breaker(settings: BreakerSettings = SETTINGS) -> Breaker:
    rule = settings.default
    assert rule is not None
    return Breaker("send_receipt", rule, settings)


def calls(b: Breaker, at: float, outcomes: str) -> None:
    """``outcomes``: s success, f failure, p permanent error (ignored)."""
    kinds = {"s": CallOutcome.SUCCESS, "f": CallOutcome.FAILURE, "p": CallOutcome.IGNORED}
    for i, letter in enumerate(outcomes):
        b.record(at, f"k{at}-{i}", kinds[letter])


def opened(b: Breaker, at: float = 100.0) -> None:
    calls(b, at, "ffff")
    assert b.state(at) is BreakerState.OPEN


def test_opens_at_the_rate_once_the_minimum_of_calls_ended() -> None:
    b = breaker()
    calls(b, 100, "fff")  # 100% failures, but only 3 calls: below the minimum
    assert b.state(100) is BreakerState.CLOSED
    b.record(100, "k", CallOutcome.SUCCESS)  # 3 of 4 failed: 75% >= 50%
    assert b.state(100) is BreakerState.OPEN
    assert "3 of 4 calls failed" in b.reason


def test_stays_closed_below_the_rate() -> None:
    b = breaker()
    calls(b, 100, "fsssfsss")  # 25%
    assert b.state(100) is BreakerState.CLOSED


def test_permanent_errors_do_not_count() -> None:
    b = breaker()
    calls(b, 100, "pppppppps")
    assert b.state(100) is BreakerState.CLOSED
    assert b.view(100).calls == 1


def test_calls_leave_the_sliding_window() -> None:
    b = breaker()
    calls(b, 100, "fff")
    calls(b, 111, "f")  # the three earlier failures are more than 10 s old
    assert b.state(111) is BreakerState.CLOSED
    assert b.view(111).calls == 1
    calls(b, 112, "fff")  # four failures within 10 s
    assert b.state(112) is BreakerState.OPEN


def test_open_refuses_dispatch_and_parks_for_the_rest_of_the_cool_down() -> None:
    b = breaker()
    opened(b)
    admission = b.admit(104, "job")
    assert not admission.dispatch
    assert admission.park_s == pytest.approx(6)
    assert b.view(104).next_probe_in_s == pytest.approx(6)


def test_half_open_after_the_cool_down_lets_only_the_probes_through() -> None:
    b = breaker()
    opened(b)
    assert b.state(110) is BreakerState.HALF_OPEN
    assert b.admit(110, "p1").probe
    assert b.admit(110, "p2").probe
    third = b.admit(110, "p3")
    assert not third.dispatch and third.park_s == SETTINGS.cooldown_s
    assert b.blocks(110)


def test_probes_succeeding_close_it_with_a_fresh_window() -> None:
    b = breaker()
    opened(b)
    b.admit(110, "p1")
    b.admit(110, "p2")
    assert b.record(111, "p1", CallOutcome.SUCCESS) is None  # p2 still out
    closing = b.record(111, "p2", CallOutcome.SUCCESS)
    assert closing is not None and closing.state is BreakerState.CLOSED
    assert b.state(111) is BreakerState.CLOSED
    assert b.view(111).calls == 0
    assert b.admit(111, "x").dispatch


def test_a_failed_probe_reopens_with_a_capped_doubled_cool_down() -> None:
    b = breaker()
    opened(b)  # cool-down 10 s
    expected = [20.0, 35.0, 35.0]  # doubled, then capped at 35 s
    now = 110.0
    for cooldown in expected:
        assert b.state(now) is BreakerState.HALF_OPEN
        b.admit(now, "probe")
        transition = b.record(now, "probe", CallOutcome.FAILURE)
        assert transition is not None and transition.state is BreakerState.OPEN
        assert transition.cooldown_s == cooldown
        assert b.state(now + cooldown - 0.1) is BreakerState.OPEN
        now += cooldown
    b.admit(now, "probe")
    b.record(now, "probe", CallOutcome.SUCCESS)
    b.admit(now, "probe2")
    b.record(now, "probe2", CallOutcome.SUCCESS)
    assert b.state(now) is BreakerState.CLOSED
    calls(b, now + 1, "ffff")  # after closing, the cool-down starts over
    assert b.cooldown_s == SETTINGS.cooldown_s


def test_late_outcomes_of_calls_from_before_the_opening_change_nothing() -> None:
    b = breaker()
    opened(b)
    assert b.record(110, "dispatched-long-ago", CallOutcome.FAILURE) is None
    assert b.state(110) is BreakerState.HALF_OPEN
    b.admit(110, "p1")
    assert b.record(110, "dispatched-long-ago", CallOutcome.SUCCESS) is None
    assert b.state(110) is BreakerState.HALF_OPEN


def test_dependency_down_opens_at_once_with_the_hint_as_least_cool_down() -> None:
    b = breaker()
    transition = b.record(100, "k", CallOutcome.DEPENDENCY_DOWN, hint_s=25)
    assert transition is not None and transition.state is BreakerState.OPEN
    assert b.state(124) is BreakerState.OPEN
    assert b.state(125) is BreakerState.HALF_OPEN
    assert "DependencyDown" in b.reason


def test_a_released_probe_frees_its_slot() -> None:
    b = breaker()
    opened(b)
    b.admit(110, "p1")
    b.admit(110, "p2")
    assert not b.admit(110, "p3").dispatch
    b.record(110, "p1", CallOutcome.IGNORED)
    assert b.admit(110, "p3").probe


def test_a_probe_never_answered_frees_its_slot_after_a_while() -> None:
    b = breaker(BreakerSettings(default=RULE, cooldown_s=10, probes=1, probe_stale_s=30))
    opened(b)
    b.admit(110, "lost")
    assert not b.admit(120, "next").dispatch
    assert b.admit(141, "next").probe


def test_held_open_by_an_operator_sends_no_probes_until_closed() -> None:
    b = breaker()
    b.force_open(100, "provider maintenance")
    assert b.state(10_000) is BreakerState.OPEN
    assert b.admit(10_000, "x").park_s == SETTINGS.forced_park_s
    b.force_close("maintenance over")
    assert b.admit(10_000, "x").dispatch


def test_adopting_a_published_state() -> None:
    b = breaker()
    b.adopt(state=BreakerState.OPEN, until=130, cooldown_s=20, trips=2, forced=False,
            reason="elsewhere")  # fmt: skip
    assert b.state(129) is BreakerState.OPEN
    assert b.state(130) is BreakerState.HALF_OPEN
    b.adopt(state=BreakerState.CLOSED, until=0, cooldown_s=0, trips=0, forced=False,
            reason="probes succeeded elsewhere")  # fmt: skip
    assert b.state(131) is BreakerState.CLOSED


def test_the_board_covers_types_by_rule_and_queues_transitions() -> None:
    board = BreakerBoard(BreakerSettings(default=None, by_type={"mail": RULE}))
    for i in range(4):
        board.record("mail", 100, f"k{i}", CallOutcome.FAILURE)
        board.record("thumbs", 100, f"k{i}", CallOutcome.FAILURE)
    assert board.get("thumbs") is None  # no rule: no breaker
    assert board.blocked(100) == {"mail"}
    assert [t.job_type for t in board.take_transitions()] == ["mail"]
    assert board.take_transitions() == []


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("50%/20/30s", BreakerRule(rate=0.5, min_calls=20, window_s=30)),
        ("12.5%/5/2m", BreakerRule(rate=0.125, min_calls=5, window_s=120)),
        ("100%/1/1", BreakerRule(rate=1.0, min_calls=1, window_s=1)),
    ],
)
def test_rules_parse(text: str, rule: BreakerRule) -> None:
    assert BreakerRule.parse(text) == rule


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("50/20/30s", "is not a percentage"),
        ("50%/many/30s", "is not a whole number"),
        ("50%/20/soon", "window: invalid duration"),
        ("0%/20/30s", "above 0%"),
        ("150%/20/30s", "at most 100%"),
        ("50%/0/30s", "at least 1"),
        ("50%/20/500ms", "at least 1s"),
        ("50%/20", "expected RATE%/MIN_CALLS/WINDOW"),
    ],
)
def test_bad_rules_are_refused_in_one_line(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error) as caught:
        BreakerRule.parse(text)
    assert "\n" not in str(caught.value)


def test_dependency_down_opens_a_breaker_even_for_a_type_without_a_rule() -> None:
    board = BreakerBoard(BreakerSettings(default=None))
    board.record("mail", 100, "k", CallOutcome.DEPENDENCY_DOWN, hint_s=30)
    assert board.blocked(100) == {"mail"}
    assert not board.admit("mail", 129, "x").dispatch
    assert board.admit("mail", 130, "x").probe


def test_breakers_are_off_unless_asked_for() -> None:
    """A queue whose jobs fail in bulk on purpose must not start parking by surprise."""
    from leasekeeper.breaker.cli import breaker_settings
    from leasekeeper.breaker.settings import DEFAULT_RULE

    def settings(rules: tuple[str, ...], default: str) -> BreakerSettings:
        return breaker_settings(rules=rules, default=default, cooldown_s=15, cooldown_max_s=300,
                                probes=3)  # fmt: skip

    assert BreakerSettings().default is None
    assert settings((), "off").default is None
    assert settings((), "on").default == DEFAULT_RULE
    chosen = settings(("send_receipt", "resize=20%/5/10s"), "off")
    assert chosen.by_type["send_receipt"] == DEFAULT_RULE
    assert chosen.by_type["resize"] == BreakerRule(rate=0.2, min_calls=5, window_s=10)
