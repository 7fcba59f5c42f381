"""Where the breakers meet dispatch: admit or park a job, learn from how it ended.

``BreakerBoard`` (``leasekeeper/breaker/policy.py``) is the state machine; this part
holds it for the engine (under the engine's lock) and speaks in the engine's
values: a job about to be leased is admitted, admitted as a probe, or parked
(``Parking``: copy to a delay tier, resolve on delivery, no attempt spent); a
settlement or an expired lease becomes a call outcome; ready jobs of a type
whose breaker opened leave the window at once (``sweep``), so they neither hold
their partitions' commits nor crowd out the other types.

A parked job waits out the rest of the cool-down plus a random part of one more
(``spread``): parked together, the jobs of a type would otherwise all come back
at the same instant, the moment the probes go, and again all at once when the
breaker closes, a wave at the dependency that has just recovered.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from leasekeeper.breaker.policy import BreakerBoard, CallOutcome
from leasekeeper.breaker.states import BreakerState, BreakerView, Transition
from leasekeeper.core.copies import CopyRequest
from leasekeeper.core.hooks import Accept, LeaseEnd
from leasekeeper.core.leases import Lease, Pending, Settlement
from leasekeeper.core.parking import Parking
from leasekeeper.core.retry_policy import RetryPolicies
from leasekeeper.core.window import ReadyWindow
from schemas.vocabulary import ErrorClass

PARK_REASON = "breaker"


class BreakerGate:
    def __init__(
        self,
        *,
        board: BreakerBoard,
        parking: Parking,
        retries: RetryPolicies,
        monotonic: Callable[[], float],
        rng: random.Random,
    ) -> None:
        self.board = board
        self._rng = rng
        self._parking = parking
        self._retries = retries
        self._monotonic = monotonic

    # -- the DispatchGate protocol (core/hooks.py) -------------------------------

    def narrow(self, accept: Accept) -> Accept:
        return accept  # an open breaker parks its jobs (``admit``); it hides none

    def granted(self, pending: Pending) -> None:
        pass  # counted by ``admit``: a probe's slot is taken when it is admitted

    def ended(self, lease: Lease, end: LeaseEnd, settlement: Settlement | None) -> None:
        if end is LeaseEnd.ACKED:
            self.acked(lease)
        elif end is LeaseEnd.RELEASED:
            self.released(lease)
        elif end is LeaseEnd.EXPIRED:
            self.expired(lease)
        elif settlement is not None:
            self.nacked(lease, settlement.error_class or ErrorClass.ERROR.value,
                        permanent=settlement.permanent,
                        after_s=settlement.retry_after_s)  # fmt: skip

    def admit(self, pending: Pending) -> CopyRequest | None:
        """None to dispatch ``pending`` (maybe as a probe: the board keeps count), else
        the copy that parks it."""
        job_type = pending.job.type
        admission = self.board.admit(job_type, self._monotonic(), pending.lease_id)
        if admission.dispatch:
            return None
        return self._park(pending, admission.park_s)

    def _park(self, pending: Pending, delay_s: float) -> CopyRequest:
        breaker = self.board.get(pending.job.type) or self.board.for_operator(pending.job.type)
        breaker.parked += 1
        why = f"{PARK_REASON}: {pending.job.type} is {breaker.state(self._monotonic()).value}"
        spread = self._rng.uniform(0.0, self.board.settings.cooldown_s)
        return self._parking.park(pending, delay_s + spread, why)

    def wait_s(self, job_types: frozenset[str]) -> float:
        return 0.0  # it hides no ready job: an open breaker parks them (``sweep``)

    def sweep(self, window: ReadyWindow) -> list[CopyRequest]:
        """Park the ready jobs of every type whose breaker blocks dispatch now."""
        if not self.board.any_open():
            return []
        now = self._monotonic()
        blocked = self.board.blocked(now)
        # Called every loop turn while a breaker is open: the window counts its jobs
        # per type, so a window without any of them is not scanned.
        if not blocked or not window.has_any(frozenset(blocked)):
            return []
        parked = window.remove_ready(lambda p: p.job.type in blocked)
        copies = []
        for pending in parked:
            breaker = self.board.for_operator(pending.job.type)
            copies.append(self._park(pending, breaker.park_for(now)))
        return copies

    # -- outcomes ---------------------------------------------------------------

    def acked(self, lease: Lease) -> None:
        self._record(lease, CallOutcome.SUCCESS)

    def released(self, lease: Lease) -> None:
        """Not run: frees a probe's slot, says nothing of the dependency."""
        self._record(lease, CallOutcome.IGNORED)

    def nacked(self, lease: Lease, error_class: str, *, permanent: bool, after_s: float) -> None:
        job_type = lease.pending.job.type
        if error_class == ErrorClass.DEPENDENCY_DOWN.value:
            self._record(lease, CallOutcome.DEPENDENCY_DOWN, after_s)
        elif permanent or self._retries.for_type(job_type).is_permanent(error_class):
            self._record(lease, CallOutcome.IGNORED)
        else:
            self._record(lease, CallOutcome.FAILURE)

    def expired(self, lease: Lease) -> None:
        """Taken back by the reaper (``LeaseExpired`` or ``JobTimeout``): a failure."""
        self._record(lease, CallOutcome.FAILURE)

    def _record(self, lease: Lease, outcome: CallOutcome, hint_s: float = 0.0) -> None:
        job_type = lease.pending.job.type
        self.board.record(job_type, self._monotonic(), lease.pending.lease_id, outcome, hint_s)

    # -- shared state -------------------------------------------------------------

    def take_transitions(self) -> list[Transition]:
        return self.board.take_transitions()

    def adopt(
        self,
        job_type: str,
        *,
        state: BreakerState,
        until: float,
        cooldown_s: float,
        trips: int,
        forced: bool,
        reason: str,
    ) -> None:
        self.board.for_operator(job_type).adopt(state=state, until=until, cooldown_s=cooldown_s,
                                                trips=trips, forced=forced,
                                                reason=reason)  # fmt: skip

    def views(self) -> list[BreakerView]:
        return self.board.views(self._monotonic())
