"""Circuit breakers per job type: the pure state machine (no Kafka, no lock, no clock).

When a dependency is down, every attempt of the job types that need it fails
after a timeout, holds a worker slot meanwhile, and spends one of the job's
``max_attempts``: a long outage sends healthy jobs to the DLQ and starves the
other types. A breaker per job type stops that:

- **closed**: calls are counted in a sliding window of one-second buckets; when
  at least ``min_calls`` calls ended in the window and the share of failures
  reaches ``rate``, it **opens**. Transient errors, ``JobTimeout`` and
  ``LeaseExpired`` are failures; permanent errors are not (the dependency
  answered; the job was wrong), nor are released jobs.
- **open**: jobs of the type are not dispatched; the engine parks them (copies
  them back to a delay tier without spending an attempt) until ``until``.
- **half-open** once the cool-down is over: up to ``probes`` jobs are dispatched
  as probes, the rest parked for a short while. When every probe dispatched
  succeeded, it **closes**; one failed probe opens it again with twice the
  cool-down, capped at ``cooldown_max_s``.
- A ``DependencyDown`` from a handler opens it at once (the handler knows).
- An operator may force it open (no probes until it is closed by hand) or close it.

Times are monotonic seconds passed in by the caller. A ``Transition`` tells the
caller what to publish on the queue's breaker topic, so the other leasekeepers
adopt the state (``adopt``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from enum import StrEnum

from leasekeeper.breaker.settings import BreakerRule, BreakerSettings
from leasekeeper.breaker.states import BreakerState, BreakerView, Transition

__all__ = [
    "Admission",
    "Breaker",
    "BreakerBoard",
    "CallOutcome",
]


class CallOutcome(StrEnum):
    """What one dispatched job told the breaker of its type."""

    SUCCESS = "success"
    FAILURE = "failure"  # transient error, JobTimeout, LeaseExpired
    IGNORED = "ignored"  # permanent error, released unrun
    DEPENDENCY_DOWN = "dependency_down"  # the handler said so: open at once


@dataclass(frozen=True, kw_only=True)
class Admission:
    """May a job of this type be dispatched now: as a normal call, as a probe, or not
    (then park it for ``park_s``)."""

    dispatch: bool
    probe: bool = False
    park_s: float = 0.0


ADMIT = Admission(dispatch=True)


class _Window:
    """Calls that ended in the last ``span_s`` seconds, in one-second buckets, with
    running totals: every ack passes here, so adding and reading are O(1) amortised."""

    def __init__(self, span_s: float) -> None:
        self._span = span_s
        self._buckets: deque[list[int]] = deque()  # [second, calls, failures]
        self._calls = 0
        self._failures = 0

    def add(self, now: float, failed: bool) -> None:
        second = int(now)
        if not self._buckets or self._buckets[-1][0] != second:
            self._buckets.append([second, 0, 0])
        bucket = self._buckets[-1]
        bucket[1] += 1
        bucket[2] += int(failed)
        self._calls += 1
        self._failures += int(failed)

    def totals(self, now: float) -> tuple[int, int]:
        oldest = now - self._span
        while self._buckets and self._buckets[0][0] + 1 <= oldest:
            _, calls, failures = self._buckets.popleft()
            self._calls -= calls
            self._failures -= failures
        return self._calls, self._failures

    def clear(self) -> None:
        self._buckets.clear()
        self._calls = self._failures = 0


class Breaker:
    """The breaker of one job type."""

    def __init__(self, job_type: str, rule: BreakerRule, settings: BreakerSettings) -> None:
        self.job_type = job_type
        self.rule = rule
        self._settings = settings
        self._window = _Window(rule.window_s)
        self._state = BreakerState.CLOSED
        self.until = 0.0
        self.cooldown_s = 0.0
        self.trips = 0  # openings since it last closed
        self.forced = False
        self.reason = ""
        self._probes: dict[str, float] = {}  # probe lease key → dispatched at
        self._probes_ok = 0
        self.parked = 0  # jobs of the type parked instead of dispatched, since start

    # -- state ---------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Closed as last decided (without moving an open breaker to half-open)."""
        return self._state is BreakerState.CLOSED

    def state(self, now: float) -> BreakerState:
        """The state at ``now``: an open breaker past its cool-down is half-open."""
        if self._state is BreakerState.OPEN and not self.forced and now >= self.until:
            self._state = BreakerState.HALF_OPEN
            self._probes.clear()
            self._probes_ok = 0
        return self._state

    def admit(self, now: float, key: str) -> Admission:
        """Dispatch a job (``key`` names its lease, to know its outcome as a probe's)?"""
        state = self.state(now)
        if state is BreakerState.CLOSED:
            return ADMIT
        if state is BreakerState.HALF_OPEN:
            self._drop_stale_probes(now)
            if len(self._probes) + self._probes_ok < self._settings.probes:
                self._probes[key] = now
                return Admission(dispatch=True, probe=True)
        return Admission(dispatch=False, park_s=self.park_for(now))

    def park_for(self, now: float) -> float:
        """How long a job parked now waits: the rest of the cool-down while open (an
        operator's hold: ``forced_park_s``); while half-open, one base cool-down, by
        when the probes have answered."""
        if self.state(now) is BreakerState.OPEN:
            wait = self._settings.forced_park_s if self.forced else self.until - now
            return max(1.0, wait)
        return self._settings.cooldown_s

    def blocks(self, now: float) -> bool:
        """Whether ready jobs of this type should leave the window now: open, or
        half-open with every probe slot taken."""
        state = self.state(now)
        if state is BreakerState.OPEN:
            return True
        if state is BreakerState.HALF_OPEN:
            self._drop_stale_probes(now)
            return len(self._probes) + self._probes_ok >= self._settings.probes
        return False

    def _drop_stale_probes(self, now: float) -> None:
        stale = [k for k, at in self._probes.items() if now - at > self._settings.probe_stale_s]
        for key in stale:
            del self._probes[key]

    # -- outcomes ------------------------------------------------------------

    def record(
        self, now: float, key: str, outcome: CallOutcome, hint_s: float = 0.0
    ) -> Transition | None:
        """A dispatched job ended. Returns the transition it caused, if any.
        ``hint_s``: how long a ``DependencyDown`` said the dependency stays down."""
        state = self.state(now)
        probe = self._probes.pop(key, None) is not None
        if outcome is CallOutcome.DEPENDENCY_DOWN:
            if state is BreakerState.OPEN:
                return None  # already open; a late report changes nothing
            return self._open(now, f"{self.job_type}: a handler raised DependencyDown", hint_s)
        if state is BreakerState.CLOSED:
            if outcome is CallOutcome.IGNORED:
                return None
            self._window.add(now, outcome is CallOutcome.FAILURE)
            calls, failures = self._window.totals(now)
            if calls >= self.rule.min_calls and failures >= self.rule.rate * calls:
                why = f"{failures} of {calls} calls failed in {self.rule.window_s:g}s"
                return self._open(now, why)
            return None
        if state is BreakerState.HALF_OPEN and probe:
            if outcome is CallOutcome.FAILURE:
                return self._open(now, "a probe failed")
            if outcome is CallOutcome.SUCCESS:
                self._probes_ok += 1
                if not self._probes:
                    return self._close("probes succeeded")
        # Calls dispatched before it opened, ending now, say nothing of the present.
        return None

    def _open(self, now: float, reason: str, hint_s: float = 0.0) -> Transition:
        reopening = self._state is not BreakerState.CLOSED
        base = self._settings.cooldown_s
        cooldown = min(self._settings.cooldown_max_s, self.cooldown_s * 2) if reopening else base
        self.cooldown_s = max(cooldown, min(hint_s, self._settings.cooldown_max_s))
        self.trips += 1
        self._state = BreakerState.OPEN
        self.until = now + self.cooldown_s
        self.reason = reason
        self._probes.clear()
        self._probes_ok = 0
        return self._transition()

    def _close(self, reason: str) -> Transition:
        self._state = BreakerState.CLOSED
        self.until = 0.0
        self.cooldown_s = 0.0
        self.trips = 0
        self.forced = False
        self.reason = reason
        self._window.clear()
        self._probes.clear()
        self._probes_ok = 0
        return self._transition()

    # -- operators and the other leasekeepers ----------------------------------

    def force_open(self, now: float, reason: str) -> Transition:
        """An operator holds it open: no probes until ``force_close``."""
        self._open(now, reason)
        self.forced = True
        return self._transition()

    def force_close(self, reason: str) -> Transition:
        return self._close(reason)

    def adopt(
        self,
        *,
        state: BreakerState,
        until: float,
        cooldown_s: float,
        trips: int,
        forced: bool,
        reason: str,
    ) -> None:
        """Take the state another leasekeeper (or this one, before a restart) published."""
        if state is BreakerState.CLOSED:
            if self._state is not BreakerState.CLOSED:
                self._close(reason)
            return
        if self._state is not BreakerState.OPEN:
            self._probes.clear()
            self._probes_ok = 0
        # A published half-open is open until its probes may go, here as there.
        self._state = BreakerState.OPEN
        self.until = until
        self.cooldown_s = cooldown_s
        self.trips = trips
        self.forced = forced
        self.reason = reason

    def _transition(self) -> Transition:
        return Transition(
            job_type=self.job_type,
            state=self._state,
            until=self.until,
            cooldown_s=self.cooldown_s,
            trips=self.trips,
            forced=self.forced,
            reason=self.reason,
        )

    def view(self, now: float) -> BreakerView:
        state = self.state(now)
        calls, failures = self._window.totals(now)
        next_probe = None
        if state is BreakerState.OPEN and not self.forced:
            next_probe = round(max(0.0, self.until - now), 1)
        return BreakerView(
            job_type=self.job_type,
            state=state,
            rule=self.rule.describe(),
            failure_rate=failures / calls if calls else 0.0,
            calls=calls,
            failures=failures,
            next_probe_in_s=next_probe,
            cooldown_s=self.cooldown_s,
            trips=self.trips,
            forced=self.forced,
            reason=self.reason,
            probes_out=len(self._probes),
            parked=self.parked,
        )


