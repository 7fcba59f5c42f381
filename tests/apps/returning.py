"""A worker app for result tests: its ``task`` handler returns a value.

It returns ``{"n": n, "attempt": attempt, "pid": pid}`` after ``sleep_ms``; it fails
(for good with ``permanent``) on attempts up to ``fail_attempts``, and never returns
on attempts up to ``hang_attempts``. ``exit_attempts`` means here: on those attempts
the handler returns, then the process stops between the return and the settle (a
middleware hook that runs there writes ``returned-<pid>`` in ``$RECORDING_DIR`` and
waits), so a test can ``kill -9`` it with the value computed and not yet sent.

Its ``render`` handler returns a record of the type's result schema
(``render.result``, so the value travels as Avro), or with ``wrong_shape`` a value
that schema refuses.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from workers import App, JobContext, Permanent
from workers.middleware import JobResult, Middleware

_held: set[str] = set()  # job ids whose worker stops after their handler returned


class _StopAfterReturn(Middleware):
    def after_job(self, ctx: JobContext, result: JobResult) -> None:
        if ctx.job_id in _held:
            marker = Path(os.environ["RECORDING_DIR"]) / f"returned-{os.getpid()}"
            marker.write_text(ctx.job_id)
            threading.Event().wait()  # until the test kills this process


app = App("returning", middleware=[_StopAfterReturn()])


@app.job("task")
def task(ctx: JobContext, payload: dict[str, Any]) -> dict[str, int]:
    if ctx.attempt <= payload["hang_attempts"]:
        threading.Event().wait(600)
    if ctx.attempt <= payload["fail_attempts"]:
        if payload["permanent"]:
            raise Permanent(f"attempt {ctx.attempt} refused for good")
        raise ConnectionError(f"attempt {ctx.attempt} failed")
    time.sleep(payload["sleep_ms"] / 1000)
    if ctx.attempt <= payload["exit_attempts"]:
        _held.add(ctx.job_id)
    return {"n": payload["n"], "attempt": ctx.attempt, "pid": os.getpid()}


@app.job("render")
def render(ctx: JobContext, payload: dict[str, Any]) -> dict[str, object]:
    pages = payload["pages"]
    if payload["wrong_shape"]:
        return {"url": 42, "pages": pages}
    return {"url": f"https://files.example/{ctx.job_id}.pdf", "pages": pages,
            "sizes": [1000 * n for n in range(pages)]}  # fmt: skip
