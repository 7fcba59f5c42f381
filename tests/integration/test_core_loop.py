"""The job path end to end against real Kafka: producer → leasekeeper → worker processes."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time

import grpc

from jobcore.kafka import (
    KafkaException,
    committed_offsets,
    make_consumer,
    make_producer,
)
from schemas import worker_pb2 as pb
from schemas import worker_pb2_grpc as pb_grpc
from schemas.codec import EnvelopeCodec, SchemaRegistry
from tests.system import BIN, PARTITIONS, System, wait_until


class CommitSampler(threading.Thread):
    """Samples committed offsets, then the jobs that have run, every 50 ms."""

    def __init__(self, system: System) -> None:
        super().__init__(daemon=True)
        self.system = system
        self.samples: list[tuple[dict[int, int], set[str]]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        consumer = make_consumer(self.system.kafka, self.system.topics.consumer_group)
        try:
            while not self.halt.is_set():
                try:
                    committed = committed_offsets(
                        consumer, self.system.topics.ready, range(PARTITIONS)
                    )
                except KafkaException:  # coordinator moving or loading: sample again
                    self.halt.wait(0.05)
                    continue
                ran = set(self.system.runs())  # read after the commit was observed
                self.samples.append((committed, ran))
                self.halt.wait(0.05)
        finally:
            consumer.close()

    def violations(self, jobs: dict[tuple[int, int], str]) -> list[str]:
        found = []
        for committed, ran in self.samples:
            for partition, offset in committed.items():
                for below in range(max(offset, 0)):
                    job_id = jobs[(partition, below)]
                    if job_id not in ran:
                        found.append(f"p{partition} committed {offset} but {below} not run")
        return found


def test_every_job_runs_exactly_once_and_commits_never_pass_an_unresolved_job(
    system: System,
) -> None:
    system.start(workers=2)
    sampler = CommitSampler(system)
    sampler.start()
    ids = system.enqueue(10_000)

    wait_until(lambda: sum(system.runs().values()) >= len(ids), 240, "10,000 runs", step=0.25)
    system.wait_caught_up()
    sampler.halt.set()
    sampler.join()

    runs = system.runs()
    assert set(runs) == set(ids)
    assert [job for job, count in runs.items() if count != 1] == []
    assert len(sampler.samples) > 20
    moving = {tuple(sorted(c.items())) for c, _ in sampler.samples}
    assert len(moving) > 3, "commits did not advance while jobs ran"
    assert sampler.violations(system.job_at_offsets()) == []


def test_kill_9_of_the_leasekeeper_reruns_no_acked_job_and_loses_none(system: System) -> None:
    system.configure(lease_s=5.0)  # what nobody acks after the crash is back within 5 s
    system.start(workers=2)
    ids = system.enqueue(6_000)
    wait_until(lambda: sum(system.runs().values()) >= 2_000, 120, "a third of the runs")

    system.leasekeeper.kill()
    acked_before_restart = system.acks()
    system.restart_leasekeeper()

    wait_until(lambda: set(system.runs()) >= set(ids), 240, "every job to run", step=0.25)
    system.wait_caught_up()
    runs = system.runs()
    assert len(acked_before_restart) >= 1_000
    rerun_after_ack = [job for job in acked_before_restart if runs[job] != 1]
    assert rerun_after_ack == []
    assert set(runs) == set(ids)
    duplicates = sum(count - 1 for count in runs.values())
    print(f"kill -9 of the leasekeeper: {len(ids)} jobs, {duplicates} ran twice")


def test_calls_with_a_stale_lease_token_are_rejected_and_counted(system: System) -> None:
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    system.enqueue(1)
    with grpc.insecure_channel(system.leasekeeper.target) as channel:
        stub = pb_grpc.LeaseKeeperStub(channel)
        (job,) = stub.Claim(pb.ClaimRequest(worker_id="t", max_jobs=1, wait_ms=10_000)).jobs
        stale = pb.LeaseRef(lease_id=job.lease_id, lease_token="not-the-token")
        heartbeat = stub.Heartbeat(pb.HeartbeatRequest(worker_id="t", leases=[stale]))
        ack = pb.Settlement(lease=stale, outcome=pb.ACK)
        settled = stub.Settle(pb.SettleRequest(worker_id="t", settlements=[ack]))
        assert not heartbeat.results[0].ok and heartbeat.results[0].reason == "stale token"
        assert not settled.results[0].ok and settled.results[0].reason == "stale token"

        current = pb.LeaseRef(lease_id=job.lease_id, lease_token=job.lease_token)
        good = pb.Settlement(lease=current, outcome=pb.ACK)
        assert stub.Settle(pb.SettleRequest(worker_id="t", settlements=[good])).results[0].ok
        # The same ack again (its answer was lost): applied once, answered as applied.
        again = stub.Settle(pb.SettleRequest(worker_id="t", settlements=[good])).results[0]
        assert again.ok and again.reason == "already settled"
        # A zombie's ack after the settlement is still refused.
        late = stub.Settle(pb.SettleRequest(worker_id="t", settlements=[ack])).results[0]
        assert not late.ok
    snapshot = system.leasekeeper.snapshot()
    assert snapshot is not None
    assert snapshot["counters"]["stale_rejected"] == 3
    assert snapshot["counters"]["acked"] == 1
    assert snapshot["counters"]["acked"] == 1


def test_an_undecodable_record_goes_to_the_dlq_and_the_partition_keeps_moving(
    system: System,
) -> None:
    system.start(workers=1)
    producer = make_producer(system.kafka)
    producer.produce(system.topics.ready, key=b"tenant-0", value=b"\x00not avro at all")
    assert producer.flush(10) == 0
    ids = system.enqueue(30, tenants=1)  # same key: behind the garbage in its partition

    wait_until(lambda: set(system.runs()) >= set(ids), 60, "the jobs behind the garbage")
    system.wait_caught_up()

    codec = EnvelopeCodec(SchemaRegistry())
    consumer = make_consumer(system.kafka, f"dlq-reader-{system.queue}")
    consumer.subscribe([system.topics.dlq])
    letters = []
    deadline = time.monotonic() + 30
    while not letters and time.monotonic() < deadline:
        letters = [m for m in consumer.consume(10, timeout=1) if m.error() is None]
    consumer.close()
    assert len(letters) == 1
    letter = codec.decode_dead_letter(letters[0].value())
    assert letter.reason == "undecodable"
    assert letter.raw_value == b"\x00not avro at all"
    assert letter.detail  # the decode error, in words
    assert letter.source_topic == system.topics.ready


def test_a_full_window_pauses_fetching_until_workers_drain_it(system: System) -> None:
    # The pause alone: the overflow lane would copy each tenant's backlog aside, and
    # the deferral would read on past it, keeping offsets only (test_overflow.py and
    # test_flood_deferral.py bound the window then).
    system.leasekeeper.extra_args += ["--window-records", "100", "--overflow-share", "0",
                                      "--no-defer-floods"]  # fmt: skip
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    ids = system.enqueue(1_000)

    def fetched() -> int:
        snap = system.leasekeeper.snapshot()
        assert snap is not None
        return sum(
            p["highest_fetched"] + 1 for p in snap["partitions"] if p["highest_fetched"] >= 0
        )

    wait_until(lambda: fetched() >= 100, 30, "the window to fill")
    # No worker is running: the leasekeeper holds the window's 100 jobs, plus at most
    # each partition's share of it (a full window pauses only the partitions over
    # their share), and fetches no more.
    settled = [fetched() for _ in range(5) if not time.sleep(0.2)]
    assert max(settled) <= 200, settled
    snap = system.leasekeeper.snapshot()
    assert snap is not None and 100 <= snap["ready"] <= 200

    system.start(workers=1)  # leasekeeper already running: start() only adds workers
    wait_until(lambda: set(system.runs()) >= set(ids), 120, "the backlog to drain", step=0.25)


def test_inspect_shows_the_lease_in_flight_and_the_offset_holding_the_commit(
    system: System,
) -> None:
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    (job_id,) = system.enqueue(1)
    with grpc.insecure_channel(system.leasekeeper.target) as channel:
        stub = pb_grpc.LeaseKeeperStub(channel)
        (job,) = stub.Claim(pb.ClaimRequest(worker_id="w-1", max_jobs=1, wait_ms=10_000)).jobs

        shown = subprocess.run(
            [str(BIN / "leasekeeper"), "inspect", "--target", system.leasekeeper.target, "--json"],
            capture_output=True, text=True, check=True, timeout=30,
        )  # fmt: skip
        snapshot = json.loads(shown.stdout)
        (partition,) = [p for p in snapshot["partitions"] if p["leases"]]
        (lease,) = partition["leases"]
        assert lease["job_id"] == job_id and lease["worker"] == "w-1"
        assert (lease["type"], lease["tenant"], lease["attempt"]) == ("noop", "tenant-0", 1)
        offset = int(job.lease_id.rsplit("/", 1)[1])
        assert partition["unresolved"] == [offset]
        table = subprocess.run(
            [str(BIN / "leasekeeper"), "inspect", "--target", system.leasekeeper.target],
            capture_output=True, text=True, check=True, timeout=30,
            env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
        assert job_id in table.stdout and "leases in flight" in table.stdout
