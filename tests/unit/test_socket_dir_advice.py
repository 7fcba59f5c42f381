"""A socket directory others may write to (``/tmp`` is one) is refused with advice
to use another directory, never to change the directory's mode: ``chmod go-w /tmp``
run as root would break every program that keeps files there."""

from __future__ import annotations

from pathlib import Path

import pytest

from leasekeeper.rpc.listen import ListenError, prepare_socket_dir


def test_a_shared_socket_directory_is_refused_without_chmod_advice(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)  # like /tmp
    with pytest.raises(ListenError) as refused:
        prepare_socket_dir(shared / "lk.sock", 0o600)
    message = str(refused.value)
    assert "writable by others" in message and "--listen" in message
    assert "chmod" not in message


def test_no_message_in_the_code_advises_chmod_go_w() -> None:
    root = Path(__file__).resolve().parents[2]
    sources = [p for d in ("jobcore", "leasekeeper", "producer", "workers")
               for p in (root / d).rglob("*.py")]  # fmt: skip
    assert sources
    assert not [p for p in sources if "chmod go-w" in p.read_text()]
