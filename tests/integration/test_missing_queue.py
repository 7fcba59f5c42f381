"""A missing queue is a setup mistake: exit 2 from ``enqueue`` and ``cancel``, as from
``serve`` (``test_kafka_resilience``) and as the README's table of exit codes says,
so a script can tell it from Kafka failing (1) or not answering (3)."""

from __future__ import annotations

from click.testing import CliRunner

from jobcore.cli_errors import ExitCode
from jobcore.kafka import KafkaSettings
from producer.cli import main


def test_enqueue_to_a_missing_queue_exits_2_naming_the_fix(
    kafka: KafkaSettings, unique: str
) -> None:
    queue = f"missing{unique}"
    args = ["enqueue", "--queue", queue, "noop", "--tenant", "t", "--payload", "{}"]
    result = CliRunner().invoke(main, [*args, "--bootstrap", kafka.bootstrap])
    assert result.exit_code == ExitCode.SETUP == 2, result.output
    assert f"queue '{queue}' has no topic jobs.{queue}" in result.output
    assert "producer create-queue" in result.output


def test_cancel_on_a_missing_queue_exits_2(kafka: KafkaSettings, unique: str) -> None:
    queue = f"missing{unique}"
    result = CliRunner().invoke(main, ["cancel", "--queue", queue, "some-job",
                                       "--bootstrap", kafka.bootstrap])  # fmt: skip
    assert result.exit_code == 2, result.output
    assert "producer create-queue" in result.output
