"""gRPC front of the engine: workers claim, heartbeat and settle in batches.

Listens on a Unix socket by default (``unix:PATH``, private: see
``leasekeeper.rpc.listen``) or TCP (with the shared token, optionally TLS); when a
token is configured every call must carry it in its metadata.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import threading
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any, Protocol

import grpc

from jobcore.config import AUTH_METADATA_KEY, CLAIM_ANSWER_BYTES
from leasekeeper.core.leases import Grant
from leasekeeper.core.recent_settles import RecentSettles
from leasekeeper.core.worker_port import WorkerPort
from leasekeeper.rpc.listen import (
    ChannelSecurity,
    ListenError,
    check_listen,
    is_unix,
    prepare_socket_dir,
    socket_path,
)
from leasekeeper.rpc.wire import (
    claimed_jobs,
    claimed_size,
    results,
    results_size,
    settlements,
    told_progress,
)
from leasekeeper.views.engine_view import ViewPort
from schemas import worker_pb2 as pb
from schemas import worker_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

MAX_CLAIM_WAIT_S = 30.0
MAX_CLAIM_JOBS = 1000


class EnginePorts(Protocol):
    """What the RPC front uses of the engine (``LeaseEngine`` has it): the workers' port,
    and the views for one job's ``inspect``."""

    @property
    def workers(self) -> WorkerPort: ...

    @property
    def views(self) -> ViewPort: ...


@dataclass(kw_only=True)
class RpcCounters:
    """What workers sent that the engine cannot use as is, counted at the RPC edge."""

    invalid_retry_after: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def count_invalid_retry_after(self, n: int) -> None:
        with self._lock:
            self.invalid_retry_after += n


