"""The worker's side of the channel: "retry later" answers and the job types it claims."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from schemas.lease_answer import LeaseAnswer
from tests.unit.test_worker_monitor import Clocks, ScriptedClient, _add, _monitor
from tests.unit.test_worker_support import FakeLeaseKeeper, running_worker, serving, wait_until
from workers.app import App
from workers.batcher import SettleBatcher
from workers.cli import main
from workers.context import JobContext
from workers.inflight import InFlight
from workers.messages import LeaseRef, WorkerSettlement


class RestartingKeeper(ScriptedClient):
    """Answers "retry later" while ``settling`` (a restarted leasekeeper)."""

    def __init__(self) -> None:
        super().__init__()
        self.settling = True
        self.settle_batches: list[list[str]] = []

    def heartbeat(
        self, refs: Sequence[LeaseRef], /, started: Collection[str] = ()
    ) -> list[LeaseAnswer]:
        if not self.settling:
            return super().heartbeat(refs, started)
        self.batches.append(list(refs))
        return [_later(r.lease_id) for r in refs]

    def settle(self, settlements: Sequence[WorkerSettlement], /) -> list[LeaseAnswer]:
        self.settle_batches.append([s.ref.lease_id for s in settlements])
        if self.settling and len(self.settle_batches) < 3:
            return [_later(s.ref.lease_id) for s in settlements]
        self.settling = False
        return [LeaseAnswer(lease_id=s.ref.lease_id, ok=True) for s in settlements]


def _later(lease_id: str) -> LeaseAnswer:
    return LeaseAnswer(lease_id=lease_id, ok=False, reason="retry later", retry_later=True)


def test_a_heartbeat_answered_retry_later_keeps_the_job_and_asks_again_soon() -> None:
    table, client, clocks = InFlight(concurrency=4), RestartingKeeper(), Clocks()
    held = _add(table, 1, lease_s=30)
    monitor = _monitor(table, client, clocks)

    clocks.now = 10.0  # a third of the lease
    monitor.tick()
    assert not held.ctx.is_cancelled, "retry later must not cost the worker its lease"
    assert held.next_beat_at == pytest.approx(11.0)  # the retry interval, not a third on
    client.settling = False
    clocks.now = 11.0
    monitor.tick()
    assert len(client.batches) == 2
    assert held.until_ms == 99_000 and not held.ctx.is_cancelled


def test_a_settlement_answered_retry_later_is_sent_again_until_it_is_accepted() -> None:
    client = RestartingKeeper()
    answered: list[list[LeaseAnswer] | None] = []
    done = threading.Event()

    def on_answer(batch: Sequence[tuple[WorkerSettlement, int]], results: Any) -> None:
        answered.append(results)
        done.set()

    batcher: SettleBatcher[int] = SettleBatcher(client, on_answer, retry_later_s=0.01)
    batcher.start()
    batcher.put(WorkerSettlement.ack(LeaseRef(lease_id="t/0/1", token="tok")), 1)
    assert done.wait(10)
    batcher.close(timeout=10)
    assert client.settle_batches == [["t/0/1"]] * 3
    assert answered == [[LeaseAnswer(lease_id="t/0/1", ok=True)]]


def test_a_worker_claims_only_the_types_it_has_a_schema_for_and_says_which_it_left_out(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = App("mixed")

    @app.job("noop")
    def noop(ctx: JobContext, payload: dict[str, Any]) -> None: ...

    @app.job("transcode")  # a handler, but no transcode.avsc anywhere
    def transcode(ctx: JobContext, payload: dict[str, Any]) -> None: ...

    fake = FakeLeaseKeeper()
    caplog.set_level(logging.WARNING, logger="workers.runtime")
    with serving(fake, tmp_path / "lk.sock") as target, running_worker(app, target):
        wait_until(lambda: bool(fake.job_types), what="a claim")
    assert fake.job_types[0] == ["noop"]
    assert "not claiming job type 'transcode'" in caplog.text
    assert "no payload schema" in caplog.text


def test_a_worker_with_no_schema_for_any_handler_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"jobs_{uuid.uuid4().hex[:8]}"
    source = (
        "from workers import App\napp = App('video')\n@app.job('transcode')\ndef t(ctx, p): ...\n"
    )
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("JOBS_SCHEMA_PATH", raising=False)
    result = CliRunner().invoke(main, ["run", f"{name}:app", "--target", "unix:/nowhere"])
    assert result.exit_code == 1
    assert "no payload schema for any job type of app 'video' (transcode" in result.output
    assert "Traceback" not in result.output


class OneLeaseNotKnownYet(ScriptedClient):
    """A restarted leasekeeper that has re-read every lease but one."""

    def __init__(self, unknown: str) -> None:
        super().__init__()
        self.unknown = unknown
        self.known = threading.Event()

    def settle(self, settlements: Sequence[WorkerSettlement], /) -> list[LeaseAnswer]:
        return [
            _later(s.ref.lease_id)
            if s.ref.lease_id == self.unknown and not self.known.is_set()
            else LeaseAnswer(lease_id=s.ref.lease_id, ok=True)
            for s in settlements
        ]


def test_a_settlement_waiting_on_retry_later_does_not_hold_other_acks_back() -> None:
    client = OneLeaseNotKnownYet("t/0/1")
    answered: dict[int, bool] = {}
    second_answered = threading.Event()

    def on_answer(batch: Sequence[tuple[WorkerSettlement, int]], results: Any) -> None:
        ok = {r.lease_id: r.ok for r in results or []}
        for settlement, tag in batch:
            answered[tag] = ok.get(settlement.ref.lease_id, False)
            if tag == 2:
                second_answered.set()

    batcher: SettleBatcher[int] = SettleBatcher(client, on_answer, retry_later_s=0.01)
    batcher.start()
    batcher.put(WorkerSettlement.ack(LeaseRef(lease_id="t/0/1", token="tok")), 1)
    batcher.put(WorkerSettlement.ack(LeaseRef(lease_id="t/0/2", token="tok")), 2)
    # The second ack is answered while the first is still "retry later".
    assert second_answered.wait(10)
    assert answered == {2: True}
    client.known.set()
    batcher.close(timeout=10)
    assert answered == {1: True, 2: True}
