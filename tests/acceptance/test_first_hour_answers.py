"""The first hour, part two, as a new user meets it: the commands run as processes
against the suite's Kafka, with the README's worker module.

- One answer to "where is my job?": `producer status` and `leasekeeper inspect job`
  agree on a finished job (with its worker), and on a dead one.
- Silent waits speak: a job of a type no worker runs shows in `inspect` (text and
  JSON) well before it would be dead-lettered; a worker aimed at a socket that does
  not exist names the path at once.
- 80 columns: `dlq list` prints each dead letter on one line.
- Dashboard errors: a mistyped queue gets a page with the navigation that names
  the queues there are; an `/api/` error is JSON.

Each outer timeout is only a guard against a hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.localkafka.cluster import free_port

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[2]
GUARD_S = 120
GOOD = '{"order_id": 1, "email": "a@example.com", "amount_cents": 100}'
BAD = '{"order_id": 2, "email": "nobody", "amount_cents": 100}'


class Terminal:
    """A new user's shell: the queue's Kafka exported, commands run from ``work``."""

    def __init__(self, work: Path, bootstrap: str, queue: str) -> None:
        self.work, self.queue = work, queue
        self.target = f"unix:{work / 'lk.sock'}"
        dropped = ("LEASEKEEPER_TARGET", "LOG_LEVEL", "LOCAL_KAFKA_DIR")
        self.env = {k: v for k, v in os.environ.items() if k not in dropped}
        self.env.update(KAFKA_BOOTSTRAP=bootstrap, PYTHONPATH=str(work), COLUMNS="80")
        self.background: list[subprocess.Popen[str]] = []
        self._logs: list[Any] = []

    def run(self, command: str, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(BIN / command), *args], cwd=self.work, env=self.env,
                              capture_output=True, text=True, timeout=GUARD_S,
                              check=False)  # fmt: skip

    def start(self, command: str, *args: str, log: str) -> subprocess.Popen[str]:
        out = (self.work / log).open("w")
        self._logs.append(out)
        process = subprocess.Popen([str(BIN / command), *args], cwd=self.work, env=self.env,
                                   stdout=out, stderr=subprocess.STDOUT, text=True)  # fmt: skip
        self.background.append(process)
        return process

    def log(self, name: str) -> str:
        return (self.work / name).read_text(errors="replace")

    def stop(self) -> None:
        for process in self.background:
            process.terminate()
        for process in self.background:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        for out in self._logs:
            out.close()


def until(what: str, check: Callable[[], Any]) -> Any:
    """Another process's progress, polled (its output is all there is to await)."""
    deadline = time.monotonic() + GUARD_S
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        time.sleep(0.2)


@pytest.fixture
def terminal(tmp_path: Path, kafka_bootstrap: str, unique: str) -> Iterator[Terminal]:
    readme = (ROOT / "README.md").read_text()
    module = readme.split("```python receipts.py\n", 1)[1].split("```", 1)[0]
    (tmp_path / "receipts.py").write_text(module)
    shell = Terminal(tmp_path, kafka_bootstrap, f"answers{unique}")
    created = shell.run("producer", "create-queue", "--queue", shell.queue, "--partitions", "1")
    assert created.returncode == 0, created.stderr
    try:
        yield shell
    finally:
        shell.stop()