class LeaseKeeperServicer(pb_grpc.LeaseKeeperServicer):
    def __init__(
        self,
        engine: EnginePorts,
        snapshot: Callable[[], dict[str, object]],
        counters: RpcCounters | None = None,
        settles: RecentSettles | None = None,
        answer_bytes: int = CLAIM_ANSWER_BYTES,
    ) -> None:
        """``snapshot`` is the service's whole view; one job's view comes from the engine.
        A claim's jobs stay under ``answer_bytes`` encoded (but for one larger job)."""
        self._engine = engine
        self._snapshot = snapshot
        self._counters = counters or RpcCounters()
        self._run_first = engine.workers.run_first_classes
        self._settles = settles or RecentSettles()
        self._answer_bytes = answer_bytes

    def Claim(self, request: pb.ClaimRequest, context: grpc.ServicerContext) -> pb.ClaimResponse:
        wait_s = min(max(request.wait_ms, 0) / 1000, MAX_CLAIM_WAIT_S)
        worker = request.worker_id or context.peer()
        grants = self._claim(request, worker, wait_s, self._answer_bytes)
        return pb.ClaimResponse(jobs=claimed_jobs(grants, self._run_first))

    def _claim(
        self,
        request: pb.ClaimRequest,
        worker: str,
        wait_s: float,
        max_bytes: int,
    ) -> list[Grant]:
        """The jobs' encoded size stays under ``max_bytes`` (but for one larger job),
        so the answer fits the worker's message limit: one it refused would leave
        its jobs leased to nobody until the leases expire."""
        return self._engine.workers.claim(
            worker,
            min(max(request.max_jobs, 1), MAX_CLAIM_JOBS),
            wait_s,
            frozenset(request.job_types),
            reports_started=request.reports_started,
            start_now=max(0, request.start_now),
            max_bytes=max_bytes,
            size=claimed_size,
        )

    def Heartbeat(
        self, request: pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.HeartbeatResponse:
        answers = self._engine.workers.heartbeat(
            [(r.lease_id, r.lease_token) for r in request.leases],
            frozenset(r.lease_id for r in request.leases if r.started),
            told_progress(request.leases),
        )
        return pb.HeartbeatResponse(results=results(answers))

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        settled = self._engine.workers.settle(
            settlements(request.settlements, self._unusable_retry_after)
        )
        answers = results(settled)
        claim = request.then_claim
        if not request.HasField("then_claim") or claim.max_jobs < 1:
            return pb.SettleResponse(results=answers)
        # The claim that refills the slots these settlements free; it never waits.
        worker = request.worker_id or context.peer()
        room = max(1, self._answer_bytes - results_size(settled))
        if not request.settle_id:  # a worker from before settle ids
            grants = self._claim(claim, worker, 0.0, room)
        else:
            grants = self._claim_once(claim, worker, request.settle_id, room)
        return pb.SettleResponse(results=answers, jobs=claimed_jobs(grants, self._run_first))

    def _claim_once(
        self, claim: pb.ClaimRequest, worker: str, settle_id: str, room: int
    ) -> list[Grant]:
        """A Settle sent again (its answer was lost) gets the grants of its first answer
        whose leases are still current, extended from now; never a second claim."""
        known = self._settles.begin(worker, settle_id)
        if known is None:
            grants = self._claim(claim, worker, 0.0, room)
            self._settles.answered(worker, settle_id, grants)
            return grants
        if not known:
            return []
        current = {
            a.lease_id: a.until_ms
            for a in self._engine.workers.heartbeat([(g.lease_id, g.token) for g in known])
            if a.ok
        }
        return [_extended(g, current[g.lease_id]) for g in known if g.lease_id in current]

    def _unusable_retry_after(self, value: float, used: float, lease_id: str) -> None:
        self._counters.count_invalid_retry_after(1)
        log.warning(
            "settle of lease %s: retry_after_s=%s is not a usable delay; using %gs",
            lease_id,
            value,
            used,
        )

    def Inspect(
        self, request: pb.InspectRequest, context: grpc.ServicerContext
    ) -> pb.InspectResponse:
        if request.job_id:
            return pb.InspectResponse(
                snapshot_json=json.dumps(self._engine.views.job_view(request.job_id))
            )
        return pb.InspectResponse(snapshot_json=json.dumps(self._snapshot()))


def _extended(grant: Grant, until_ms: int) -> Grant:
    return Grant(lease_id=grant.lease_id, token=grant.token, until_ms=until_ms,
                 attempt=grant.attempt, lease_s=grant.lease_s, envelope=grant.envelope,
                 job=grant.job, payload=grant.payload)  # fmt: skip


class TokenInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Rejects calls without the shared token (required on every TCP listener)."""

    def __init__(self, token: str) -> None:
        self._token = token.encode()

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong leasekeeper token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        metadata = dict(details.invocation_metadata or ())
        if token_matches(metadata.get(AUTH_METADATA_KEY), self._token):
            return continuation(details)
        return self._deny


def token_matches(presented: str | bytes | None, expected: bytes) -> bool:
    """Constant-time comparison, so response timing does not leak the token."""
    if presented is None:
        return False
    given = presented.encode() if isinstance(presented, str) else presented
    return hmac.compare_digest(given, expected)


def start_rpc_server(
    *,
    engine: EnginePorts,
    snapshot: Callable[[], dict[str, object]],
    listen: str,
    security: ChannelSecurity,
    threads: int = 32,
    counters: RpcCounters | None = None,
) -> grpc.Server:
    """Start serving on ``listen`` (``unix:PATH`` or ``HOST:PORT``); ``ListenError`` when
    the settings would let others in."""
    check_listen(listen, security)
    token = security.token
    interceptors: list[grpc.ServerInterceptor[Any, Any]] = (
        [TokenInterceptor(token)] if token else []
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rpc"),
        interceptors=interceptors,
    )
    pb_grpc.add_LeaseKeeperServicer_to_server(
        LeaseKeeperServicer(engine, snapshot, counters), server
    )
    if is_unix(listen):
        _bind_unix(server, listen, security.socket_mode)
    else:
        _bind_tcp(server, listen, security)
    server.start()
    return server


def _bind_unix(server: grpc.Server, listen: str, mode: int) -> None:
    path = socket_path(listen)
    prepare_socket_dir(path, mode)
    path.unlink(missing_ok=True)
    server.add_insecure_port(listen)
    if not path.exists():
        raise ListenError(f"cannot listen on {listen}: the socket was not created")
    os.chmod(path, mode)


def _bind_tcp(server: grpc.Server, listen: str, security: ChannelSecurity) -> None:
    if security.tls_cert is not None and security.tls_key is not None:
        credentials = grpc.ssl_server_credentials(
            [(security.tls_key.read_bytes(), security.tls_cert.read_bytes())]
        )
        port = server.add_secure_port(listen, credentials)
    else:
        port = server.add_insecure_port(listen)
    if port == 0:
        raise ListenError(f"cannot listen on {listen}: the address is in use or not local")
