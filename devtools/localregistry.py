"""A real Schema Registry without Docker: Apicurio Registry from Maven Central.

Registry mode is tested against a real registry, as Kafka is tested against a
real broker. Apicurio Registry serves the Confluent-compatible API at
``/apis/ccompat/v7``, runs from a tarball on Maven Central (fetched once with
``mvn``, checked against a pinned sha256, cached under the user's cache
directory) and needs Java 21+, found by :func:`find_java` while Kafka keeps its
own ``java``. ``python -m devtools.localregistry fetch`` downloads it ahead of a run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from devtools.dev_cluster import cache_root

__all__ = ["APICURIO_VERSION", "LocalRegistry", "RegistryUnavailable", "find_java", "obtain"]

APICURIO_VERSION = "3.3.3"
ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
SHA256 = "8bc6751c76d963734224b01d5e7f84ccb3cb61c87d3bd77c36c35f10a5cbed63"
CCOMPAT = "/apis/ccompat/v7"
MIN_JAVA = 21
_JVM_DIRS = ("/usr/lib/jvm", "/usr/lib64/jvm", "/Library/Java/JavaVirtualMachines")


class RegistryUnavailable(RuntimeError):
    """The registry could not be obtained or started; the message says why."""


def find_java() -> str:
    """A ``java`` of version 21 or later: ``REGISTRY_JAVA_HOME``, ``JAVA_HOME``, ``PATH``,
    then the JDKs installed under the usual JVM directories."""
    candidates = [
        os.path.join(home, "bin", "java")
        for home in (os.environ.get("REGISTRY_JAVA_HOME"), os.environ.get("JAVA_HOME"))
        if home
    ]
    found = shutil.which("java")
    candidates += [found] if found else []
    for root in _JVM_DIRS:
        candidates += sorted(str(p) for p in Path(root).glob("*/bin/java"))
        candidates += sorted(str(p) for p in Path(root).glob("*/Contents/Home/bin/java"))
    for java in candidates:
        if _java_major(java) >= MIN_JAVA:
            return java
    raise RegistryUnavailable(
        f"Apicurio Registry needs Java {MIN_JAVA}+ and none was found (tried "
        f"{', '.join(candidates) or 'no java at all'}); install one or set REGISTRY_JAVA_HOME"
    )


def _java_major(java: str) -> int:
    """The major version ``java -version`` reports; 0 when it cannot run."""
    try:
        out = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        ).stderr
    except OSError:
        return 0
    for token in out.split():
        text = token.strip('"')
        if text[:1].isdigit():
            head = text.split(".")[0].split("-")[0].split("+")[0]
            return int(head) if head.isdigit() else 0
    return 0


def obtain() -> Path:
    """The unpacked registry (its ``quarkus-run.jar`` directory), fetched once."""
    target = cache_root() / f"apicurio-registry-{APICURIO_VERSION}"
    if (target / ".complete").exists():
        return target
    if not shutil.which("mvn"):
        raise RegistryUnavailable(f"mvn is needed to fetch {ARTIFACT} from Maven Central")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        archive = _download(Path(tmp))
        staging = Path(tmp) / "app"
        with tarfile.open(archive) as tar:
            tar.extractall(staging, filter="data")
        shutil.rmtree(target, ignore_errors=True)
        staging.rename(target)
    (target / ".complete").write_text(SHA256 + "\n")
    return target


def _download(directory: Path) -> Path:
    cmd = ["mvn", "-q", "-B", "dependency:copy", f"-Dartifact={ARTIFACT}"]
    cmd.append(f"-DoutputDirectory={directory}")
    result = subprocess.run(cmd, capture_output=True, text=True, check=False, cwd=directory)
    archives = list(directory.glob("*.tar.gz"))
    if result.returncode != 0 or len(archives) != 1:
        tail = (result.stdout + result.stderr)[-2000:]
        raise RegistryUnavailable(f"mvn could not fetch {ARTIFACT}:\n{tail}")
    digest = hashlib.sha256(archives[0].read_bytes()).hexdigest()
    if digest != SHA256:
        raise RegistryUnavailable(
            f"{archives[0].name} has sha256 {digest}, expected {SHA256}: refusing to run it"
        )
    return archives[0]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(kw_only=True)
class LocalRegistry:
    """One Apicurio Registry on loopback, in-memory storage, global rule BACKWARD."""

    workdir: Path
    home: Path | None = None
    heap: str = "256m"
    port: int = field(default_factory=_free_port)
    _process: subprocess.Popen[bytes] | None = None
    _log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        """The Confluent-compatible API, what ``--schema-registry`` takes."""
        return f"http://127.0.0.1:{self.port}{CCOMPAT}"

    @property
    def pid(self) -> int | None:
        """The JVM's pid while it runs (a benchmark pins it and reads its CPU)."""
        return self._process.pid if self._process is not None else None

    def command(self) -> list[str]:
        return [
            find_java(),
            f"-Xmx{self.heap}",
            "-Dquarkus.http.host=127.0.0.1",
            f"-Dquarkus.http.port={self.port}",
            "-Dquarkus.management.host=127.0.0.1",
            f"-Dquarkus.management.port={_free_port()}",
            "-Dapicurio.storage.kind=sql",
            "-Dapicurio.storage.sql.kind=h2",
            "-Dapicurio.rules.global.compatibility=BACKWARD",
            "-jar",
            "quarkus-run.jar",
        ]

    def start(self, timeout_s: float = 180.0) -> None:
        """Start it and wait until the API answers (or raise RegistryUnavailable)."""
        home = self.home or obtain()
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._log = (self.workdir / "registry.log").open("wb")
        self._process = subprocess.Popen(
            self.command(), cwd=home, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RegistryUnavailable(f"the registry exited: see {self._log.name}")
            if self.answers():
                return
            time.sleep(0.25)  # polling a process that is starting: nothing to wait on
        raise RegistryUnavailable(f"the registry did not answer within {timeout_s:.0f}s")

    def answers(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/subjects", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False

    def stop(self, grace: float = 20.0) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(grace)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
        if self._log is not None:
            self._log.close()
            self._log = None


def main(argv: list[str]) -> int:
    if argv[1:] != ["fetch"]:
        print("usage: python -m devtools.localregistry fetch", file=sys.stderr)
        return 2
    try:
        print(f"Apicurio Registry {APICURIO_VERSION} at {obtain()}")
    except RegistryUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