def test_a_new_user_gets_answers_not_silence(terminal: Terminal) -> None:
    t, q = terminal, terminal.queue
    t.start("leasekeeper", "serve", "--queue", q, "--state-dir", str(t.work / "state"),
            "--listen", t.target, "--unknown-type-grace", "30s", log="leasekeeper.log")  # fmt: skip
    t.start("workers", "run", "receipts:app", "--target", t.target, log="worker.log")

    def enqueue(job_type: str, payload: str) -> str:
        done = t.run("producer", "enqueue", "--queue", q, job_type, "--tenant", "acme",
                     "--payload", payload)  # fmt: skip
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    good, bad = enqueue("send_receipt", GOOD), enqueue("send_receipt", BAD)
    # A type with a schema that the worker module does not register.
    enqueue("password_reset", '{"user_id": "u1", "email": "a@example.com"}')

    # Where is my job: the status topic and the leasekeeper agree.
    status = until("the good job's status", lambda: _ok(t.run("producer", "status", "--queue",
                                                               q, good)))  # fmt: skip
    assert "succeeded" in status.stdout, status.stdout
    inspected = t.run("leasekeeper", "inspect", "job", good, "--queue", q, "--target", t.target,
                      "--json")  # fmt: skip
    view = json.loads(inspected.stdout)
    assert view["state"] == "succeeded", view
    assert view.get("worker") and view["worker"] in status.stdout, (view, status.stdout)
    dead = until("the bad job's status", lambda: _ok(t.run("producer", "status", "--queue", q,
                                                           bad)))  # fmt: skip
    assert "dead" in dead.stdout, dead.stdout

    # A type no worker runs: said in inspect halfway through its grace, before the DLQ.
    def unhandled() -> list[dict[str, Any]]:
        shown = t.run("leasekeeper", "inspect", "--queue", q, "--target", t.target, "--json")
        return list(json.loads(shown.stdout).get("unhandled", [])) if shown.returncode == 0 else []

    (wait,) = until("the unhandled type in inspect", unhandled)
    assert (wait["type"], wait["jobs"]) == ("password_reset", 1), wait
    assert "send_receipt" in wait["handled"], wait
    text = t.run("leasekeeper", "inspect", "--queue", q, "--target", t.target).stdout
    assert "password_reset" in text, text
    assert "password_reset" in t.log("leasekeeper.log")  # the WARNING

    # 80 columns: one line per dead letter.
    listed = t.run("leasekeeper", "dlq", "list", "--queue", q)
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines), listed.stdout
    assert sum(bad[:8] in line for line in lines) == 1, listed.stdout

    # A worker aimed at a socket that does not exist names it at once.
    missing = t.work / "nowhere" / "lk.sock"
    lost = t.start("workers", "run", "receipts:app", "--target", f"unix:{missing}",
                   log="lost-worker.log")  # fmt: skip

    # The start line names the target too, so wait for the warning line itself.
    def warned() -> bool:
        return any("WARNING" in line and str(missing) in line
                   for line in t.log("lost-worker.log").splitlines())  # fmt: skip

    until("the missing socket's warning", warned)
    assert lost.poll() is None, "it keeps retrying"


def test_the_dashboard_answers_a_mistyped_queue_and_api_errors(terminal: Terminal) -> None:
    t = terminal
    port = free_port()
    t.start("leasekeeper", "dashboard", "--listen", f"127.0.0.1:{port}", "--state-dir",
            str(t.work / "dashboard"), log="dashboard.log")  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    until("the dashboard", lambda: _get(f"{base}/")[0] == 200)

    code, body = _get(f"{base}/queues/{t.queue}x")
    assert code == 404, body
    assert "Overview" in body and t.queue in body, body  # the navigation, the queues there are
    assert "KafkaError{" not in body
    code, body = _get(f"{base}/api/job?id=x&queue={t.queue}x")
    assert (code, json.loads(body)["status"]) == (404, 404), body
    assert f"{t.queue}x" in json.loads(body)["error"], body
    # A malformed name is refused, and the dashboard goes on answering.
    code, body = _get(f"{base}/api/job?id=x&queue=no/such")
    assert code == 400 and "invalid queue name" in json.loads(body)["error"], body
    code, body = _get(f"{base}/api/job?id=x&queue={t.queue}")
    assert code == 200 and json.loads(body)["state"] == "not found yet", body


def _ok(done: subprocess.CompletedProcess[str]) -> subprocess.CompletedProcess[str] | None:
    return done if done.returncode == 0 else None


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except OSError:
        return 0, ""
