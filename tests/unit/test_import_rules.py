"""The package boundaries, read from the source with ``ast`` (nothing is imported).

- ``leasekeeper`` does not import ``producer``: what both need (topic creation) is in
  ``jobcore``.
- ``jobcore`` (shared by everything) imports no other project package but ``schemas``.
- No runtime package imports ``devtools`` at module level: a command that needs it
  (``leasekeeper dev kafka``) imports it when run.
- Only the ``jobcore/kafka/`` package imports the Kafka client (``confluent_kafka``),
  and only ``jobcore/schema_registry.py`` its Schema Registry client; both from public
  modules.
- The commands load the Schema Registry client only in registry mode.
- No runtime package imports ``memkafka`` (the in-memory Kafka for tests), even
  inside a function; ``memkafka`` imports no Kafka client: it takes the value types
  (``KafkaError``, ``TopicPartition``) from ``jobcore.kafka``.
- Nothing of the runtime nor ``memkafka`` imports ``jobtesting`` (the testing package
  for users' tests), even inside a function; ``jobtesting`` may import them all.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ("jobcore", "leasekeeper", "producer", "workers", "schemas")
KAFKA_ADAPTER = "jobcore/kafka"  # a package: any of its modules may import the client
REGISTRY_ADAPTER = "jobcore/schema_registry.py"


@dataclass(frozen=True, kw_only=True)
class Import:
    source: str  # a path relative to the repository root
    line: int
    module: str
    top_level: bool  # at module level, not inside a function

    def __str__(self) -> str:
        return f"{self.source}:{self.line} imports {self.module}"


def imports_of(path: Path) -> Iterator[Import]:
    tree = ast.parse(path.read_text(), filename=str(path))
    source = path.relative_to(ROOT).as_posix()
    nested = {
        id(node)
        for func in ast.walk(tree)
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef)
        for node in ast.walk(func)
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        for name in names:
            yield Import(
                source=source, line=node.lineno, module=name, top_level=id(node) not in nested
            )


def imports_in(package: str) -> list[Import]:
    return [i for path in sorted((ROOT / package).rglob("*.py")) for i in imports_of(path)]


def _from(imp: Import, package: str) -> bool:
    return imp.module == package or imp.module.startswith(package + ".")


@pytest.mark.parametrize(
    ("package", "forbidden"),
    [
        ("leasekeeper", ("producer", "devtools")),
        ("jobcore", ("leasekeeper", "producer", "workers", "devtools")),
        ("producer", ("leasekeeper", "workers", "devtools")),
        ("workers", ("leasekeeper", "producer", "devtools")),
        ("schemas", ("leasekeeper", "producer", "workers", "jobcore", "devtools")),
    ],
)
def test_runtime_packages_keep_their_boundaries(package: str, forbidden: tuple[str, ...]) -> None:
    """Module-level imports only: a CLI command may import development tooling when run."""
    wrong = [
        str(i)
        for i in imports_in(package)
        if i.top_level and any(_from(i, other) for other in forbidden)
    ]
    assert wrong == []


def test_leasekeeper_never_imports_the_producer_even_inside_functions() -> None:
    assert [str(i) for i in imports_in("leasekeeper") if _from(i, "producer")] == []


def test_the_memory_cluster_stays_out_of_the_runtime() -> None:
    """Tests install it behind ``jobcore.kafka``'s factories; the runtime cannot tell.
    It imports no Kafka client and no runtime package but ``jobcore``."""
    uses = [str(i) for package in RUNTIME for i in imports_in(package) if _from(i, "memkafka")]
    assert uses == []
    others = ("confluent_kafka", "leasekeeper", "producer", "workers", "devtools")
    wrong = [str(i) for i in imports_in("memkafka") if any(_from(i, o) for o in others)]
    assert wrong == []
    assert any(_from(i, "jobcore.kafka") for i in imports_in("memkafka"))


def test_the_testing_package_stays_out_of_the_runtime() -> None:
    """It runs the leasekeeper and the worker in one process, which no runtime package
    may do: it sits above them all."""
    uses = [
        str(i)
        for package in (*RUNTIME, "memkafka")
        for i in imports_in(package)
        if _from(i, "jobtesting")
    ]
    assert uses == []
    assert {"leasekeeper", "workers", "producer", "memkafka"} <= {
        i.module.split(".")[0] for i in imports_in("jobtesting")
    }


def test_only_the_adapters_import_confluent_kafka() -> None:
    registry = "confluent_kafka.schema_registry"
    uses = [i for package in RUNTIME for i in imports_in(package) if _from(i, "confluent_kafka")]
    kafka = {i.source for i in uses if not _from(i, registry)}
    assert kafka, "the Kafka adapter imports confluent_kafka"
    assert {s for s in kafka if not s.startswith(KAFKA_ADAPTER + "/")} == set()
    assert {i.source for i in uses if _from(i, registry)} <= {REGISTRY_ADAPTER}


def test_confluent_kafka_names_come_from_public_modules() -> None:
    """Not from ``_config``, ``_resource`` or ``cimpl``: those move between releases."""
    private = [
        str(i)
        for package in RUNTIME
        for i in imports_in(package)
        if _from(i, "confluent_kafka")
        and any(part.startswith("_") or part == "cimpl" for part in i.module.split("."))
    ]
    assert private == []


def test_the_rules_read_real_imports() -> None:
    """Guards the reader itself: a rule over no imports would pass vacuously."""
    adapter = [i.module for i in imports_in(KAFKA_ADAPTER)]
    assert "confluent_kafka.admin" in adapter
    nested = [i for i in imports_in("leasekeeper") if i.module.startswith("devtools")]
    assert nested and not any(i.top_level for i in nested)


def test_the_runtime_loads_without_the_development_package() -> None:
    """Importing every console script's module leaves ``devtools`` unloaded."""
    code = (
        "import sys, leasekeeper.ops.cli, producer.cli, workers.cli\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] == 'devtools')\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_the_commands_load_the_registry_client_only_in_registry_mode() -> None:
    """The Schema Registry client (and the HTTP and auth libraries it brings) costs
    a quarter of a second of CPU to import: every worker process and CLI call paid
    it in file mode. It is imported when a registry is first used."""
    code = (
        "import sys, leasekeeper.ops.cli, producer.cli, workers.cli\n"
        "assert 'confluent_kafka.schema_registry' not in sys.modules\n"
        "from jobcore.schema_registry import ConfluentRegistryClient, RegistrySettings\n"
        "ConfluentRegistryClient(RegistrySettings(url='http://127.0.0.1:9')).close()\n"
        "assert 'confluent_kafka.schema_registry' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)


def test_leasekeeper_dev_kafka_still_works() -> None:
    from leasekeeper.ops.cli import main

    result = CliRunner().invoke(main, ["dev", "kafka", "--help"])
    assert result.exit_code == 0, result.output
    assert all(command in result.output for command in ("fetch", "start", "stop", "status"))


def test_leasekeeper_dev_without_the_development_tools_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An image built without ``devtools/`` (the Dockerfile copies the runtime only)."""
    from leasekeeper.ops.cli import main

    for name in [m for m in sys.modules if m.split(".")[0] == "devtools"]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "devtools", None)
    result = CliRunner().invoke(main, ["dev", "kafka", "status"])  # harmless if it ran
    assert result.exit_code == 1
    assert "needs the development tools" in result.output
    assert "Traceback" not in result.output
