"""The example alert rules (issue 18, part 3): every expression names metrics a leasekeeper
really exports, and ``promtool`` accepts the rules and passes their unit tests.

promtool comes from Debian's ``prometheus`` package (``make promtool``); without it
the promtool tests are skipped, except in CI, where ``.ci/run`` installs it and they
must run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from contextlib import nullcontext
from pathlib import Path
from typing import Any, cast

import pytest
import yaml
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from leasekeeper.fairness.ready_targets import DEFAULT_READY_TARGETS
from leasekeeper.views.metrics import COUNTERS, EngineCollector
from producer.outbox import metrics as outbox_metrics
from producer.outbox.relay import OutboxRelay, OutboxStats

ALERTS = Path(__file__).resolve().parents[2] / "docs" / "alerts"
RULES = ALERTS / "leasekeeper-rules.yml"
RULE_TESTS = ALERTS / "leasekeeper-rules.test.yml"
# Exported by the circuit breaker (docs/breaker.md): 0 closed, 1 half-open, 2 open.
BREAKER_STATE = "leasekeeper_breaker_state"
METRIC = re.compile(r"\bleasekeeper_[a-z_]+\b")


def full_snapshot() -> dict[str, Any]:
    """A snapshot with every section a leasekeeper sends, so that a scrape has every
    family it can export."""
    limiter = {"kind": "type", "key": "sms", "limit": "5/s", "rate_per_s": 5.0, "tokens": 1.0,
               "waiting": 3, "parked": 0, "dispatched": 9}  # fmt: skip
    return {
        "ready": 1,
        "partitions": [
            {
                "topic": "jobs.e",
                "partition": 0,
                "committed": 5,
                "highest_fetched": 9,
                "unresolved_count": 2,
                "leases": [],
            }
        ],
        "counters": dict.fromkeys(COUNTERS, 0),
        "retry_budget": {"allowed_in_window": 1, "retries_in_window": 0, "retries_deferred": 0},
        "delayed": 0,
        "held_tiers": {},
        "outbox": {
            "pending": 0,
            "in_flight": 0,
            "counters": {},
            "blocked": [{"topic": "jobs.e", "partition": 0}],
        },
        "control": {"cancellations": 0, "dedupe_claims": 0, "pruned": 0, "catch_up_s": 0.1},
        "classes": [{"name": "default", "ready": 1, "oldest_ready_age_ms": 10}],
        "tenants": [{"tenant": "t", "ready": 1, "in_flight": 0}],
        "limits": {"share": 1.0, "limiters": [limiter]},
        "dead_letters": {"depth": 1, "newest_ms": 1, "checked_ms": 2},
        "breakers": [{"type": "send_receipt", "state": "open", "failure_rate": 1.0, "parked": 3}],
    }


def exported() -> set[str]:
    registry = CollectorRegistry()
    registry.register(EngineCollector(full_snapshot, "e", DEFAULT_READY_TARGETS))
    text = generate_latest(registry).decode()
    return {s.name for f in text_string_to_metric_families(text) for s in f.samples}


def rules() -> list[dict[str, Any]]:
    data = yaml.safe_load(RULES.read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def test_every_rule_names_metrics_the_leasekeeper_exports() -> None:
    known = exported()
    for rule in rules():
        names = set(METRIC.findall(rule["expr"]))
        assert names, f"{rule['alert']} reads no leasekeeper metric"
        assert names <= known, f"{rule['alert']} reads unknown metrics {names - known}"


def test_the_issue_s_alerts_are_all_there_with_severity_and_summary() -> None:
    found = {rule["alert"]: rule for rule in rules()}
    wanted = {
        "LeasekeeperDeadLettersGrowing": "leasekeeper_dlq_depth",
        "LeasekeeperBreakerOpen": BREAKER_STATE,
        "LeasekeeperReadyJobsLate": "leasekeeper_class_ready_target_seconds",
        "LeasekeeperCommitLag": "leasekeeper_commit_gap",
    }
    for alert, metric in wanted.items():
        assert metric in found[alert]["expr"]
    assert found["LeasekeeperBreakerOpen"]["for"] == "5m"
    assert "== 2" in found["LeasekeeperBreakerOpen"]["expr"], "2 is open"
    for rule in found.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"]


def test_the_operations_doc_ships_the_same_rules() -> None:
    doc = (ALERTS.parent / "operations.md").read_text()
    assert f"```yaml\n{RULES.read_text()}```" in doc, "operations.md quotes the rules file"
    for rule in rules():
        assert f"`{rule['alert']}`" in doc, f"{rule['alert']} is not explained in operations.md"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("promtool is missing in CI: `make promtool` installs it", pytrace=False)
        pytest.skip("promtool not installed (`make promtool` installs Debian's prometheus)")
    return found


@pytest.mark.parametrize(
    "command", [["check", "rules", RULES.name], ["test", "rules", RULE_TESTS.name]]
)
def test_promtool_accepts_the_rules_and_their_tests(command: list[str]) -> None:
    done = subprocess.run([promtool(), *command], cwd=ALERTS, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


OUTBOX_RULES = ALERTS / "outbox-rules.yml"
OUTBOX_RULE_TESTS = ALERTS / "outbox-rules.test.yml"


class _StatsRelay:
    """What the relay's collector reads: fixed stats, no database."""

    def stats(self, conn: object) -> OutboxStats:
        return OutboxStats(active=True, waiting=4, lag_s=2.5, relayed=9, dead=3)


def outbox_exported(monkeypatch: pytest.MonkeyPatch) -> dict[str, float]:
    monkeypatch.setattr(outbox_metrics.psycopg, "connect", lambda *a, **k: nullcontext())
    registry = CollectorRegistry()
    registry.register(outbox_metrics.RelayCollector(cast(OutboxRelay, _StatsRelay()), "dsn"))
    text = generate_latest(registry).decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def test_the_outbox_rule_reads_the_dead_rows_the_relay_exports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    samples = outbox_exported(monkeypatch)
    assert samples["outbox_dead_rows"] == 3
    data = yaml.safe_load(OUTBOX_RULES.read_text())
    (rule,) = [rule for group in data["groups"] for rule in group["rules"]]
    assert rule["alert"] == "OutboxDeadRows" and rule["labels"]["severity"] == "warning"
    names = set(re.findall(r"\boutbox_[a-z_]+\b", rule["expr"]))
    assert names == {"outbox_dead_rows"} and names <= set(samples)
    doc = (ALERTS.parent / "outbox.md").read_text()
    assert f"```yaml\n{OUTBOX_RULES.read_text()}```" in doc, "outbox.md quotes the rules file"


@pytest.mark.parametrize(
    "command", [["check", "rules", OUTBOX_RULES.name], ["test", "rules", OUTBOX_RULE_TESTS.name]]
)
def test_promtool_accepts_the_outbox_rule_and_its_tests(command: list[str]) -> None:
    done = subprocess.run([promtool(), *command], cwd=ALERTS, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
