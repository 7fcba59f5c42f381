"""Priority class names, weights and topics (issue 10, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from jobcore.priority import PriorityClasses
from jobcore.topics import QueueTopics
from leasekeeper.ops import cli as leasekeeper_cli
from producer import cli as producer_cli


def test_classes_default_to_critical_default_bulk_at_6_3_1() -> None:
    classes = PriorityClasses.from_env({})
    assert dict(classes.weights) == {"critical": 6, "default": 3, "bulk": 1}
    assert PriorityClasses.from_env({"JOBS_PRIORITY_CLASSES": "urgent=5,default=1"}).names == (
        "urgent",
        "default",
    )


def test_an_unknown_class_is_refused_with_the_known_names() -> None:
    with pytest.raises(ValueError, match="unknown priority class 'urgent': use one of critical"):
        PriorityClasses().check("urgent")


@pytest.mark.parametrize(
    ("text", "problem"),
    [("critical=6", "must include 'default'"), ("default", "not NAME=WEIGHT"),
     ("default=0", "weight must be >= 1"), ("default=3,Bad=1", "use lower-case")],
)  # fmt: skip
def test_a_bad_setting_names_the_setting_and_the_part(text: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem) as caught:
        PriorityClasses.parse(text)
    assert str(caught.value).startswith("JOBS_PRIORITY_CLASSES: ")


def test_each_class_has_its_own_topic_under_the_prefix() -> None:
    topics = QueueTopics(queue="emails", prefix="acme")
    assert topics.classes(("critical", "default", "bulk")) == (
        "acme.emails",
        "acme.emails.critical",
        "acme.emails.bulk",
    )
    assert topics.overflow == "acme.emails.overflow"


@pytest.mark.parametrize("name", ["emails.critical", "emails.bulk", "a.overflow", "x.retry.1s"])
def test_a_queue_name_that_would_collide_with_a_class_topic_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="reserved"):
        QueueTopics(queue=name)
    assert QueueTopics(queue="critical").ready == "jobs.critical", "a plain name stays allowed"


def test_enqueue_refuses_an_unknown_class_in_one_line_before_connecting() -> None:
    result = CliRunner().invoke(
        producer_cli.main,
        ["enqueue", "--queue", "q", "noop", "--tenant", "t", "--payload", "{}",
         "--priority", "urgent", "--bootstrap", "127.0.0.1:1"],
    )  # fmt: skip
    assert result.exit_code == 1, result.output
    assert "unknown priority class 'urgent': use one of critical, default, bulk" in result.output
    assert "Traceback" not in result.output


def test_serve_refuses_a_bad_tenant_flag_naming_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        leasekeeper_cli.main,
        ["serve", "--queue", "q", "--state-dir", str(tmp_path), "--tenant-weight", "acme"],
    )
    assert result.exit_code == 1, result.output
    assert "--tenant-weight 'acme': expected TENANT=N with N > 0" in result.output
