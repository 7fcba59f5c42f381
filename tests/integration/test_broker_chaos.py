"""Kill -9 of a broker, a leasekeeper and a worker under load, on a 3-broker cluster
(never lose a job; duplicates stay bounded): nothing is lost, and the duplicates
stay within the bound
computed from the run (jobs in flight at each fault, plus the acks one commit
interval holds where the fault may move partitions). The killed leasekeeper's
partitions move to the other one and back when it restarts: two moves in a row.
While the broker is down, the other leasekeeper is killed and restarted: it must
start with a broker of its bootstrap list unreachable.

Faults land at points of progress (after so many jobs ran), not after sleeps, so a
slow machine shifts them in time but not in the load they interrupt.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path

import pytest

from devtools.localkafka import LocalKafka
from jobcore.kafka import KafkaException, KafkaSettings, make_admin
from producer import JobProducer, JobRequest
from schemas.codec import SchemaRegistry
from tests.apps.recording import SCHEMAS
from tests.chaos import (
    Fault,
    Ledger,
    broker_fault,
    extra_starts,
    leasekeeper_fault,
    move_back_fault,
    twice_started,
    worker_fault,
)
from tests.system import Leasekeeper, System, WorkerProcess, wait_until

JOBS = 15_000  # at least; the feeder goes on until the last fault
BATCH = 200
RATE = 500  # jobs/s: well under what the pool drains, so work waits only behind faults
PARTITIONS = 6
JOB_MAX_MS = 20
TENANTS = 60  # keyed by tenant: enough of them to reach every partition
LEASEKEEPER_AT = 2_000
BETWEEN_FAULTS = 1_000  # jobs that run after one fault settled before the next
# The broker's minimum session: a dead leasekeeper's partitions move 6 s after the kill.
# While the coordinator is down no commit lands: past MAX_UNCOMMITTED finished jobs
# in no commit a leasekeeper leases nothing new (steady state: ~50 per commit).
MAX_UNCOMMITTED = 200
SESSION = ["--session-timeout-ms", "6000", "--max-uncommitted", str(MAX_UNCOMMITTED)]
AFTER_BROKER_KILL = 1_000  # jobs that run on two brokers before the third comes back


@pytest.fixture
def cluster_system(
    kafka_cluster3: LocalKafka, unique: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[System]:
    """A queue with ``PARTITIONS`` partitions on the 3-broker cluster; its noop jobs take
    up to ``JOB_MAX_MS`` (workers inherit the setting), so that kills find jobs running."""
    monkeypatch.setenv("RECORDING_MAX_MS", str(JOB_MAX_MS))
    kafka = KafkaSettings(bootstrap=kafka_cluster3.bootstrap, client_id="tests")
    sut = System(kafka, unique, tmp_path, lease_s=5.0, partitions=PARTITIONS)
    yield sut
    sut.stop()


class Feeder(threading.Thread):
    """Enqueues jobs at a steady ``RATE`` until told to stop (and at least ``total``).

    Paced, not all at once: the queue must still hold work when the last fault lands,
    however fast this machine drains it (a load enqueued up front could be finished
    before the worker kill, which would then find no job running). One producer for
    the whole load, as an application runs one, and it never waits for a delivery:
    a job bound for a partition led by the killed broker is delivered once a new
    leader is elected, while the load goes on. (A producer and a thread per batch,
    as before, piled batches up behind the kill on a loaded machine, and the pile
    outlasted the test's time.)
    """

    def __init__(self, system: System, total: int) -> None:
        super().__init__(daemon=True)
        self.system, self.total = system, total
        self.producer = JobProducer(system.kafka, registry=SchemaRegistry(extra_dirs=[SCHEMAS]))
        self.sent: list[Future[str]] = []
        self.failed: list[BaseException] = []  # filled by the delivery callbacks
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def run(self) -> None:
        try:
            started_at = time.monotonic()
            while not (self.stopping.is_set() and len(self.sent) >= self.total):
                for _ in range(BATCH):
                    n = len(self.sent)
                    request = JobRequest(
                        queue=self.system.queue,
                        type="noop",
                        payload={"n": n},
                        tenant_id=f"tenant-{n % TENANTS}",
                    )
                    future = self.producer.enqueue_nowait(request)
                    future.add_done_callback(self._delivered)
                    self.sent.append(future)
                due = started_at + len(self.sent) / RATE
                self.stopping.wait(max(0.0, due - time.monotonic()))
        except BaseException as exc:
            self.error = exc

    def _delivered(self, future: Future[str]) -> None:
        if (exc := future.exception()) is not None:
            self.failed.append(exc)

    def enqueued(self) -> int:
        return sum(1 for f in list(self.sent) if f.done() and not f.exception())

    def check(self) -> None:
        assert self.error is None, f"enqueue failed: {self.error!r}"
        assert not self.failed, f"enqueue failed: {self.failed[0]!r}"

    def finish(self) -> list[str]:
        """Stop, and wait for every job to be delivered (those held for the killed
        broker once it is back)."""
        self.stopping.set()
        self.join(60)
        assert not self.is_alive(), f"enqueueing did not stop: {len(self.sent)} sent"
        self.check()
        try:
            self.producer.flush(120)
        finally:
            self.producer.close()
        self.check()
        return [future.result(30) for future in self.sent]


def ready_owned(leasekeeper: Leasekeeper, system: System) -> int:
    snapshot = leasekeeper.snapshot() or {"partitions": []}
    return sum(p["topic"] == system.topics.ready for p in snapshot["partitions"])


def started(system: System, *leasekeepers: Leasekeeper) -> tuple[Leasekeeper, ...]:
    """Start ``leasekeepers`` together (stopped with the system) and wait until each owns
    ready partitions. Together, because the group balances partitions of every topic it
    reads (ready and delay tiers) by count: a second member joining later can be given
    all the ready partitions and leave the first with tiers only."""
    for leasekeeper in leasekeepers:
        if all(known is not leasekeeper for known in system.leasekeepers):
            system.leasekeepers.append(leasekeeper)
        leasekeeper.start()
    for leasekeeper in leasekeepers:
        wait_until(
            lambda lk=leasekeeper: ready_owned(lk, system) > 0,
            60,
            "every leasekeeper to own ready partitions",
            describe=lambda: [ready_owned(lk, system) for lk in leasekeepers],
        )
    return leasekeepers


def joined(leasekeeper: Leasekeeper) -> bool:
    """Connected to Kafka, alive and given an assignment (of any topic)."""
    leasekeeper.assert_alive()
    snapshot = leasekeeper.snapshot()
    return (
        snapshot is not None
        and snapshot.get("kafka") == "connected"
        and len(snapshot["partitions"]) > 0
    )


def wait_runs(system: System, feeder: Feeder, count: int) -> int:
    """Wait until ``count`` jobs ran (the feeder still enqueueing, so the load holds
    them); fail at once if enqueueing failed."""

    def ran() -> bool:
        feeder.check()
        return len(system.runs()) >= count

    wait_until(ran, 150, f"{count} jobs to run", step=0.25, describe=lambda: state(system, feeder))
    return len(system.runs())


def state(system: System, feeder: Feeder) -> dict[str, object]:
    """What a stalled run looks like: the load, and each leasekeeper's own account."""
    found: dict[str, object] = {"enqueued": feeder.enqueued(), "ran": len(system.runs())}
    for n, leasekeeper in enumerate(system.leasekeepers):
        snapshot = leasekeeper.snapshot()
        found[f"leasekeeper {n}"] = (
            "no answer"
            if snapshot is None
            else {
                "kafka": snapshot.get("kafka"),
                "partitions (topic, partition, committed, fetched, leases)": [
                    (
                        p["topic"],
                        p["partition"],
                        p.get("committed"),
                        p.get("highest_fetched"),
                        len(p["leases"]),
                    )
                    for p in snapshot["partitions"]
                ],
            }
        )
    return found


def finished(system: System, enqueued: set[str]) -> set[str]:
    """Jobs that ran, or sit in the DLQ (read only while some did not run)."""
    ran = set(system.runs())
    if ran >= enqueued:
        return ran
    letters = system.dead_letters()
    return ran | {system.codec().decode(d.envelope).job_id for d in letters if d.envelope}


def all_finished(system: System, enqueued: set[str]) -> bool:
    """Whether every job finished; a read that a broker restart interrupts counts as no."""
    try:
        return finished(system, enqueued) >= enqueued
    except KafkaException:
        return False


def move_away_and_back(
    system: System, ledger: Ledger, victim: Leasekeeper, other: Leasekeeper, ran: int
) -> Leasekeeper:
    """Kill -9 ``victim``; once its session expires its partitions move to ``other``;
    then restart it on the same state dir and instance id, and partitions move back:
    two moves in a row under load. Returns the restarted leasekeeper."""
    ledger.add(leasekeeper_fault(victim, ran))
    wait_until(lambda: ready_owned(other, system) == PARTITIONS, 60, "the partitions to move over")
    ledger.add(move_back_fault(other, len(system.runs())))
    (restarted,) = started(system, system.new_leasekeeper("lk", SESSION))
    return restarted


def replace_busiest_worker(
    system: System, workers: list[WorkerProcess], leasekeepers: list[Leasekeeper], ran: int
) -> Fault:
    """Kill -9 the worker with the most jobs started and not yet acked, once one has any
    (a kill that finds work), and start another on its leasekeeper, as a supervisor would."""
    chosen: list[WorkerProcess] = []

    def busy() -> bool:
        running = system.in_flight()
        load = {running[w.process.pid]: w for w in workers if w.process is not None}
        chosen[:] = [load[max(load)]]
        return max(load) > 0

    wait_until(busy, 30, "a worker with jobs in flight", step=0.02)
    fault = worker_fault(system, chosen[0], ran)
    system.add_worker(next(lk for lk in leasekeepers if lk.target == chosen[0].target), 8)
    return fault


def in_sync(system: System) -> bool:
    """Every replica of the queue's ready partitions and of the group's offsets is in sync
    again: the restarted broker has caught up, the cluster is whole."""
    admin = make_admin(system.kafka)
    topics = admin.list_topics(timeout=10).topics
    watched = [topics[system.topics.ready], topics["__consumer_offsets"]]
    return all(
        len(p.isrs) == len(p.replicas) for topic in watched for p in topic.partitions.values()
    )


def coordinator_index(cluster: LocalKafka, system: System) -> int:
    """The index of the broker that coordinates the leasekeepers' group: killing it is
    the worst case, as commits fail until another broker has loaded the group."""
    group = system.topics.consumer_group
    admin = make_admin(system.kafka)  # kept: a collected client never answers its futures
    described = admin.describe_consumer_groups([group])[group].result(30)
    return next(i for i, n in enumerate(cluster.nodes) if n.node_id == described.coordinator.id)


def replication(system: System) -> set[int]:
    """The replica counts of the ready topic's partitions, once the broker that answers
    knows all of them: a broker learns a new topic's partitions from the controller
    a moment after the topic is created, and until then lists none of them."""
    topic, admin = system.topics.ready, make_admin(system.kafka)

    def partitions() -> dict[int, object]:
        metadata = admin.list_topics(topic, timeout=10).topics.get(topic)
        return {} if metadata is None or metadata.error else dict(metadata.partitions)

    wait_until(lambda: len(partitions()) == PARTITIONS, 30, f"the metadata of {topic}")
    metadata = admin.list_topics(topic, timeout=10).topics[topic]
    return {len(p.replicas) for p in metadata.partitions.values()}


@pytest.mark.slow
@pytest.mark.timeout(480)  # a 3-broker cluster starts, and 15,000 jobs run, on 2 cores
def test_kill_9_of_a_broker_a_leasekeeper_and_a_worker_loses_nothing_bounded_duplicates(
    kafka_cluster3: LocalKafka, cluster_system: System
) -> None:
    system, ledger = cluster_system, Ledger()
    assert replication(system) == {3}
    first, second = started(
        system, system.new_leasekeeper("lk", SESSION), system.new_leasekeeper("lk2", SESSION)
    )
    wait_until(
        lambda: ready_owned(first, system) + ready_owned(second, system) == PARTITIONS,
        60,
        "the partitions to be split between the two leasekeepers",
    )
    system.leasekeeper = first
    workers = [system.add_worker(lk, concurrency=8) for lk in (first, first, second)]
    feeder = Feeder(system, JOBS)
    feeder.start()

    ran = wait_runs(system, feeder, LEASEKEEPER_AT)
    first = system.leasekeeper = move_away_and_back(system, ledger, first, second, ran)

    ran = wait_runs(system, feeder, len(system.runs()) + BETWEEN_FAULTS)
    ledger.add(replace_busiest_worker(system, workers, [first, second], ran))

    victim = coordinator_index(kafka_cluster3, system)
    ran = wait_runs(system, feeder, len(system.runs()) + BETWEEN_FAULTS)
    ledger.add(broker_fault(kafka_cluster3, victim, [first, second], ran, MAX_UNCOMMITTED))
    ran = wait_runs(system, feeder, ran + AFTER_BROKER_KILL // 2)  # the queue moves on without it
    # A leasekeeper restarted while a broker is down (its address still in the
    # bootstrap list, leaders moving) must come up and take its partitions back.
    ledger.add(leasekeeper_fault(second, ran))
    second = system.new_leasekeeper("lk2", SESSION)
    system.leasekeepers.append(second)
    second.start()
    # It must come up and join; which partitions it gets is the group's choice
    # (its session may have expired while it was down, so they may all stay away).
    wait_until(lambda: joined(second), 90, "the restarted leasekeeper to join the group")
    wait_runs(system, feeder, len(system.runs()) + AFTER_BROKER_KILL // 2)
    feeder.stopping.set()  # every fault landed under load: enqueue no more than JOBS now
    kafka_cluster3.restart_broker(victim)
    wait_until(lambda: in_sync(system), 120, "the restarted broker to catch up", step=0.5)

    enqueued = set(feeder.finish())
    try:
        wait_until(lambda: all_finished(system, enqueued), 150, "every job to finish", step=1)
    finally:
        report(system, ledger, enqueued, f"broker {victim + 1}")


def report(system: System, ledger: Ledger, enqueued: set[str], broker: str) -> None:
    """Print the figures with the bound, then assert: nothing lost, duplicates bounded."""
    lost = enqueued - finished(system, enqueued)
    duplicates = extra_starts(system)
    print(f"broker chaos: {len(enqueued)} jobs, kills {ledger.kinds()} ({broker})")
    for fault in ledger.faults:
        print(f"  {fault}")
    print(f"  {len(lost)} lost, {duplicates} duplicate starts, bound {ledger.bound}")
    if lost or duplicates > ledger.bound:
        for leasekeeper in {lk.log: lk for lk in system.leasekeepers}.values():
            lines = [ln for ln in leasekeeper.log.read_text().splitlines() if " DEBUG " not in ln]
            print(f"--- {leasekeeper.log.name} ---", *(ln[:300] for ln in lines[-60:]), sep="\n")
    assert not lost, f"{len(lost)} jobs lost, e.g. {sorted(lost)[:5]}"
    assert duplicates <= ledger.bound, (
        f"{duplicates} duplicate starts over the bound {ledger.bound}; "
        f"(attempt, pid) per start: {twice_started(system)[:20]}"
    )
