"""Obtain the jars of a real Apache Kafka (KRaft) broker without Docker.

Order of preference: ``KAFKA_HOME`` (an unpacked Apache release), then the jars
resolved from Maven Central by the ``pom.xml`` beside this module (cached under
the user's cache directory so a second run downloads nothing), then the Apache
release tarball for machines without Maven.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from devtools.dev_cluster import cache_root

DEFAULT_KAFKA_VERSION = "4.4.0"
SCALA_VERSION = "2.13"
POM = Path(__file__).with_name("pom.xml")
TARBALL_URL = "https://archive.apache.org/dist/kafka/{v}/kafka_{s}-{v}.tgz"
COMPLETE_MARKER = ".complete"


class KafkaUnavailable(RuntimeError):
    """Kafka could not be obtained or started; the message says why."""


@dataclass(frozen=True, kw_only=True)
class KafkaDistribution:
    """Where the broker's jars are and which ``java`` runs them."""

    version: str
    libs: Path
    java: str
    source: str

    @property
    def classpath(self) -> str:
        return str(self.libs / "*")


def kafka_version() -> str:
    return os.environ.get("KAFKA_VERSION", DEFAULT_KAFKA_VERSION)


def find_java() -> str:
    """The ``java`` to run the broker: ``JAVA_HOME`` first, then ``PATH``."""
    java_home = os.environ.get("JAVA_HOME")
    if java_home and (Path(java_home) / "bin" / "java").exists():
        return str(Path(java_home) / "bin" / "java")
    found = shutil.which("java")
    if not found:
        raise KafkaUnavailable("no java found: install a JDK 17+ or set JAVA_HOME")
    return found


def obtain(version: str | None = None, home: Path | None = None) -> KafkaDistribution:
    """Return a usable distribution, downloading it once if needed. ``version`` and
    ``home`` are the dev command's flags; a caller without them (tests, benchmarks)
    gets ``KAFKA_VERSION`` and ``KAFKA_HOME``."""
    version = version or kafka_version()
    java = find_java()
    home = home or (Path(os.environ["KAFKA_HOME"]) if os.environ.get("KAFKA_HOME") else None)
    if home:
        libs = Path(home) / "libs"
        if not libs.is_dir():
            raise KafkaUnavailable(f"KAFKA_HOME={home} has no libs/ directory")
        return KafkaDistribution(version="KAFKA_HOME", libs=libs, java=java, source="KAFKA_HOME")
    target = cache_root() / f"kafka-{version}"
    libs = target / "libs"
    if (target / COMPLETE_MARKER).exists():
        return KafkaDistribution(version=version, libs=libs, java=java, source="cache")
    target.mkdir(parents=True, exist_ok=True)
    if shutil.which("mvn"):
        _fetch_with_maven(version, libs)
        source = "maven"
    else:
        _fetch_tarball(version, libs)
        source = "tarball"
    (target / COMPLETE_MARKER).write_text(source + "\n")
    return KafkaDistribution(version=version, libs=libs, java=java, source=source)


def _fetch_with_maven(version: str, libs: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
    cmd = [
        "mvn",
        "-q",
        "-B",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-Dkafka.version={version}",
        "-DincludeScope=runtime",
        f"-DoutputDirectory={staging}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        tail = (result.stdout + result.stderr)[-3000:]
        raise KafkaUnavailable(f"mvn could not resolve Kafka {version}:\n{tail}")
    _replace_dir(staging, libs)


def _fetch_tarball(version: str, libs: Path) -> None:
    url = TARBALL_URL.format(v=version, s=SCALA_VERSION)
    with tempfile.TemporaryDirectory(dir=libs.parent) as tmp:
        archive = Path(tmp) / "kafka.tgz"
        try:
            urllib.request.urlretrieve(url, archive)
        except OSError as exc:
            raise KafkaUnavailable(f"no mvn, and downloading {url} failed: {exc}") from exc
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        extracted = Path(tmp) / f"kafka_{SCALA_VERSION}-{version}" / "libs"
        staging = Path(tempfile.mkdtemp(prefix="libs-", dir=libs.parent))
        shutil.rmtree(staging)
        shutil.move(str(extracted), staging)
        _replace_dir(staging, libs)


def _replace_dir(staging: Path, libs: Path) -> None:
    if libs.exists():
        shutil.rmtree(libs)
    staging.rename(libs)
