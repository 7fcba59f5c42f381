"""A fake LeaseKeeper gRPC server and helpers shared by the worker tests (no tests here).

The fake is a real ``grpc.server`` on a Unix socket implementing the servicer
generated from ``schemas/worker.proto``: it hands out a list of envelopes,
mints a token per claim, answers heartbeats and settles, and records every
call, so tests observe the worker from the leasekeeper's side of the wire.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from devtools.waiting import wait_until as wait_until
from jobcore.config import AUTH_METADATA_KEY
from schemas import worker_pb2 as pb
from schemas import worker_pb2_grpc as pb_grpc
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from workers.app import App
from workers.client import LeaseKeeperClient
from workers.decoding import EnvelopeDecoder
from workers.runtime import Worker


@dataclass(frozen=True, kw_only=True)
class Settled:
    """One settlement as the fake leasekeeper received it."""

    lease_id: str
    token: str
    outcome: str
    error_class: str
    error_message: str
    traceback: str
    retry_after_s: float
    permanent: bool
    accepted: bool
    run_s: float = 0.0


_OUTCOME_NAMES = {pb.ACK: "ack", pb.NACK: "nack", pb.RELEASE: "release"}


class FakeLeaseKeeper(pb_grpc.LeaseKeeperServicer):
    """Hands out envelopes in order; one lease per envelope, token minted per claim."""

    def __init__(
        self,
        envelopes: list[bytes] | None = None,
        *,
        lease_s: int = 30,
        token: str | None = None,
        then_claim: bool = False,
    ) -> None:
        self.lease_s = lease_s
        # Answer a Settle's then_claim (a current leasekeeper); False: ignore it (one
        # from before the combined call).
        self.then_claim = then_claim
        self.combined: list[tuple[int, int]] = []  # (max_jobs, jobs handed out) of each
        self.token = token
        self.cond = threading.Condition()
        self.pending: deque[bytes] = deque(envelopes or [])
        self.outstanding: dict[str, str] = {}  # lease_id -> current token
        self.claims: list[int] = []  # max_jobs of each Claim
        self.starts_at_claim: list[int] = []  # start_now of each Claim that reports starts
        self.started: list[str] = []  # lease ids heartbeats reported started
        self.claims_in_progress = 0
        self.claim_gate: threading.Event | None = None
        self.heartbeats: list[list[tuple[str, str]]] = []
        self.settled: list[Settled] = []
        self.settle_batches: list[int] = []
        self.refuse_heartbeat: dict[str, str] = {}  # lease_id -> reason
        self.max_outstanding = 0
        self.worker_ids: set[str] = set()
        self.job_types: list[list[str]] = []  # job_types of each Claim
        self.tokens_seen: list[str | None] = []
        self.run_first: set[bytes] = set()  # envelopes handed out marked run_first
        self._next = 0

    def add(self, *envelopes: bytes) -> None:
        with self.cond:
            self.pending.extend(envelopes)
            self.cond.notify_all()

    def _authorize(self, context: grpc.ServicerContext) -> None:
        metadata = dict(context.invocation_metadata() or ())
        token = metadata.get(AUTH_METADATA_KEY)
        with self.cond:
            self.tokens_seen.append(token if isinstance(token, str) else None)
        if self.token is not None and token != self.token:
            context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong leasekeeper token")

    def Claim(self, request: pb.ClaimRequest, context: grpc.ServicerContext) -> pb.ClaimResponse:
        self._authorize(context)
        with self.cond:
            self.claims.append(request.max_jobs)
            if request.reports_started:
                self.starts_at_claim.append(request.start_now)
            self.worker_ids.add(request.worker_id)
            self.job_types.append(list(request.job_types))
            self.claims_in_progress += 1
            self.cond.notify_all()
        gate = self.claim_gate
        if gate is not None:
            gate.wait(30)
        with self.cond:
            self.cond.wait_for(lambda: bool(self.pending), request.wait_ms / 1000)
            jobs = [
                self._lease(self.pending.popleft()) for _ in range(request.max_jobs) if self.pending
            ]
            self.max_outstanding = max(self.max_outstanding, len(self.outstanding))
            self.claims_in_progress -= 1
            self.cond.notify_all()
        return pb.ClaimResponse(jobs=jobs)

    def _lease(self, envelope: bytes) -> pb.ClaimedJob:
        self._next += 1
        lease_id = f"jobs.test/0/{self._next}"
        token = uuid.uuid4().hex
        self.outstanding[lease_id] = token
        return pb.ClaimedJob(
            lease_id=lease_id,
            lease_token=token,
            lease_until_ms=_now_ms() + self.lease_s * 1000,
            attempt=1,
            envelope=envelope,
            lease_s=self.lease_s,
            run_first=envelope in self.run_first,
        )

    def Heartbeat(
        self, request: pb.HeartbeatRequest, context: grpc.ServicerContext
    ) -> pb.HeartbeatResponse:
        self._authorize(context)
        results = []
        with self.cond:
            self.heartbeats.append([(r.lease_id, r.lease_token) for r in request.leases])
            self.started.extend(r.lease_id for r in request.leases if r.started)
            for ref in request.leases:
                reason = self._refusal(ref.lease_id, ref.lease_token)
                results.append(
                    pb.LeaseResult(
                        lease_id=ref.lease_id,
                        ok=not reason,
                        reason=reason,
                        lease_until_ms=0 if reason else _now_ms() + self.lease_s * 1000,
                    )
                )
            self.cond.notify_all()
        return pb.HeartbeatResponse(results=results)

    def _refusal(self, lease_id: str, token: str) -> str:
        if lease_id in self.refuse_heartbeat:
            return self.refuse_heartbeat[lease_id]
        current = self.outstanding.get(lease_id)
        if current is None:
            return "unknown lease"
        return "" if current == token else "stale token"

    def Settle(self, request: pb.SettleRequest, context: grpc.ServicerContext) -> pb.SettleResponse:
        self._authorize(context)
        results = []
        with self.cond:
            self.settle_batches.append(len(request.settlements))
            for s in request.settlements:
                ok = self.outstanding.get(s.lease.lease_id) == s.lease.lease_token
                if ok:
                    del self.outstanding[s.lease.lease_id]
                self.settled.append(_settled(s, ok))
                results.append(
                    pb.LeaseResult(lease_id=s.lease.lease_id, ok=ok, reason="" if ok else "stale")
                )
            jobs = []
            if self.then_claim and request.HasField("then_claim"):
                asked = request.then_claim.max_jobs
                jobs = [self._lease(self.pending.popleft()) for _ in range(asked) if self.pending]
                self.combined.append((asked, len(jobs)))
                self.max_outstanding = max(self.max_outstanding, len(self.outstanding))
            self.cond.notify_all()
        return pb.SettleResponse(results=results, jobs=jobs)

    def Inspect(
        self, request: pb.InspectRequest, context: grpc.ServicerContext
    ) -> pb.InspectResponse:
        return pb.InspectResponse(snapshot_json="{}")

    def outcomes(self, outcome: str) -> list[Settled]:
        with self.cond:
            return [s for s in self.settled if s.outcome == outcome]


def _settled(s: pb.Settlement, accepted: bool) -> Settled:
    return Settled(
        lease_id=s.lease.lease_id,
        token=s.lease.lease_token,
        outcome=_OUTCOME_NAMES.get(s.outcome, "unspecified"),
        error_class=s.error_class,
        error_message=s.error_message,
        traceback=s.traceback,
        retry_after_s=s.retry_after_s,
        permanent=s.permanent,
        accepted=accepted,
        run_s=s.run_s,
    )


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


@contextmanager
def serving(fake: FakeLeaseKeeper, socket_path: Path) -> Iterator[str]:
    """Serve ``fake`` on ``unix:socket_path``; yields the target; stops the server after."""
    server = start_server(fake, socket_path)
    try:
        yield f"unix:{socket_path}"
    finally:
        server.stop(0).wait()


def start_server(fake: FakeLeaseKeeper, socket_path: Path) -> grpc.Server:
    socket_path.unlink(missing_ok=True)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    pb_grpc.add_LeaseKeeperServicer_to_server(fake, server)
    server.add_insecure_port(f"unix:{socket_path}")
    server.start()
    return server


class Envelopes:
    """Builds real Avro envelopes with the project's codec (package schemas only)."""

    def __init__(self) -> None:
        self.codec = EnvelopeCodec(SchemaRegistry())
        self._count = 0

    def __call__(
        self,
        job_type: str = "noop",
        payload: dict[str, Any] | None = None,
        *,
        timeout_s: float = 30.0,
        raw_payload: bytes | None = None,
    ) -> bytes:
        self._count += 1
        body = payload if payload is not None else {"n": self._count}
        encoded = (
            raw_payload if raw_payload is not None else self.codec.encode_payload(job_type, body)
        )
        job = Job(
            job_id=f"job-{self._count}",
            queue="test",
            tenant_id="tenant-a",
            type=job_type,
            payload=encoded,
            timeout_s=timeout_s,
            created_at_ms=_now_ms(),
        )
        return self.codec.encode(job)


@dataclass(kw_only=True)
class RunningWorker:
    """A ``Worker`` running on a background thread, as a test drives it."""

    worker: Worker
    client: LeaseKeeperClient
    thread: threading.Thread
    errors: list[BaseException]

    def stop(self, timeout: float = 15.0) -> None:
        self.worker.stop()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "Worker.run() did not return after stop()"


@contextmanager
def running_worker(
    app: App,
    target: str,
    *,
    decoder: EnvelopeDecoder | None = None,
    token: str | None = None,
    **options: Any,
) -> Iterator[RunningWorker]:
    """Run a Worker for ``app`` against ``target``; stop it and re-raise its errors after."""
    client = LeaseKeeperClient(target, worker_id="test-worker", token=token)
    options.setdefault("claim_wait_ms", 100)
    options.setdefault("shutdown_grace_s", 5.0)
    worker = Worker(app, client, decoder=decoder or Envelopes().codec, **options)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=run, name="test-worker-run")
    thread.start()
    running = RunningWorker(worker=worker, client=client, thread=thread, errors=errors)
    try:
        yield running
    finally:
        running.stop()
        client.close()
    if errors:
        raise errors[0]
