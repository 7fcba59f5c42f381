"""``producer outbox dead``: what it refuses before touching a database."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from producer.cli import main as producer_cli


@pytest.mark.parametrize("command", ["retry", "drop"])
@pytest.mark.parametrize(
    ("args", "problem"),
    [
        ([], "give the dead row ids (see producer outbox dead list) or --all"),
        (["3", "--all"], "or --all, not both"),
    ],
)
def test_retry_and_drop_need_ids_or_all(command: str, args: list[str], problem: str) -> None:
    done = CliRunner().invoke(producer_cli, ["outbox", "dead", command, "--dsn", "x", *args])
    assert done.exit_code == 2 and problem in done.output
    assert "Traceback" not in done.output


def test_an_unreachable_database_is_one_line_without_its_password() -> None:
    dsn = "host=127.0.0.1 port=1 dbname=shop user=app password=hunter2 connect_timeout=5"
    done = CliRunner().invoke(producer_cli, ["outbox", "dead", "list", "--dsn", dsn])
    assert done.exit_code == 1 and "Traceback" not in done.output
    assert "cannot use PostgreSQL at 127.0.0.1:1/shop (from --dsn)" in done.output
    assert "hunter2" not in done.output


def test_the_reason_filter_takes_only_known_reasons() -> None:
    done = CliRunner().invoke(
        producer_cli, ["outbox", "dead", "list", "--dsn", "x", "--reason", "too big"]
    )
    assert done.exit_code == 2 and "'too large'" in done.output
