"""Per-key ordering as a property: random interleavings of enqueue, run, failure,
retry, copies delivered late or lost, restarts (same disk) and partition moves (a
new disk), against the real ``KeyBook`` and a model of the rest (Kafka: the class
partition's log, the ordering lane, the commit; the engine: tracker, window, copies).

For every key: a run starts only when no other run of its key is in progress and
every job enqueued before it has finished (succeeded, or dead); and in the end
nothing is lost: every job succeeded or was dead-lettered.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from leasekeeper.core.commit_tracker import CommitTracker
from leasekeeper.core.leases import Pending, TopicPart
from leasekeeper.ordering.keys import KeyBook
from leasekeeper.ordering.values import LaneEntry, LaneState, OnDead, Verdict, line_of
from schemas.job import Job
from schemas.job_headers import JobHead

TP = TopicPart("jobs.q", 0)
KEYS = ("a", "b", "c")
MAX_ATTEMPTS = 3
BACKOFF_MS = 1000


@dataclass(frozen=True, kw_only=True)
class Copy:
    """A copy on its way: to the lane (``entry``), back to the class topic (``back``), a
    lane tombstone (``drop``) or a dead letter; ``source`` resolves on delivery."""

    entry: LaneEntry | None = None
    back: LaneEntry | None = None
    drop: LaneEntry | None = None
    dead: Job | None = None
    source: int | None = None
    pending: Pending | None = None  # a dead letter's job: its line goes on once durable


@dataclass(kw_only=True)
class Kafka:
    """What survives a crash: the partition, the lane, the commit, the dead letters."""

    log: list[Job] = field(default_factory=list)
    lane: dict[str, LaneEntry] = field(default_factory=dict)
    committed: int = 0
    dead: set[str] = field(default_factory=set)


@dataclass(kw_only=True)
class Runs:
    """What the workers did: checked as it happens."""

    order: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KEYS})
    running: dict[str, str] = field(default_factory=dict)
    succeeded: set[str] = field(default_factory=set)

    def start(self, job: JobHead, dead: set[str]) -> None:
        key = job.ordering_key
        assert key is not None
        assert key not in self.running, f"{job.job_id} overlaps {self.running.get(key)}"
        line = self.order[key]
        for earlier in line[: line.index(job.job_id)]:
            assert earlier in self.succeeded or earlier in dead, (
                f"{job.job_id} started before {earlier} finished"
            )
        self.running[key] = job.job_id

    def stop(self, job: JobHead, ok: bool) -> None:
        assert job.ordering_key is not None
        del self.running[job.ordering_key]
        if ok:
            self.succeeded.add(job.job_id)


class Keeper:
    """One leasekeeper's life: the engine's side of ordering, modelled."""

    def __init__(self, kafka: Kafka, on_dead: OnDead, store: set[int], generation: int) -> None:
        self.kafka = kafka
        self.book = KeyBook(on_dead=on_dead)
        self.book.assign(TP, len(kafka.log), kafka.lane.values())
        self.tracker = CommitTracker(kafka.committed)
        self.next = kafka.committed
        self.store = {o for o in store if o >= kafka.committed}  # resolved, on this disk
        self.generation = generation
        self.window: list[Pending] = []
        self.leased: list[Pending] = []
        self.copies: list[Copy] = []

    def resolve(self, offset: int) -> None:
        self.tracker.resolve(offset)
        self.store.add(offset)

    def fetch(self, now: int, upto: int | None = None) -> None:
        while self.next < len(self.kafka.log) and (upto is None or self.next < upto):
            offset, job = self.next, self.kafka.log[self.next]
            self.next += 1
            self.tracker.fetched(offset)
            if offset in self.store:
                self.tracker.resolve(offset)
                continue
            pending = Pending(TP, offset, self.generation, JobHead.of(job), b"")
            verdict, entry = self.book.offer(pending, now)
            if verdict is Verdict.HOLD:
                self.copies.append(Copy(entry=entry, source=offset))
            elif verdict is Verdict.DUPLICATE:
                self.resolve(offset)
            elif verdict is Verdict.RETURNED:
                self.copies.append(Copy(drop=entry))
            assert verdict is not Verdict.CONFLICT
        self.turn(now)

    def turn(self, now: int) -> None:
        """What the engine does every loop turn."""
        for pending, entry in self.book.holds(now):
            self.copies.append(Copy(entry=entry, source=pending.offset))
        self.copies.extend(
            Copy(back=entry) for entry in self.book.returns(now, lambda _tp: self.next)
        )
        self.window.extend(self.book.release(lambda _tp: self.next))

    def paused_at_span(self, now: int) -> None:
        """The loop paused the partition at its span: before it is read to its end
        offset when assigned, what waits in its lines goes to the lane."""
        for pending, entry in self.book.settling_holds(lambda: {TP}, lambda _tp: self.next):
            self.copies.append(Copy(entry=entry, source=pending.offset))
        self.turn(now)

    def fail(self, pending: Pending, now: int) -> None:
        assert pending.job.full is not None
        job = replace(pending.job.full, attempt=pending.job.attempt + 1)
        if job.attempt >= MAX_ATTEMPTS:
            entry = self.book.died(pending, job, "attempts exhausted")
            if entry is None:
                self.copies.append(Copy(dead=job, source=pending.offset, pending=pending))
            else:  # the lane first, then the dead letter resolves the offset
                self.copies.append(Copy(entry=entry, dead=job, source=pending.offset))
        else:
            entry = self.book.failed(pending, job, now + BACKOFF_MS, "boom")
            self.copies.append(Copy(entry=entry, source=pending.offset))
        self.turn(now)

    def deliver(self, copy: Copy, now: int) -> None:
        self.copies.remove(copy)
        if copy.entry is not None:
            self.kafka.lane[copy.entry.record_key] = copy.entry
            if copy.dead is not None:  # --on-dead block: now the dead letter
                self.copies.append(Copy(dead=copy.dead, source=copy.source))
                return
        elif copy.dead is not None:
            self.kafka.dead.add(copy.dead.job_id)
            if copy.pending is not None:
                self.book.finished(copy.pending)
        elif copy.back is not None:
            self.kafka.log.append(copy.back.job)
        elif copy.drop is not None:
            self.kafka.lane.pop(copy.drop.record_key, None)
            self.book.returned(copy.drop)
        if copy.source is not None:
            self.resolve(copy.source)
        self.turn(now)

    def crash(self, delivered: list[bool]) -> None:
        """Copies under way at a crash land in Kafka or not; nothing local survives
        but the store."""
        for copy, landed in zip(list(self.copies), delivered, strict=False):
            if not landed:
                continue
            if copy.entry is not None:
                self.kafka.lane[copy.entry.record_key] = copy.entry
            elif copy.dead is not None:
                self.kafka.dead.add(copy.dead.job_id)
            elif copy.back is not None:
                self.kafka.log.append(copy.back.job)
            elif copy.drop is not None:
                self.kafka.lane.pop(copy.drop.record_key, None)


ACTIONS = ("enqueue", "fetch", "start", "succeed", "fail", "deliver", "tick", "commit",
           "restart", "move", "operator")  # fmt: skip


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), on_dead=st.sampled_from(list(OnDead)))
def test_each_key_runs_one_at_a_time_in_enqueue_order(data: st.DataObject, on_dead: OnDead) -> None:
    _play(data, on_dead, ACTIONS)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), on_dead=st.sampled_from(list(OnDead)))
def test_the_order_holds_when_a_partition_paused_at_its_span_holds_its_lines(
    data: st.DataObject, on_dead: OnDead
) -> None:
    """As above, with fetches that stop short of the log's end and the loop's pause at
    the span before a (re)assigned partition is read to its end (``settling_holds``)."""
    _play(data, on_dead, (*ACTIONS, "fetch_some", "span", "span"))


def _play(data: st.DataObject, on_dead: OnDead, actions: tuple[str, ...]) -> None:
    kafka, runs = Kafka(), Runs()
    keeper = Keeper(kafka, on_dead, set(), 1)
    now = 0
    for _ in range(data.draw(st.integers(20, 120), label="steps")):
        action = data.draw(st.sampled_from(actions))
        now += 1
        keeper = _act_settling(action, data, keeper, runs, now)
        if action == "tick":
            now += data.draw(st.integers(0, 3 * BACKOFF_MS))
            keeper.turn(now)
    _drain(keeper, runs, now)


def _act_settling(action: str, data: st.DataObject, keeper: Keeper, runs: Runs, now: int) -> Keeper:
    """Also a fetch that stops short of the log's end, and the loop's pause at the span."""
    if action == "fetch_some":
        keeper.fetch(now, keeper.next + data.draw(st.integers(0, 3)))
    elif action == "span":
        keeper.paused_at_span(now)
    else:
        return _act(action, data, keeper, runs, now)
    return keeper


def _act(action: str, data: st.DataObject, keeper: Keeper, runs: Runs, now: int) -> Keeper:
    kafka = keeper.kafka
    if action == "enqueue":
        key = data.draw(st.sampled_from(KEYS))
        job_id = f"{key}{len(runs.order[key])}"
        runs.order[key].append(job_id)
        kafka.log.append(_job(job_id, key))
    elif action == "fetch":
        keeper.fetch(now)
    elif action == "start" and keeper.window:
        pending = keeper.window.pop(data.draw(st.integers(0, len(keeper.window) - 1)))
        runs.start(pending.job, kafka.dead)
        keeper.leased.append(pending)
    elif action in ("succeed", "fail") and keeper.leased:
        pending = keeper.leased.pop(data.draw(st.integers(0, len(keeper.leased) - 1)))
        runs.stop(pending.job, ok=action == "succeed")
        if action == "succeed":
            keeper.resolve(pending.offset)
            keeper.book.finished(pending)
            keeper.turn(now)
        else:
            keeper.fail(pending, now)
    elif action == "deliver" and keeper.copies:
        keeper.deliver(data.draw(st.sampled_from(keeper.copies)), now)
    elif action == "commit":
        kafka.committed = keeper.tracker.committable
    elif action in ("restart", "move"):
        return _restart(data, keeper, runs, same_disk=action == "restart")
    elif action == "operator":
        _operator(data, keeper, now)
    return keeper


def _restart(data: st.DataObject, keeper: Keeper, runs: Runs, *, same_disk: bool) -> Keeper:
    """kill -9 (its workers' runs end with it), or the partition moving to another
    leasekeeper: the new one starts from the commit and the lane."""
    landed = data.draw(st.lists(st.booleans(), min_size=len(keeper.copies),
                                max_size=len(keeper.copies)))  # fmt: skip
    keeper.crash(landed)
    for pending in keeper.leased:
        runs.stop(pending.job, ok=False)
    store = keeper.store if same_disk else set()
    return Keeper(keeper.kafka, keeper.book.on_dead, store, keeper.generation + 1)


def _operator(data: st.DataObject, keeper: Keeper, now: int) -> None:
    """An operator skips or replays a dead head that blocks its line."""
    dead = [e for e in keeper.kafka.lane.values() if e.state is LaneState.DEAD]
    if not dead:
        return
    entry = data.draw(st.sampled_from(dead))
    if data.draw(st.booleans()):
        del keeper.kafka.lane[entry.record_key]
        keeper.book.operator(None, entry.line, entry.seq)
    else:
        again = replace(entry, state=LaneState.RETRYING, due_ms=now,
                        job=replace(entry.job, attempt=0))  # fmt: skip
        keeper.kafka.lane[entry.record_key] = again
        keeper.kafka.dead.discard(entry.job.job_id)
        keeper.book.operator(again, entry.line, entry.seq)
    keeper.turn(now)


def _drain(keeper: Keeper, runs: Runs, now: int) -> None:
    """No more faults: everything must finish (dead heads that block are skipped)."""
    for pending in keeper.leased:
        runs.stop(pending.job, ok=True)
        keeper.resolve(pending.offset)
        keeper.book.finished(pending)
    keeper.leased.clear()
    for _ in range(10_000):
        now += BACKOFF_MS
        keeper.fetch(now)
        while keeper.copies:
            keeper.deliver(keeper.copies[0], now)
        for entry in [e for e in keeper.kafka.lane.values() if e.state is LaneState.DEAD]:
            del keeper.kafka.lane[entry.record_key]
            keeper.book.operator(None, entry.line, entry.seq)
        keeper.turn(now)
        while keeper.window:
            pending = keeper.window.pop(0)
            runs.start(pending.job, keeper.kafka.dead)
            runs.stop(pending.job, ok=True)
            keeper.resolve(pending.offset)
            keeper.book.finished(pending)
            keeper.turn(now)
        if _quiet(keeper):
            break
    every = {job_id for line in runs.order.values() for job_id in line}
    assert every <= runs.succeeded | keeper.kafka.dead, every - runs.succeeded - keeper.kafka.dead
    assert not keeper.kafka.lane


def _quiet(keeper: Keeper) -> bool:
    fetched = keeper.next == len(keeper.kafka.log)
    return fetched and not keeper.copies and not keeper.window and keeper.book.lines() == 0


def _job(job_id: str, key: str) -> Job:
    return Job(job_id=job_id, queue="q", tenant_id="t", type="noop", payload=b"",
               created_at_ms=0, max_attempts=MAX_ATTEMPTS, ordering_key=key)  # fmt: skip


def test_line_of_scopes_the_key_to_its_partition_and_tenant() -> None:
    pending = Pending(TP, 3, 1, JobHead.of(_job("a0", "a")), b"")
    line = line_of(pending)
    assert line is not None and (line.tp, line.tenant, line.key) == (TP, "t", "a")
