"""A leasekeeper refuses a state dir of a deleted and recreated topic (real Kafka)."""

from __future__ import annotations

from jobcore.kafka import make_admin
from leasekeeper.core.store import LeaseStore
from leasekeeper.core.store_values import Resolution
from producer import ensure_queue_topics
from tests.system import PARTITIONS, System, wait_until


def recreate_ready_topic(system: System) -> None:
    """Delete the queue topic and create it again: same name, new topic id, offsets from 0."""
    admin = make_admin(system.kafka)
    topic = system.topics.ready
    for future in admin.delete_topics([topic], operation_timeout=30).values():
        future.result(timeout=30)

    def gone() -> bool:
        return topic not in admin.list_topics(timeout=10).topics

    wait_until(gone, 30, f"{topic} to be deleted")
    ensure_queue_topics(system.kafka, system.queue, partitions=PARTITIONS)


def leave_acks_beyond_the_commit(system: System, offsets: int) -> None:
    """What a leasekeeper killed between its acks and their commit leaves in its store."""
    store = LeaseStore(system.leasekeeper.state_dir)
    try:
        batch = store.batch()
        for partition in range(PARTITIONS):
            for offset in range(offsets):
                batch.resolve(system.topics.ready, partition, offset, Resolution.ACKED)
        store.write(batch)
    finally:
        store.close()


def test_a_state_dir_of_a_recreated_topic_is_refused_and_reset_state_runs_the_new_jobs(
    system: System,
) -> None:
    system.leasekeeper.start().wait_assigned(PARTITIONS)
    system.leasekeeper.stop()
    leave_acks_beyond_the_commit(system, offsets=20)
    recreate_ready_topic(system)
    ids = system.enqueue(12)

    refused = system.new_leasekeeper()
    system.leasekeepers.append(refused)
    refused.start()
    assert refused.process is not None
    assert refused.process.wait(timeout=60) == 2
    output = refused.log.read_text()
    assert f"state dir {refused.state_dir} belongs to another cluster, group or topic" in output
    assert f"topic {system.topics.ready} id recorded" in output
    assert "--reset-state" in output
    assert "Traceback" not in output

    system.leasekeeper = system.new_leasekeeper(extra=["--reset-state"])
    system.leasekeepers.append(system.leasekeeper)
    system.start(workers=1)
    wait_until(lambda: set(system.runs()) >= set(ids), 60, "every new job to run")
    system.wait_caught_up()
