"""A worker connects only to a leasekeeper socket whose owner it trusts.

Another local user can make the default socket directory (``/tmp/kafka-lease-queue-UID``
without ``XDG_RUNTIME_DIR``) and listen there first; a worker that connected would
run that user's jobs with its own credentials. Giving a path to another user takes
``os.chown``, so these tests need root (as they have in CI): elsewhere they skip,
saying so, and fail when ``CI`` is set.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from jobcore.config import default_leasekeeper_target, queues_with_sockets
from leasekeeper.rpc.listen import prepare_socket_dir
from tests.unit.test_worker_support import FakeLeaseKeeper, serving
from workers.cli import RunOptions, main
from workers.client import LeaseKeeperClient, LeaseKeeperRejected, UntrustedSocket

ME = os.getuid()
OTHER = 4242  # a user who is neither this one nor root
WORKER = 4343  # the uid a worker pretends to run as, to see root's socket as not its own


def give(uid: int, *paths: Path) -> None:
    """Hand ``paths`` to ``uid``, as if that user had made them."""
    if ME != 0:
        if os.environ.get("CI"):
            pytest.fail("giving a file to another user needs root, as CI runs", pytrace=False)
        pytest.skip("giving a file to another user needs root (run as root to check this)")
    for path in paths:
        os.chown(path, uid, -1)


@pytest.fixture
def runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``XDG_RUNTIME_DIR`` of this test: the default socket directory lies in it."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    return tmp_path / "kafka-lease-queue"


@pytest.fixture
def fake() -> FakeLeaseKeeper:
    return FakeLeaseKeeper()


@pytest.fixture
def served(fake: FakeLeaseKeeper, tmp_path: Path) -> Iterator[Path]:
    """A leasekeeper listening in ``tmp_path/shared`` (0750, socket 0600), owned by us."""
    sock = tmp_path / "shared" / "lk.sock"
    prepare_socket_dir(sock, 0o600)
    with serving(fake, sock):
        yield sock


def _claim(target: str, trust_owner: int | None = None) -> list[object]:
    with LeaseKeeperClient(target, worker_id="w", trust_owner=trust_owner) as client:
        return list(client.claim(1, 0))


def test_a_default_socket_directory_another_user_made_is_refused(
    runtime_dir: Path, fake: FakeLeaseKeeper
) -> None:
    sock = runtime_dir / "emails.sock"
    runtime_dir.mkdir(mode=0o700)
    with serving(fake, sock):
        give(OTHER, runtime_dir, sock)
        with pytest.raises(UntrustedSocket) as info:
            _claim(default_leasekeeper_target(queue="emails"))
    message = str(info.value)
    assert f"socket directory {runtime_dir} is owned by uid {OTHER}" in message
    assert f"expected uid {ME} (this user)" in message
    assert "XDG_RUNTIME_DIR" in message, "the fix is named"
    assert len(message.splitlines()) == 2
    assert isinstance(info.value, LeaseKeeperRejected), "the worker stops, no retries"
    assert fake.claims == [], "the other user's server never heard from the worker"


def test_a_default_socket_of_root_is_refused_to_another_user(
    runtime_dir: Path, fake: FakeLeaseKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    sock = runtime_dir / "emails.sock"
    runtime_dir.mkdir(mode=0o700)
    with serving(fake, sock):
        give(0, runtime_dir, sock)
        monkeypatch.setattr(os, "getuid", lambda: WORKER)
        with pytest.raises(UntrustedSocket, match=f"owned by uid 0, expected uid {WORKER}"):
            _claim(default_leasekeeper_target(queue="emails"))
    assert fake.claims == []


def test_a_socket_another_user_put_in_our_default_directory_is_refused(
    runtime_dir: Path, fake: FakeLeaseKeeper
) -> None:
    sock = runtime_dir / "emails.sock"
    runtime_dir.mkdir(mode=0o700)
    with serving(fake, sock):
        give(OTHER, sock)
        with pytest.raises(UntrustedSocket, match=f"socket {sock} is owned by uid {OTHER}"):
            _claim(default_leasekeeper_target(queue="emails"))
    assert fake.claims == []


def test_the_only_leasekeeper_of_this_user_is_not_one_another_user_made(
    runtime_dir: Path, fake: FakeLeaseKeeper
) -> None:
    runtime_dir.mkdir(mode=0o700)
    with serving(fake, runtime_dir / "emails.sock"):
        assert queues_with_sockets() == ["emails"]
        give(OTHER, runtime_dir)
        assert queues_with_sockets() == []


def test_a_given_target_of_root_is_accepted_and_of_another_user_refused(
    served: Path, fake: FakeLeaseKeeper, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "getuid", lambda: WORKER)
    give(0, served.parent, served)
    assert _claim(f"unix:{served}") == []
    assert len(fake.claims) == 1
    give(OTHER, served)
    with pytest.raises(UntrustedSocket, match=f"socket {served} is owned by uid {OTHER}, "):
        _claim(f"unix:{served}")
    assert len(fake.claims) == 1


def test_a_given_target_of_another_user_needs_trust_owner(
    served: Path, fake: FakeLeaseKeeper
) -> None:
    give(OTHER, served.parent, served)
    with pytest.raises(UntrustedSocket) as info:
        _claim(f"unix:{served}")
    message = str(info.value)
    assert f"socket directory {served.parent} is owned by uid {OTHER}" in message
    assert f"uid {ME} (this user)" in message
    assert f"--trust-owner {OTHER}" in message
    assert fake.claims == []
    assert _claim(f"unix:{served}", trust_owner=OTHER) == []
    assert len(fake.claims) == 1
    with pytest.raises(UntrustedSocket, match=f"owned by uid {OTHER}"):
        _claim(f"unix:{served}", trust_owner=OTHER + 1)


@pytest.mark.parametrize("trust_owner", [None, ME])
def test_a_socket_in_a_directory_anyone_may_write_to_is_always_refused(
    tmp_path: Path, fake: FakeLeaseKeeper, trust_owner: int | None
) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o1777)  # like /tmp: sticky, and anyone may add a socket
    sock = open_dir / "lk.sock"
    with serving(fake, sock), pytest.raises(UntrustedSocket, match=r"others \(mode 1777\)"):
        _claim(f"unix:{sock}", trust_owner=trust_owner)
    assert fake.claims == []


@pytest.mark.parametrize("dir_mode", [0o750, 0o770], ids=["0750", "0770"])
def test_a_socket_shared_with_a_group_is_accepted(
    tmp_path: Path, fake: FakeLeaseKeeper, dir_mode: int
) -> None:
    """``leasekeeper serve --socket-mode 0660`` run by another user of the group."""
    sock = tmp_path / "team" / "lk.sock"
    prepare_socket_dir(sock, 0o660)
    with serving(fake, sock) as target:
        sock.chmod(0o660)
        sock.parent.chmod(dir_mode)
        give(OTHER, sock.parent, sock)
        with pytest.raises(UntrustedSocket, match=f"--trust-owner {OTHER}"):
            _claim(target)
        assert _claim(target, trust_owner=OTHER) == []
    assert len(fake.claims) == 1


APP_SOURCE = """
from workers import App

