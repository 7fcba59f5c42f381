"""``MemoryQueue``: enqueue with the real producer, look at what was enqueued, and run it
through the real leasekeeper and worker code, in-process, with no Kafka.

While a ``MemoryQueue`` is open, every Kafka client the process builds through
``jobcore.kafka`` is one of its in-memory cluster's (``jobcore.client_hook``): a
``JobProducer`` the code under test makes for itself enqueues here too.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from jobcore.client_hook import install_clients
from jobcore.closing import Closing
from jobcore.config import schema_path_from_env
from jobcore.control import JobStatus
from jobcore.delay_tiers import DelayTiers
from jobcore.job_state import JobState, state_of
from jobcore.kafka import KafkaSettings
from jobcore.priority import PriorityClasses
from jobcore.topics import QueueTopics
from jobtesting.clock import FakeClock
from jobtesting.cluster import QueueCluster
from jobtesting.cron import MemoryCron
from jobtesting.leasekeeper import MemoryLeaseKeeper
from jobtesting.report import Attempt, DrainLimit, DrainReport, End, JobRun
from jobtesting.worker import MemoryWorker
from producer.api import JobProducer
from producer.flood import FloodPolicy
from producer.scheduler.entry import CronEntry
from producer.scheduler.service import check_payload
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import Job
from workers.app import App

__all__ = ["DEFAULT_MAX_STEPS", "MemoryQueue"]

# Loop steps one drain may take: enough for thousands of jobs and their retries, few
# enough that a drain that would never end fails in seconds.
DEFAULT_MAX_STEPS = 20_000
# Steps with nothing to claim and nothing in flight before the queue counts as idle:
# a copy sent in one step is fetched (and held, or offered) in the next.
QUIET_STEPS = 3
WORKER_ID = "memory-worker"

_ENDS = {JobState.SUCCEEDED: End.SUCCEEDED, JobState.DEAD: End.DEAD,
         JobState.CANCELLED: End.CANCELLED, JobState.SKIPPED: End.SKIPPED}  # fmt: skip


class MemoryQueue(Closing):
    """Queues in memory on a fake clock (``clock``, default a new ``FakeClock``).
    ``schema_dirs`` add payload schemas to those of ``JOBS_SCHEMA_PATH`` and the
    package, for the producer and the worker alike. ``seed`` seeds the leasekeeper's
    backoff jitter, so a test sees the same delays on every run. Close it (or use
    ``with``)."""

    def __init__(
        self,
        *,
        clock: FakeClock | None = None,
        schema_dirs: Sequence[str | Path] = (),
        tiers: DelayTiers | None = None,
        seed: int = 0,
    ) -> None:
        self.clock = clock if clock is not None else FakeClock()
        self.tiers = tiers if tiers is not None else DelayTiers()
        self._seed = seed
        self.settings = KafkaSettings(bootstrap="memory", client_id="jobtesting")
        self.cluster = QueueCluster(clock=self.clock.time, settings=self.settings,
                                    tiers=self.tiers)  # fmt: skip
        self._registry = SchemaRegistry(extra_dirs=(*schema_path_from_env(), *schema_dirs))
        self._codec = EnvelopeCodec(self._registry)
        self._state_dir = Path(tempfile.mkdtemp(prefix="jobtesting-"))
        self._keepers: dict[str, MemoryLeaseKeeper] = {}
        self._runs: dict[str, list[Attempt]] = {}
        self._producer: JobProducer | None = None
        self._cron: MemoryCron | None = None
        self._from = 0  # what ``clear()`` forgot: the writes before this index
        self._closed = False
        self._previous = install_clients(self.cluster)

    # -- enqueueing ------------------------------------------------------------

    def producer(self) -> JobProducer:
        """The queue's ``JobProducer`` (one, made at the first call): a real one, so
        payloads, classes, ordering keys and delays are checked exactly as in
        production. Flood diversion is off: jobs stay in enqueue order."""
        self._check_open()
        if self._producer is None:
            self._producer = JobProducer(self.settings, registry=self._registry,
                                         tiers=self.tiers, clock=self.clock.time,
                                         flood=FloodPolicy.off())  # fmt: skip
        return self._producer

    def cancel(self, job_id: str, *, reason: str = "") -> None:
        """Record the cancellation of an enqueued job, as ``JobProducer.cancel`` does
        (without waiting for a leasekeeper's answer: the next drain applies it)."""
        found = [job for job in self.enqueued() if job.job_id == job_id]
        if not found:
            raise KeyError(f"job {job_id} was not enqueued here (since the last clear())")
        self.producer().record_cancellation(found[0].queue, job_id, reason=reason)

    def enqueued(self, queue: str | None = None) -> list[Job]:
        """The jobs enqueued on ``queue`` (None: on any queue) since the last
        ``clear()``, in enqueue order, decoded; retries and other copies the
        leasekeeper wrote are not listed."""
        jobs: dict[str, Job] = {}
        topics = self._job_topics()
        for topic, partition, offset in self.cluster.written[self._from :]:
            queue_of = topics.get(topic)
            if queue_of is None or (queue is not None and queue_of != queue):
                continue
            record = self._record(topic, partition, offset)
            if record is None:
                continue
            job = self._codec.decode(record)
            if job.job_id not in jobs and not job.errors:
                jobs[job.job_id] = job
        return list(jobs.values())

    def payload_of(self, job: Job) -> dict[str, Any]:
        """A job's payload as its handler gets it."""
        return self._codec.decode_payload(job.type, job.payload)

    def assert_enqueued(
        self,
        *,
        type: str | None = None,
        tenant: str | None = None,
        payload: Mapping[str, object] | None = None,
        queue: str | None = None,
        count: int | None = 1,
    ) -> list[Job]:
        """Exactly ``count`` jobs (None: at least one) match every criterion given;
        ``payload`` matches when each of its fields equals the job's. Returns them;
        raises AssertionError listing what was enqueued otherwise."""
        jobs = self.enqueued(queue)
        found = [job for job in jobs if self._matches(job, type, tenant, payload)]
        if (len(found) == count) if count is not None else bool(found):
            return found
        wanted = ", ".join(f"{name}={value!r}" for name, value in
                           (("type", type), ("tenant", tenant), ("payload", payload),
                            ("queue", queue)) if value is not None)  # fmt: skip
        expected = "at least 1 job" if count is None else f"{count} job(s)"
        listed = "\n".join(f"  {self._describe(job)}" for job in jobs) or "  (nothing)"
        raise AssertionError(
            f"expected {expected} matching {wanted or 'anything'}, found {len(found)}; "
            f"enqueued{'' if queue is None else f' on {queue!r}'}:\n{listed}"
        )

    def clear(self) -> None:
        """Forget what was enqueued so far: it is no longer listed, and the jobs not
        yet run are dropped (their records deleted, as retention would)."""
        with self.cluster.lock:
            for topic in self._job_topics():
                for log in self.cluster.topics.get(topic, []):
                    log.delete_before(log.high)
            self._from = len(self.cluster.written)
        self._runs.clear()

    # -- running -----------------------------------------------------------------

    def drain(
        self,
        app: App,
        queue: str | None = None,
        *,
        advance_clock: bool = True,
        within: float | timedelta | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
    ) -> DrainReport:
        """Run ``queue``'s jobs (None: the one queue enqueued on) with ``app``'s handlers
        until nothing is left to run, and report every job enqueued on it. When only
        waiting jobs are left (retries, delays, cron fires), the clock moves to the
        next one's due time: without limit, up to ``within`` (seconds or a timedelta,
        then the clock ends there; needed with cron entries, which fire for ever), or
        not at all (``advance_clock=False``). Jobs a handler enqueues on ``queue`` run
        too. Raises ``DrainLimit`` after ``max_steps`` loop steps."""
        self._check_open()
        name = self._queue_to_drain(queue)
        until = self._until(advance_clock, within)
        keeper = self._keeper(name)
        worker = MemoryWorker(app, self._codec, self.clock)
        worker.start()
        try:
            steps = self._run(keeper, worker, until, max_steps)
        finally:
            worker.stop()
        return self._report(name, steps)

    def schedule(self, entry: CronEntry) -> None:
        """Fire ``entry`` on its schedule from now on, in the drains to come (each fire
        enqueues its job, as the cron scheduler does; ``docs/scheduling.md``). Its
        payload is checked now, as a scheduler checks it at start."""
        self._check_open()
        check_payload(self._codec, entry)
        if self._cron is None:
            self._cron = MemoryCron(settings=self.settings, producer=self.producer(),
                                    clock=self.clock)  # fmt: skip
        self._cron.add(entry)
        self._cron.step()  # its fires count from now

    def _until(self, advance: bool, within: float | timedelta | None) -> float:
        """The latest time a drain may move the clock to."""
        now = self.clock.time()
        if not advance:
            return now
        if within is None:
            if self._cron is not None:
                raise ValueError("cron entries fire for ever: give the drain a horizon, "
                                 "e.g. drain(app, within=timedelta(days=1))")  # fmt: skip
            return math.inf
        seconds = within.total_seconds() if isinstance(within, timedelta) else float(within)
        if not seconds >= 0:
            raise ValueError(f"within must be a duration >= 0, got {within!r}")
        return now + seconds

    def _run(
        self, keeper: MemoryLeaseKeeper, worker: MemoryWorker, until: float, max_steps: int
    ) -> int:
        quiet = 0
        for step in range(1, max_steps + 1):
            if self._cron is not None:
                self._cron.step()
            keeper.step()
            leases = keeper.claim(worker.types.runnable)
            for lease in leases:
                ran = worker.run(lease)
                result = keeper.settle(ran.settlement)
                self._runs.setdefault(ran.ctx.job_id, []).append(ran.attempt)
                outcome = str(ran.settlement.outcome)
                worker.app.notify_settled(ran.ctx, outcome, result.ok)
            quiet = 0 if leases or keeper.busy() else quiet + 1
            if quiet < QUIET_STEPS:
                continue
            due = self._next_due(keeper)
            target = None if due is None else max(due, self.clock.time() + 0.001)
            if target is None or target > until:
                if math.isfinite(until) and until > self.clock.time():
                    self.clock.advance_to(until)
                return step
            self.clock.advance_to(target)
            quiet = 0
        raise DrainLimit(
            f"drain stopped after max_steps={max_steps} steps with jobs still to run "
            f"(a handler that enqueues a job every time it runs?); pass a larger "
            f"max_steps if the work really is that long"
        )

    def _next_due(self, keeper: MemoryLeaseKeeper) -> float | None:
        """When the next waiting job or cron fire is due (epoch seconds)."""
        found = [keeper.next_due_ms()]
        if self._cron is not None:
            found.append(self._cron.next_due_ms())
        due = [ms for ms in found if ms is not None]
        return min(due) / 1000 if due else None

    def _report(self, queue: str, steps: int) -> DrainReport:
        ends = self._statuses(queue)
        runs = []
        for job in self.enqueued(queue):
            status = ends.get(job.job_id)
            attempts = tuple(self._runs.get(job.job_id, ()))
            state = End.PENDING if status is None else _ENDS[state_of(status)]
            runs.append(JobRun(job_id=job.job_id, queue=job.queue, type=job.type,
                               tenant=job.tenant_id, state=state,
                               attempts=len(attempts) if status is None else status.attempt,
                               reason="" if status is None else status.reason,
                               runs=attempts))  # fmt: skip
        return DrainReport(jobs=tuple(runs), steps=steps)

    def _statuses(self, queue: str) -> dict[str, JobStatus]:
        """How each job of ``queue`` ended, from its status topic (the last record)."""
        found = {}
        for record in self.cluster.records(QueueTopics(queue=queue).status):
            if record.value and record.key and not record.key.startswith(b"\x00"):
                status = JobStatus.decode(record.value)
                found[status.job_id] = status
        return found

    def _queue_to_drain(self, queue: str | None) -> str:
        if queue is not None:
            QueueTopics(queue=queue)  # a clear error for a name that cannot be a queue
            return queue
        names = sorted({job.queue for job in self.enqueued()} | set(self._keepers))
        if len(names) == 1:
            return names[0]
        if not names:
            raise ValueError("nothing was enqueued: name the queue to drain (queue=...)")
        raise ValueError(f"jobs were enqueued on {len(names)} queues ({', '.join(names)}): "
                         "name the one to drain (queue=...)")  # fmt: skip

    def _keeper(self, queue: str) -> MemoryLeaseKeeper:
        keeper = self._keepers.get(queue)
        if keeper is None:
            self.cluster.create_queue(queue)
            keeper = self._keepers[queue] = MemoryLeaseKeeper(
                queue=queue, settings=self.settings, clock=self.clock, codec=self._codec,
                tiers=self.tiers, state_dir=self._state_dir / queue, worker_id=WORKER_ID,
                seed=self._seed,
            )  # fmt: skip
        return keeper

    # -- internals -----------------------------------------------------------------

    def _job_topics(self) -> dict[str, str]:
        """Every topic that holds a queue's jobs (its classes, overflow, delay tiers),
        for every queue made so far → the queue's name."""
        classes = tuple(PriorityClasses.from_env().weights)
        found = {}
        for topic in list(self.cluster.topics):
            queue = self.cluster.queue_of(topic)
            if queue is None:
                continue
            topics = QueueTopics(queue=queue)
            names = (*topics.classes(classes), topics.overflow,
                     *self.tiers.topics(topics, classes))  # fmt: skip
            found.update(dict.fromkeys(names, queue))
        return found

    def _record(self, topic: str, partition: int, offset: int) -> bytes | None:
        log = self.cluster.log(topic, partition)
        if log is None or offset < log.low:
            return None
        found = log.read(offset, 1)
        return found[0].value if found and found[0].offset == offset else None

    def _matches(self, job: Job, type: str | None, tenant: str | None,
                 payload: Mapping[str, object] | None) -> bool:  # fmt: skip
        if (type is not None and job.type != type) or (
            tenant is not None and job.tenant_id != tenant
        ):
            return False
        if payload is None:
            return True
        given = self.payload_of(job)
        return all(key in given and given[key] == value for key, value in payload.items())

    def _describe(self, job: Job) -> str:
        return (f"{job.queue}: {job.type} tenant={job.tenant_id!r} "
                f"payload={self.payload_of(job)!r} id={job.job_id}")  # fmt: skip

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError("this MemoryQueue is closed; make a new one")

    def close(self) -> None:
        """Close the producer and the leasekeepers, and put back the Kafka clients
        that were installed before."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._cron is not None:
                self._cron.close()
            if self._producer is not None:
                self._producer.close()
            for keeper in self._keepers.values():
                keeper.close()
        finally:
            install_clients(self._previous)
            shutil.rmtree(self._state_dir, ignore_errors=True)
