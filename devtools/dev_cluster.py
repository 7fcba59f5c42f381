"""Where ``leasekeeper dev kafka start`` records its brokers' pids and address.

Every command reads this record when ``KAFKA_BOOTSTRAP`` is unset (through
:func:`jobcore.config.recorded_dev_bootstrap`, which imports this module when
called), so a second terminal finds the local Kafka with nothing exported. It is
kept apart from the broker manager so that look-up stays cheap: importing it
loads neither the jar download nor the process code.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from jobcore.config import ENV_LOCAL_KAFKA_DIR

STATE_FILE = "state.json"


def cache_root(environ: Mapping[str, str] | None = None) -> Path:
    """The user's cache of jars and the default cluster: ``$XDG_CACHE_HOME`` or ``~/.cache``."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "kafka-lease-queue"


def state_dir(given: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The cluster's directory: ``--state-dir``, else ``LOCAL_KAFKA_DIR``, else the cache's."""
    if given is not None:
        return given
    env = os.environ if environ is None else environ
    explicit = env.get(ENV_LOCAL_KAFKA_DIR)
    return Path(explicit) if explicit else cache_root(env) / "dev-cluster"


def state_file(given: Path | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """The record of the cluster in :func:`state_dir`. Other commands know only
    ``LOCAL_KAFKA_DIR``, so a ``--state-dir`` flag without the variable is found by
    the ``dev kafka`` commands alone."""
    return state_dir(given, environ) / STATE_FILE


@dataclass(frozen=True, kw_only=True)
class ClusterRecord:
    """The brokers' address and pids; no pids once ``dev kafka stop`` stopped them
    (the data stays, and ``start`` brings it back at the same address)."""

    bootstrap: str
    pids: tuple[int, ...]

    def running(self) -> bool:
        return bool(self.pids) and all(pid_alive(pid) for pid in self.pids)

    def write(self, path: Path) -> None:
        path.write_text(json.dumps({"bootstrap": self.bootstrap, "pids": list(self.pids)}))


def read_record(path: Path) -> ClusterRecord | None:
    """The record at ``path``; None when there is none or it cannot be read."""
    try:
        data = json.loads(path.read_text())
        return ClusterRecord(
            bootstrap=str(data["bootstrap"]), pids=tuple(int(p) for p in data["pids"])
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def recorded_bootstrap(environ: Mapping[str, str] | None = None) -> str | None:
    """The address of a local Kafka whose processes still run, else None."""
    record = read_record(state_file(None, environ))
    return record.bootstrap if record is not None and record.running() else None


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
