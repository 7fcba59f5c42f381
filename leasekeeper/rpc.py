"""gRPC front of the engine: workers claim, heartbeat and settle in batches.

Listens on a Unix socket by default (``unix:PATH``) or loopback TCP; when a
shared token is configured every call must carry it in its metadata.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from jobcore.config import AUTH_METADATA_KEY
from leasekeeper.engine import LeaseEngine
from leasekeeper.leases import LeaseAnswer, Outcome, Settlement
from schemas import worker_pb2 as pb
from schemas import worker_pb2_grpc as pb_grpc

MAX_CLAIM_WAIT_S = 30.0
MAX_CLAIM_JOBS = 1000

_OUTCOMES = {pb.ACK: Outcome.ACK, pb.NACK: Outcome.NACK, pb.RELEASE: Outcome.RELEASE}


def _results(answers: list[LeaseAnswer]) -> list[pb.LeaseResult]:
    return [
        pb.LeaseResult(
            lease_id=a.lease_id,
            ok=a.ok,
            reason=a.reason,
            lease_until_ms=a.until_ms,
            retry_later=a.retry_later,
        )
        for a in answers
    ]


class LeaseKeeperServicer(pb_grpc.LeaseKeeperServicer):
    def __init__(self, engine: LeaseEngine, snapshot: Callable[[], dict[str, object]]) -> None:
        """``snapshot`` is the service's whole view; one job's view comes from the engine."""
        self._engine = engine
        self._snapshot = snapshot

    def Claim(self, request: pb.ClaimRequest, context: grpc.ServicerContext) -> pb.ClaimResponse:
        wait_s = min(max(request.wait_ms, 0) / 1000, MAX_CLAIM_WAIT_S)
        grants = self._engine.claim(
            request.worker_id or context.peer(),
            min(max(request.max_jobs, 1), MAX_CLAIM_JOBS),
            wait_s,
            frozenset(request.job_types),
        )
        return pb.ClaimResponse(
            jobs=[
                pb.ClaimedJob(
                    lease_id=g.lease_id,
                    lease_token=g.token,
                    lease_until_ms=g.until_ms,
                    attempt=g.attempt,
                    envelope=g.envelope,
                    lease_s=max(1, round(g.lease_s)),
                )
                for g in grants
            ]
        )

    def Heartbeat(
        self, request: pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.HeartbeatResponse:
        answers = self._engine.heartbeat([(r.lease_id, r.lease_token) for r in request.leases])
        return pb.HeartbeatResponse(results=_results(answers))

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        settlements = [
            Settlement(
                lease_id=s.lease.lease_id,
                token=s.lease.lease_token,
                outcome=_OUTCOMES.get(s.outcome, Outcome.NACK),
                error_class=s.error_class,
                message=s.error_message,
                traceback=s.traceback,
                retry_after_s=s.retry_after_s,
                permanent=s.permanent,
            )
            for s in request.settlements
        ]
        return pb.SettleResponse(results=_results(self._engine.settle(settlements)))

    def Inspect(
        self, request: pb.InspectRequest, context: grpc.ServicerContext
    ) -> pb.InspectResponse:
        if request.job_id:
            return pb.InspectResponse(
                snapshot_json=json.dumps(self._engine.job_view(request.job_id))
            )
        return pb.InspectResponse(snapshot_json=json.dumps(self._snapshot()))


class TokenInterceptor(grpc.ServerInterceptor):  # type: ignore[type-arg]
    """Rejects calls without the shared token (required when listening beyond loopback)."""

    def __init__(self, token: str) -> None:
        self._token = token

        def deny(request: object, context: grpc.ServicerContext) -> None:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong leasekeeper token")

        self._deny = grpc.unary_unary_rpc_method_handler(deny)

    def intercept_service(self, continuation: Any, details: Any) -> Any:
        metadata = dict(details.invocation_metadata or ())
        if metadata.get(AUTH_METADATA_KEY) == self._token:
            return continuation(details)
        return self._deny


def start_rpc_server(
    *,
    engine: LeaseEngine,
    snapshot: Callable[[], dict[str, object]],
    listen: str,
    token: str | None,
    threads: int = 32,
) -> grpc.Server:
    """Start serving on ``listen`` (``unix:PATH`` or ``HOST:PORT``)."""
    interceptors: list[grpc.ServerInterceptor[Any, Any]] = (
        [TokenInterceptor(token)] if token else []
    )
    server = grpc.server(
        futures.ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rpc"),
        interceptors=interceptors,
    )
    pb_grpc.add_LeaseKeeperServicer_to_server(LeaseKeeperServicer(engine, snapshot), server)
    if listen.startswith("unix:"):
        path = Path(listen.removeprefix("unix:").removeprefix("//"))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.unlink(missing_ok=True)
    elif not token and not _is_loopback(listen):
        raise ValueError(f"listening on {listen} beyond loopback requires a token")
    if server.add_insecure_port(listen) == 0 and not listen.startswith("unix:"):
        raise OSError(f"cannot listen on {listen}")
    server.start()
    return server


def _is_loopback(listen: str) -> bool:
    host = listen.rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1") or host.startswith("127.")