app = App("owner-test")

@app.job("noop")
def noop(ctx, payload):
    pass
"""


@pytest.fixture
def app_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    name = f"owner_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(APP_SOURCE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    for variable in ("LEASEKEEPER_TARGET", "LEASEKEEPER_TOKEN", "JOBS_SCHEMA_PATH"):
        monkeypatch.delenv(variable, raising=False)
    return f"{name}:app"


def _run_worker(fake: FakeLeaseKeeper, *args: str) -> Result:
    """``workers run ARGS``; had the worker claimed from ``fake``, it would run on, so
    the first claim stops it (exit 0)."""
    finished = threading.Event()
    stopper = threading.Thread(target=_sigterm_on_first_claim, args=(fake, finished))
    stopper.start()
    try:
        return CliRunner().invoke(main, ["run", *args])
    finally:
        finished.set()
        with fake.cond:
            fake.cond.notify_all()
        stopper.join(10)


def test_workers_run_refuses_another_users_default_socket_with_exit_2(
    runtime_dir: Path, fake: FakeLeaseKeeper, app_module: str
) -> None:
    runtime_dir.mkdir(mode=0o700)
    with serving(fake, runtime_dir / "emails.sock"):
        give(OTHER, runtime_dir)
        result = _run_worker(fake, app_module)  # no --queue: this user's only leasekeeper
    assert result.exit_code == 2, result.output
    assert result.output.splitlines() == [
        f"Error: refusing to connect: the leasekeeper socket directory {runtime_dir} is owned "
        f"by uid {OTHER}, expected uid {ME} (this user)",
        "another user may have made it to hand this worker their jobs: have root remove it "
        "and restart the leasekeeper, or set XDG_RUNTIME_DIR to a private directory",
    ]
    assert fake.claims == []


def test_workers_run_exits_2_when_its_client_refuses_a_socket_made_after_it_started(
    served: Path, fake: FakeLeaseKeeper, app_module: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    give(OTHER, served.parent, served)
    # As if the socket appeared only after the start-up check: the client's own check refuses.
    monkeypatch.setattr("workers.cli.target_problem", lambda *_: None)
    result = _run_worker(fake, app_module, "--target", f"unix:{served}")
    assert result.exit_code == 2, result.output
    assert f"Error: refusing to connect: the leasekeeper socket directory {served.parent}" in (
        result.output
    )
    assert f"--trust-owner {OTHER}" in result.output
    assert fake.claims == []
    monkeypatch.setenv("LEASEKEEPER_TRUST_OWNER", str(OTHER))
    assert _run_worker(fake, app_module, "--target", f"unix:{served}").exit_code == 0
    assert len(fake.claims) >= 1, "trusted by the variable, the worker claimed"


def _sigterm_on_first_claim(fake: FakeLeaseKeeper, finished: threading.Event) -> None:
    with fake.cond:
        fake.cond.wait_for(lambda: bool(fake.claims) or finished.is_set(), 30)
        claimed = bool(fake.claims)
    if claimed:
        os.kill(os.getpid(), signal.SIGTERM)


def test_child_processes_get_the_trusted_owner() -> None:
    options = RunOptions(
        app_spec="m:app",
        target="unix:/run/lk.sock",
        token=None,
        concurrency=1,
        processes=2,
        worker_id="w",
        schema_dirs=(),
        grace_s=1.0,
        log_level="INFO",
        trust_owner=OTHER,
    )
    assert f"--trust-owner={OTHER}" in options.child_command(0, parent_pid=1)
