"""docker-compose.yml parses and defines every service the README names."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return data


def readme_services() -> set[str]:
    section = ROOT.joinpath("README.md").read_text().split("## With Docker", 1)[1]
    section = section.split("\n## ", 1)[0]
    return set(re.findall(r"`([a-z0-9-]+)`", section)) - {"apache/kafka", "demo"}


def test_every_service_the_readme_names_is_defined() -> None:
    named = readme_services()
    assert {"leasekeeper", "workers", "demo-producer", "topic-init"} <= named
    assert named <= set(compose()["services"])


def test_the_cluster_is_three_kraft_brokers_and_the_app_waits_for_topics() -> None:
    services = compose()["services"]
    brokers = [name for name in services if name.startswith("kafka-")]
    assert len(brokers) == 3
    for name in brokers:
        env = services[name]["environment"]
        assert env["KAFKA_PROCESS_ROLES"] == "broker,controller"
        assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"].count("@") == 3
        assert services[name]["image"].startswith("apache/kafka:")
    assert services["leasekeeper"]["depends_on"]["topic-init"]["condition"] == (
        "service_completed_successfully"
    )
    assert services["workers"]["command"][:3] == ["workers", "run", "examples.demo_app:app"]
