"""Who may reach a leasekeeper: socket permissions, tokens on TCP, loopback, TLS."""

from __future__ import annotations

import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from click.testing import CliRunner

from jobcore.config import default_leasekeeper_target
from leasekeeper.core.store import LeaseStore
from leasekeeper.engine import EngineConfig, LeaseEngine
from leasekeeper.ops.cli import main as leasekeeper_cli
from leasekeeper.rpc.listen import (
    ChannelSecurity,
    ListenError,
    check_listen,
    is_loopback,
    listen_host,
    parse_socket_mode,
)
from leasekeeper.rpc.server import start_rpc_server, token_matches
from workers.client import LeaseKeeperClient, LeaseKeeperRejected, LeaseKeeperUnavailable


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def engine(tmp_path: Path) -> LeaseEngine:
    store = LeaseStore(tmp_path / "state")
    return LeaseEngine(store=store, config=EngineConfig())


@pytest.fixture
def serve(engine: LeaseEngine) -> Iterator[list[grpc.Server]]:
    servers: list[grpc.Server] = []
    yield servers
    for server in servers:
        server.stop(0).wait()


def _start(engine: LeaseEngine, listen: str, security: ChannelSecurity) -> grpc.Server:
    return start_rpc_server(engine=engine, snapshot=dict, listen=listen, security=security)


def test_the_socket_directory_is_created_0700_and_the_socket_is_0600(
    tmp_path: Path, engine: LeaseEngine, serve: list[grpc.Server]
) -> None:
    path = tmp_path / "run" / "lk" / "leasekeeper.sock"
    serve.append(_start(engine, f"unix:{path}", ChannelSecurity()))
    assert _mode(path.parent) == 0o700
    assert path.parent.stat().st_uid == os.getuid()
    assert stat.S_ISSOCK(path.stat().st_mode) and _mode(path) == 0o600


def test_socket_mode_shares_the_socket_and_its_directory_with_the_group(
    tmp_path: Path, engine: LeaseEngine, serve: list[grpc.Server]
) -> None:
    path = tmp_path / "shared" / "leasekeeper.sock"
    security = ChannelSecurity(socket_mode=parse_socket_mode("0660"))
    serve.append(_start(engine, f"unix:{path}", security))
    assert (_mode(path.parent), _mode(path)) == (0o750, 0o660)


@pytest.mark.parametrize("text", ["0644x", "0700", "0400", "4660", "0777"])
def test_a_socket_mode_that_is_not_read_write_for_the_owner_is_refused(text: str) -> None:
    with pytest.raises(ListenError, match="--socket-mode"):
        parse_socket_mode(text)


def test_a_socket_directory_owned_by_someone_else_is_refused(
    tmp_path: Path, engine: LeaseEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "theirs").mkdir(mode=0o700)
    other = os.getuid() + 1
    monkeypatch.setattr("leasekeeper.rpc.listen.os.getuid", lambda: other)
    with pytest.raises(ListenError, match="expected uid"):
        _start(engine, f"unix:{tmp_path / 'theirs' / 'lk.sock'}", ChannelSecurity())


def test_a_socket_directory_others_can_write_to_is_refused(
    tmp_path: Path, engine: LeaseEngine
) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    with pytest.raises(ListenError, match="writable by others"):
        _start(engine, f"unix:{open_dir / 'lk.sock'}", ChannelSecurity())


