"""Run the tests that promise "no Kafka, no Java, no network" where none of them exist.

The testing package and the framework examples say a user's tests need none of
the three. Saying so is not proving it: a stray import of the real client, a
fixture that starts the local Kafka, or a lookup of ``java`` would pass on a
developer's machine that has them all. So ``make test`` runs those tests first in a
new network namespace (``unshare --net``: only a loopback that goes nowhere), with
``PATH`` rebuilt without ``java``, ``JAVA_HOME`` and ``KAFKA_BOOTSTRAP`` unset and
an empty local-Kafka directory, and a skipped test counts as a failure
(``devtools.no_skips``).

Making a network namespace needs root. Elsewhere the tests still run (without the
namespace) and the runner says loudly what it could not prove; under ``CI`` that is
an error. Exit status: pytest's.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import click

HIDDEN = {"java", "javac", "jshell", "keytool"}


def path_without_java(path: str, into: Path) -> str:
    """A ``PATH`` of one directory of links to every program on ``path`` but Java's:
    ``/usr/bin`` holds ``java`` and ``python3`` alike, so dropping directories would
    not do. The first program of a name wins, as a shell's look-up would have it."""
    into.mkdir(parents=True, exist_ok=True)
    for directory in path.split(os.pathsep):
        if not directory or not os.path.isdir(directory):
            continue
        for entry in os.scandir(directory):
            if entry.name in HIDDEN or (into / entry.name).exists():
                continue
            if entry.is_file() and os.access(entry.path, os.X_OK):
                (into / entry.name).symlink_to(entry.path)
    return str(into)


def isolation() -> list[str] | None:
    """The command prefix that cuts the network, or None where it cannot be made."""
    unshare = shutil.which("unshare")
    if unshare is None or os.geteuid() != 0:
        return None
    probe = subprocess.run([unshare, "--net", "true"], capture_output=True, check=False)
    return [unshare, "--net", "--"] if probe.returncode == 0 else None


@click.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--pytest-args", default="", help="More arguments for pytest, space-separated.")
def main(paths: tuple[str, ...], pytest_args: str) -> None:
    """Run the tests under PATHS with no network, no Java and no Kafka."""
    prefix = isolation()
    in_ci = bool(os.environ.get("CI"))
    if prefix is None:
        message = "offline tests: cannot make a network namespace here (needs root and unshare)"
        if in_ci:
            click.echo(f"{message}; CI must prove they run with no network", err=True)
            sys.exit(2)
        click.echo(f"{message}; running them WITHOUT cutting the network", err=True)
        prefix = []
    with tempfile.TemporaryDirectory(prefix="offline-tests-") as scratch:
        root = Path(scratch)
        env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "KAFKA_BOOTSTRAP")}
        env["PATH"] = path_without_java(env.get("PATH", ""), root / "bin")
        (root / "kafka").mkdir()
        env["KAFKA_HOME"] = str(root / "kafka")
        env["LOCAL_KAFKA_DIR"] = str(root / "kafka")
        command = [*prefix, sys.executable, "-m", "pytest", "-p", "devtools.no_skips", *paths]
        command += pytest_args.split()
        click.echo("offline tests: " + " ".join(command[len(prefix) :]), err=True)
        sys.exit(subprocess.run(command, env=env, check=False).returncode)


if __name__ == "__main__":
    main()