class BreakerBoard:
    """Every job type's breaker, created on first use from the settings; transitions
    wait in ``outbox`` until the Kafka loop publishes them."""

    def __init__(self, settings: BreakerSettings | None = None) -> None:
        self.settings = settings or BreakerSettings()
        self._breakers: dict[str, Breaker] = {}
        self.outbox: list[Transition] = []

    def get(self, job_type: str) -> Breaker | None:
        """The type's breaker; None when no rule covers the type."""
        breaker = self._breakers.get(job_type)
        if breaker is None:
            rule = self.settings.rule_for(job_type)
            if rule is None:
                return None
            breaker = self._breakers[job_type] = Breaker(job_type, rule, self.settings)
        return breaker

    def for_operator(self, job_type: str) -> Breaker:
        """A breaker an operator or another leasekeeper speaks of, even for a type no
        rule covers here (the state then comes only from them)."""
        breaker = self.get(job_type)
        if breaker is None:
            # min_calls beyond reach: it never opens by itself.
            rule = BreakerRule(rate=1.0, min_calls=2**31, window_s=1.0)
            breaker = self._breakers[job_type] = Breaker(job_type, rule, self.settings)
        return breaker

    def admit(self, job_type: str, now: float, key: str) -> Admission:
        breaker = self.get(job_type)
        return ADMIT if breaker is None else breaker.admit(now, key)

    def record(
        self, job_type: str, now: float, key: str, outcome: CallOutcome, hint_s: float = 0.0
    ) -> Transition | None:
        breaker = self.get(job_type)
        if breaker is None:
            if outcome is not CallOutcome.DEPENDENCY_DOWN:
                return None
            breaker = self.for_operator(job_type)  # the handler's word needs no rule
        transition = breaker.record(now, key, outcome, hint_s)
        if transition is not None:
            self.outbox.append(transition)
        return transition

    def blocked(self, now: float) -> set[str]:
        """Job types whose ready jobs should be parked now."""
        return {t for t, b in self._breakers.items() if b.blocks(now)}

    def any_open(self) -> bool:
        """Cheap check before a sweep of the window: is any breaker not closed?"""
        return any(not b.closed for b in self._breakers.values())

    def take_transitions(self) -> list[Transition]:
        taken, self.outbox = self.outbox, []
        return taken

    def views(self, now: float) -> list[BreakerView]:
        return [self._breakers[t].view(now) for t in sorted(self._breakers)]

    def __iter__(self) -> Iterator[Breaker]:
        return iter(self._breakers.values())