def test_the_default_socket_is_in_a_directory_of_this_user(tmp_path: Path) -> None:
    runtime = default_leasekeeper_target({"XDG_RUNTIME_DIR": str(tmp_path)})
    assert runtime == f"unix:{tmp_path}/kafka-lease-queue/leasekeeper.sock"
    assert default_leasekeeper_target({}).endswith(
        f"kafka-lease-queue-{os.getuid()}/leasekeeper.sock"
    )


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.1.2.3", True),
        ("::1", True),
        ("localhost", True),
        ("127.evil.com", False),
        ("localhost.evil.com", False),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
    ],
)
def test_loopback_is_decided_by_parsing_the_address(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_the_host_of_a_listen_address() -> None:
    assert listen_host("[::1]:7000") == "::1"
    assert listen_host("127.0.0.1:7000") == "127.0.0.1"


def test_any_tcp_listener_needs_a_token_unless_insecure_on_loopback() -> None:
    with pytest.raises(ListenError, match="LEASEKEEPER_TOKEN"):
        check_listen("127.0.0.1:7000", ChannelSecurity())
    check_listen("127.0.0.1:7000", ChannelSecurity(insecure=True))
    check_listen("[::1]:7000", ChannelSecurity(insecure=True))
    with pytest.raises(ListenError, match="not a loopback"):
        check_listen("127.evil.com:7000", ChannelSecurity(insecure=True))
    with pytest.raises(ListenError, match="not a loopback"):
        check_listen("0.0.0.0:7000", ChannelSecurity(insecure=True))
    check_listen("0.0.0.0:7000", ChannelSecurity(token="s3cret"))


def test_serve_on_tcp_without_a_token_exits_with_one_clear_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEASEKEEPER_TOKEN", raising=False)
    args = ["serve", "--queue", "q", "--state-dir", str(tmp_path), "--listen", "127.0.0.1:7000"]
    result = CliRunner().invoke(leasekeeper_cli, args)
    assert result.exit_code == 1
    assert "needs a shared token" in result.output and "--insecure" in result.output
    assert "Traceback" not in result.output


def test_tokens_are_compared_whole() -> None:
    assert token_matches("s3cret", b"s3cret")
    assert token_matches(b"s3cret", b"s3cret")
    assert not token_matches("s3cre", b"s3cret")
    assert not token_matches("s3cret2", b"s3cret")
    assert not token_matches(None, b"s3cret")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_a_tcp_listener_refuses_a_wrong_token(
    engine: LeaseEngine, serve: list[grpc.Server]
) -> None:
    target = f"127.0.0.1:{_free_port()}"
    serve.append(_start(engine, target, ChannelSecurity(token="s3cret")))
    with (
        LeaseKeeperClient(target, worker_id="w", token="guess") as client,
        pytest.raises(LeaseKeeperRejected, match="UNAUTHENTICATED"),
    ):
        client.claim(1, 0)
    with LeaseKeeperClient(target, worker_id="w", token="s3cret") as client:
        assert client.claim(1, 0) == []


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    pytest.importorskip("cryptography.x509")
    from tests.certs import self_signed

    made = self_signed()
    cert_path, key_path = tmp_path / "lk.crt", tmp_path / "lk.key"
    cert_path.write_bytes(made.cert_pem)
    key_path.write_bytes(made.key_pem)
    return cert_path, key_path


def test_tls_on_tcp_serves_workers_that_trust_its_certificate(
    tmp_path: Path, engine: LeaseEngine, serve: list[grpc.Server]
) -> None:
    cert, key = _self_signed(tmp_path)
    port = _free_port()
    security = ChannelSecurity(token="s3cret", tls_cert=cert, tls_key=key)
    serve.append(_start(engine, f"127.0.0.1:{port}", security))
    with LeaseKeeperClient(
        f"localhost:{port}", worker_id="w", token="s3cret", tls_ca=cert.read_bytes()
    ) as client:
        assert client.claim(1, 0) == []
    with (
        LeaseKeeperClient(f"127.0.0.1:{port}", worker_id="w", token="s3cret") as plain,
        pytest.raises(LeaseKeeperUnavailable),
    ):
        plain.claim(1, 0)


def test_tls_needs_both_certificate_and_key(tmp_path: Path) -> None:
    with pytest.raises(ListenError, match="both --tls-cert and --tls-key"):
        check_listen("127.0.0.1:7000", ChannelSecurity(token="t", tls_cert=tmp_path / "c"))
