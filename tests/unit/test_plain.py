"""``jobcore.plain``: the one rule that turns typed views into JSON-ready data."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum

from jobcore.plain import FLATTEN, OMIT_NONE, plain, plain_dict, renamed, rounded
from leasekeeper.breaker.states import BreakerState, BreakerView
from leasekeeper.ordering.values import BlockedLine, LaneState, LineId


class Colour(StrEnum):
    RED = "red"


@dataclass(frozen=True)
class Inner:
    a: int
    b: tuple[str, ...]


@dataclass(frozen=True)
class Outer:
    inner: Inner = field(metadata=FLATTEN)
    kind: Colour
    at: datetime
    rate: float = field(metadata=rounded(2))
    job_type: str = field(metadata=renamed("type"))
    note: str | None = field(default=None, metadata=OMIT_NONE)
    kept: str | None = None
    nested: tuple[Inner, ...] = ()
    by_name: dict[str, Inner] = field(default_factory=dict)


def test_each_rule_of_the_module_docstring() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    value = Outer(inner=Inner(1, ("x",)), kind=Colour.RED, at=at, rate=0.12345,
                  job_type="email", nested=(Inner(2, ()),),
                  by_name={"k": Inner(3, ("y", "z"))})  # fmt: skip
    assert plain(value) == {
        "a": 1,
        "b": ["x"],
        "kind": "red",
        "at": "2026-01-02T03:04:05+00:00",
        "rate": 0.12,
        "type": "email",
        "kept": None,
        "nested": [{"a": 2, "b": []}],
        "by_name": {"k": {"a": 3, "b": ["y", "z"]}},
    }
    assert plain_dict(Outer(inner=Inner(0, ()), kind=Colour.RED, at=at, rate=1.0,
                            job_type="t", note="said"))["note"] == "said"  # fmt: skip
    json.dumps(plain(value))  # JSON-ready all the way down


def test_a_flattened_field_left_out_while_none() -> None:
    @dataclass(frozen=True)
    class Maybe:
        inner: Inner | None = field(default=None, metadata={**FLATTEN, **OMIT_NONE})

    assert plain(Maybe()) == {}
    assert plain(Maybe(Inner(1, ()))) == {"a": 1, "b": []}


def test_the_shapes_inspect_readers_rely_on() -> None:
    breaker = BreakerView(job_type="pay", state=BreakerState.OPEN, rule="rate",
                          failure_rate=0.66666, calls=3, failures=2, next_probe_in_s=None,
                          cooldown_s=5.0, trips=1, forced=False, reason="", probes_out=0,
                          parked=4)  # fmt: skip
    shown = plain(breaker)
    assert (shown["type"], shown["state"], shown["failure_rate"]) == ("pay", "open", 0.667)
    assert "job_type" not in shown
    line = BlockedLine(line=LineId(topic="jobs.q", partition=2, tenant="acme", key="k1"),
                       head_seq=7, job_id="j", state=LaneState.DEAD, due_ms=0, reason="dead",
                       held=3)  # fmt: skip
    assert plain(line) == {"topic": "jobs.q", "partition": 2, "tenant": "acme", "key": "k1",
                           "head_seq": 7, "job_id": "j", "state": "dead", "due_ms": 0,
                           "reason": "dead", "held": 3}  # fmt: skip
