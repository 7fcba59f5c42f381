"""Running workers under signals: one in this process, or several child processes.

Signal handlers only count signals; the main thread acts on the count. A
handler that called into the runtime could deadlock on a lock the
interrupted main thread holds.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from types import FrameType

from workers.runtime import Worker

log = logging.getLogger(__name__)

_POLL_S = 0.1
_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class _SignalCounter:
    """Counts SIGTERM/SIGINT while installed; a second one can exit at once."""

    def __init__(self, *, exit_on_second: bool) -> None:
        self.count = 0
        self._exit_on_second = exit_on_second
        self._previous: dict[int, object] = {}

    def __enter__(self) -> _SignalCounter:
        for sig in _SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1 and self._exit_on_second:
            os.write(2, b"second signal: exiting without waiting for running jobs\n")
            os._exit(1)


def run_in_foreground(worker: Worker, *, parent_pid: int | None = None) -> None:
    """Run ``worker`` until SIGTERM/SIGINT (graceful) or a second one (immediate exit).

    With ``parent_pid`` the worker also stops when that parent disappears, so
    children of a killed supervisor do not run on unsupervised.
    """
    failure: list[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=target, name="worker-main")
    with _SignalCounter(exit_on_second=True) as signals:
        thread.start()
        while thread.is_alive():
            thread.join(_POLL_S)
            orphaned = parent_pid is not None and os.getppid() != parent_pid
            if signals.count or orphaned:
                worker.stop()
    if failure:
        raise failure[0]


def supervise(commands: Sequence[Sequence[str]]) -> int:
    """Start one child per command and wait for all; forward SIGTERM/SIGINT to them.

    Children run in their own sessions, so a terminal's Ctrl-C reaches only
    this process, which forwards exactly one SIGTERM (a second signal: SIGKILL).
    Returns 0 when every child exited 0, else the first non-zero code.
    """
    children = [subprocess.Popen(list(cmd), start_new_session=True) for cmd in commands]
    log.info("started %d worker processes: %s", len(children), [c.pid for c in children])
    forwarded = 0
    with _SignalCounter(exit_on_second=False) as signals:
        while any(child.poll() is None for child in children):
            if signals.count > forwarded:
                forwarded = signals.count
                _forward(children, signal.SIGTERM if forwarded == 1 else signal.SIGKILL)
            time.sleep(_POLL_S)
    codes = [child.returncode for child in children]
    for child, code in zip(children, codes, strict=True):
        if code != 0:
            log.error("worker process %d exited with %d", child.pid, code)
    return next((code for code in codes if code != 0), 0)


def _forward(children: Sequence[subprocess.Popen[bytes]], sig: signal.Signals) -> None:
    log.info("forwarding %s to %d worker processes", sig.name, len(children))
    for child in children:
        if child.poll() is None:
            child.send_signal(sig)
