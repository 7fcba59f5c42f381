"""``LeaseKeeperClient``: the worker's batched Claim / Heartbeat / Settle calls.

The leasekeeper is a sidecar that restarts (deploys, crashes). A worker must
outlive that: when a call finds it gone (``UNAVAILABLE``) the client drops the
channel and opens a new one on the next call, no sooner than a bounded,
jittered backoff allows; the calls other threads still have on the dropped
channel finish there (``_ended``). Transient failures surface as
``LeaseKeeperUnavailable`` so each caller can choose: the claim loop tries
again, the heartbeat loop waits for its next tick, and a settle is dropped
(the leasekeeper redelivers an unsettled job: at least once). Failures that
retrying cannot fix (a wrong token, an incompatible server) surface as
``LeaseKeeperRejected``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from types import TracebackType
from typing import Final, TypeVar

import grpc

from jobcore.config import AUTH_METADATA_KEY, RPC_MESSAGE_BYTES
from jobcore.progress import JobProgress
from jobcore.socket_owner import socket_absent, target_problem
from schemas import worker_pb2
from schemas.lease_answer import LeaseAnswer
from schemas.worker_pb2_grpc import LeaseKeeperStub
from workers.channel_errors import LeaseKeeperRejected, LeaseKeeperUnavailable, UntrustedSocket
from workers.messages import ClaimedJob, LeaseRef, WorkerSettlement
from workers.reconnect import ReconnectBackoff
from workers.wire import beat, lease, result, settle_id, settlement

__all__ = [
    "LeaseKeeperClient",
    "LeaseKeeperRejected",
    "LeaseKeeperUnavailable",
    "ReconnectBackoff",
    "UntrustedSocket",
]

log = logging.getLogger(__name__)

T = TypeVar("T")

# Reconnect within ~2 s of the leasekeeper coming back, instead of grpc's
# default channel backoff that grows to two minutes. Claims can carry hundreds
# of envelopes, beyond grpc's default 4 MiB message limit; the leasekeeper keeps
# each answer under this limit (``CLAIM_ANSWER_BYTES``).
CHANNEL_OPTIONS: Final = (
    ("grpc.initial_reconnect_backoff_ms", 50),
    ("grpc.min_reconnect_backoff_ms", 50),
    ("grpc.max_reconnect_backoff_ms", 2000),
    ("grpc.max_receive_message_length", RPC_MESSAGE_BYTES),
    ("grpc.max_send_message_length", RPC_MESSAGE_BYTES),
)
# How many times a settle-and-claim whose answer was lost is sent again (same id).
SETTLE_RESENDS = 2

# Codes that another attempt cannot fix: configuration or version mismatches.
_REJECTED: Final = frozenset(
    {
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INVALID_ARGUMENT,
    }
)


# A worker with no leasekeeper says so again after this long, then at doubling intervals.
STILL_DOWN_FIRST_S = 30.0
_UNTIL_IT_APPEARS = (
    ", and on until it appears (is `leasekeeper serve --queue QUEUE` running? the "
    "worker's --queue or --target must name its socket)"
)


class LeaseKeeperClient:
    """Thread-safe; the claim, heartbeat and settle threads of a worker share one.

    ``target`` is a grpc target: ``unix:/path/to.sock`` or ``127.0.0.1:PORT``.
    When ``token`` is set every call carries it as ``AUTH_METADATA_KEY`` metadata.
    Each connect first checks whose a ``unix:`` socket is (``UntrustedSocket``):
    this user's, root's (not for the default socket) or ``trust_owner``'s.
    """

    def __init__(
        self,
        target: str,
        *,
        worker_id: str,
        token: str | None = None,
        tls_ca: bytes | None = None,
        trust_owner: int | None = None,
        backoff: ReconnectBackoff | None = None,
        rpc_timeout_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        rng: random.Random | None = None,
    ) -> None:
        self.target = target
        self.worker_id = worker_id
        self.trust_owner = trust_owner
        self._metadata = ((AUTH_METADATA_KEY, token),) if token else None
        self._credentials = (
            None if tls_ca is None else grpc.ssl_channel_credentials(root_certificates=tls_ca)
        )
        self._backoff = backoff or ReconnectBackoff()
        self._rpc_timeout_s = rpc_timeout_s
        self._clock = clock
        self._rng = rng or random.Random()
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._channel: grpc.Channel | None = None
        self._stub: LeaseKeeperStub | None = None
        self._generation = 0
        # Calls under way on each channel (by generation), and the dropped channels
        # some still use: a dropped channel is closed once its last call has ended.
        self._calls: dict[int, int] = {}
        self._dropped: dict[int, grpc.Channel] = {}
        self._failures = 0
        self._reconnect_at = 0.0
        # While it stays unreachable: since when, and when to say so next (30 s, 60 s,
        # 120 s, ... after the first failure), so a worker aimed at the wrong socket
        # does not fall silent after its first warning.
        self._down_since = 0.0
        self._next_report_s = STILL_DOWN_FIRST_S

    def claim(
        self,
        max_jobs: int,
        wait_ms: int,
        job_types: Sequence[str] = (),
        *,
        reports_started: bool = False,
        start_now: int = 0,
    ) -> list[ClaimedJob]:
        """Long-poll for up to ``max_jobs`` jobs of ``job_types`` (empty: any type); an
        empty list when none came in ``wait_ms``. With ``reports_started`` the caller
        promises to report each job's start in its heartbeats, except the first
        ``start_now`` jobs, which its idle handlers start at once."""
        request = self._claim_request(max_jobs, wait_ms, job_types, reports_started, start_now)
        timeout = wait_ms / 1000 + self._rpc_timeout_s
        response = self._call(
            "Claim", lambda stub: stub.Claim(request, timeout=timeout, metadata=self._metadata)
        )
        return [lease(job) for job in response.jobs]

    def heartbeat(
        self,
        refs: Sequence[LeaseRef],
        started: Collection[str] = (),
        progress: Mapping[str, JobProgress] | None = None,
    ) -> list[LeaseAnswer]:
        """Extend many leases in one call; each result says whether its token was current.
        ``started`` names the leases (by id) whose handler has started; ``progress``
        has the latest progress of those (by id) whose handler reported one."""
        told = progress or {}
        request = worker_pb2.HeartbeatRequest(
            worker_id=self.worker_id,
            leases=[beat(r, r.lease_id in started, told.get(r.lease_id)) for r in refs],
        )
        response = self._call(
            "Heartbeat",
            lambda stub: stub.Heartbeat(
                request, timeout=self._rpc_timeout_s, metadata=self._metadata
            ),
        )
        return [result(r) for r in response.results]

    def settle(self, settlements: Sequence[WorkerSettlement]) -> list[LeaseAnswer]:
        """Ack, nack or release many leases in one call."""
        request = worker_pb2.SettleRequest(
            worker_id=self.worker_id, settlements=[settlement(s) for s in settlements]
        )
        response = self._call(
            "Settle",
            lambda stub: stub.Settle(request, timeout=self._rpc_timeout_s, metadata=self._metadata),
        )
        return [result(r) for r in response.results]

    def settle_and_claim(
        self,
        settlements: Sequence[WorkerSettlement],
        max_jobs: int,
        job_types: Sequence[str] = (),
        *,
        reports_started: bool = False,
        start_now: int = 0,
        resends: int = SETTLE_RESENDS,
    ) -> tuple[list[LeaseAnswer], list[ClaimedJob]]:
        """``settle()``, then claim up to ``max_jobs`` in the same call: the jobs that
        are ready, without waiting (maybe none; a leasekeeper from before the
        combined call always answers none). An answer lost on its way (a deadline, a
        reset connection) is asked for again, up to ``resends`` times, with the same
        ``settle_id``: the leasekeeper answers with the jobs it granted the first time
        (those still leased), where a second claim would strand them."""
        request = worker_pb2.SettleRequest(
            worker_id=self.worker_id,
            settlements=[settlement(s) for s in settlements],
            then_claim=self._claim_request(max_jobs, 0, job_types, reports_started, start_now),
            settle_id=settle_id(),
        )
        while True:
            try:
                response = self._call(
                    "Settle",
                    lambda stub: stub.Settle(
                        request, timeout=self._rpc_timeout_s, metadata=self._metadata
                    ),
                )
            except LeaseKeeperUnavailable:
                if resends <= 0 or self._closed.is_set():
                    raise
                resends -= 1
                continue
            return [result(r) for r in response.results], [lease(job) for job in response.jobs]

    def _claim_request(
        self,
        max_jobs: int,
        wait_ms: int,
        job_types: Sequence[str],
        reports_started: bool,
        start_now: int,
    ) -> worker_pb2.ClaimRequest:
        """A Claim's request, alone or riding on a Settle (``then_claim``)."""
        return worker_pb2.ClaimRequest(
            worker_id=self.worker_id,
            max_jobs=max_jobs,
            wait_ms=wait_ms,
            job_types=job_types,
            reports_started=reports_started,
            start_now=start_now,
        )

    def close(self) -> None:
        """Close the channel; calls after this (or waiting to reconnect) fail at once."""
        self._closed.set()
        with self._lock:
            channels = [*self._dropped.values(), self._channel]
            self._channel, self._stub = None, None
            self._dropped.clear()
        for channel in channels:
            if channel is not None:
                channel.close()

    def __enter__(self) -> LeaseKeeperClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _call(self, name: str, invoke: Callable[[LeaseKeeperStub], T]) -> T:
        stub, generation = self._connected()
        try:
            result = invoke(stub)
        except grpc.RpcError as exc:
            raise self._failed(name, exc, generation) from exc
        except ValueError as closed:  # its own name: compiled, a name has one type
            # close() closed this channel ("Cannot invoke RPC on closed channel").
            if not self._replaced(generation):
                raise
            raise LeaseKeeperUnavailable(f"{name}: {closed}", reconnecting=True) from closed
        finally:
            self._ended(generation)
        if self._failures:
            self._recovered(generation)
        return result

    def _connected(self) -> tuple[LeaseKeeperStub, int]:
        """The current stub, opening a new channel once the backoff has passed; the
        call is counted on its channel until ``_ended``."""
        while True:
            with self._lock:
                if self._closed.is_set():
                    raise LeaseKeeperUnavailable("client is closed", reconnecting=True)
                if self._stub is None and self._reconnect_at <= self._clock():
                    self._channel = self._open_channel()
                    self._stub = LeaseKeeperStub(self._channel)
                    self._generation += 1
                if self._stub is not None:
                    generation = self._generation
                    self._calls[generation] = self._calls.get(generation, 0) + 1
                    return self._stub, generation
                wait = self._reconnect_at - self._clock()
            if self._closed.wait(max(0.0, wait)):
                raise LeaseKeeperUnavailable("client is closed", reconnecting=True)

    def _ended(self, generation: int) -> None:
        """A call on ``generation``'s channel ended: the last one on a dropped channel
        closes it. Closing it when a failure drops it would cancel the calls other
        threads still have on it, answers on their way included: the leasekeeper applied
        those Settles and Claims, so their acks would be sent again (and refused as
        stale) and the jobs they leased would wait out their leases in no worker's hands."""
        with self._lock:
            left = self._calls.pop(generation, 1) - 1
            if left > 0:
                self._calls[generation] = left
                return
            channel = self._dropped.pop(generation, None)
        if channel is not None:
            channel.close()

    def _open_channel(self) -> grpc.Channel:
        problem = target_problem(self.target, self.trust_owner)
        if problem is not None:  # its server could hand this worker someone else's jobs
            raise UntrustedSocket(problem)
        if self._credentials is None:
            return grpc.insecure_channel(self.target, options=CHANNEL_OPTIONS)
        return grpc.secure_channel(self.target, self._credentials, options=CHANNEL_OPTIONS)

    def _failed(self, name: str, exc: grpc.RpcError, generation: int) -> Exception:
        code = exc.code() if callable(getattr(exc, "code", None)) else grpc.StatusCode.UNKNOWN
        detail = f"{name} to leasekeeper at {self.target}: {code.name} {exc.details() or ''}"
        if code in _REJECTED:
            return LeaseKeeperRejected(detail.strip())
        if code is grpc.StatusCode.UNAVAILABLE:
            self._drop_channel(generation)
            return LeaseKeeperUnavailable(detail.strip(), reconnecting=True)
        return LeaseKeeperUnavailable(detail.strip())

    def _replaced(self, generation: int) -> bool:
        with self._lock:
            return self._closed.is_set() or generation != self._generation or self._stub is None

    def _drop_channel(self, generation: int) -> None:
        """Forget a broken channel once, however many threads saw it fail; the last
        call on it closes it (``_ended``)."""
        with self._lock:
            channel = self._channel
            if generation != self._generation or channel is None:
                return
            self._dropped[generation], self._channel, self._stub = channel, None, None
            self._failures += 1
            delay = self._backoff.delay(self._failures, self._rng)
            self._reconnect_at = self._clock() + delay
            failures = self._failures
            still_down = self._still_down(failures)
        if failures == 1:
            # A worker may start before its leasekeeper: say what is missing, and go on.
            absent = socket_absent(self.target)
            log.warning("leasekeeper at %s unavailable%s; reconnecting in %.2fs%s", self.target,
                        f": {absent}" if absent else "", delay,
                        _UNTIL_IT_APPEARS if absent else "")  # fmt: skip
        else:
            log.debug("leasekeeper at %s unavailable; reconnecting in %.2fs", self.target, delay)
        if still_down is not None:
            log.warning(
                "still no leasekeeper at %s after %.0f s; retrying (is `leasekeeper serve "
                "--queue QUEUE` running? the worker's --queue or --target must match)",
                self.target,
                still_down,
            )

    def _still_down(self, failures: int) -> float | None:
        """Seconds unreachable when a "still no leasekeeper" line is due (the lock is held)."""
        now = self._clock()
        if failures == 1:
            self._down_since = now
            self._next_report_s = STILL_DOWN_FIRST_S
            return None
        down = now - self._down_since
        if down < self._next_report_s:
            return None
        while self._next_report_s <= down:
            self._next_report_s *= 2
        return down

    def _recovered(self, generation: int) -> None:
        with self._lock:
            if generation != self._generation or not self._failures:
                return
            self._failures = 0
        log.info("reconnected to leasekeeper at %s", self.target)
