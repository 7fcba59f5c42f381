"""Who may reach a leasekeeper: the checks made before it listens (no one else gets in).

A Unix socket is private by default: its directory is created 0700 and must be
owned by the user running the leasekeeper and not writable by anyone else, and
the socket itself is 0600 (``--socket-mode`` opens it to a group). Any TCP
listener, loopback included, needs the shared token unless ``--insecure`` is
given, and ``--insecure`` only ever applies to loopback, which is decided by
parsing the address, never by how a name starts. TLS is optional on TCP.
"""

from __future__ import annotations

import ipaddress
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from jobcore.socket_owner import ownership_problem

log = logging.getLogger(__name__)

DEFAULT_SOCKET_MODE = 0o600


class ListenError(Exception):
    """A listen setting that cannot be used; the message says what to change."""


@dataclass(frozen=True, kw_only=True)
class ChannelSecurity:
    """How the worker channel is protected; built from flags and the environment."""

    token: str | None = None
    insecure: bool = False
    socket_mode: int = DEFAULT_SOCKET_MODE
    tls_cert: Path | None = None
    tls_key: Path | None = None

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None


def is_unix(listen: str) -> bool:
    return listen.startswith("unix:")


def socket_path(listen: str) -> Path:
    return Path(listen.removeprefix("unix:").removeprefix("//"))


def listen_host(listen: str) -> str:
    """The host of ``HOST:PORT`` or ``[V6]:PORT``."""
    host = listen.rsplit(":", 1)[0] if ":" in listen else listen
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    """True for a loopback IP address, and for ``localhost`` (reserved to loopback);
    any other name is not: ``127.example.com`` is an ordinary DNS name."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_listen(listen: str, security: ChannelSecurity) -> None:
    """Refuse a listen address and security settings that would let others in."""
    if (security.tls_cert is None) != (security.tls_key is None):
        raise ListenError("TLS needs both --tls-cert and --tls-key; give both or neither")
    if is_unix(listen):
        if security.tls:
            raise ListenError(f"TLS applies to TCP listeners; {listen} is a Unix socket")
        return
    _check_tcp(listen, security)


def preflight(listen: str, security: ChannelSecurity) -> None:
    """Every check ``start_rpc_server`` makes, before anything else starts."""
    check_listen(listen, security)
    if is_unix(listen):
        prepare_socket_dir(socket_path(listen), security.socket_mode)


def _check_tcp(listen: str, security: ChannelSecurity) -> None:
    loopback = is_loopback(listen_host(listen))
    if security.token:
        if not loopback and not security.tls:
            log.warning(
                "listening on %s beyond loopback without TLS: the token crosses the network "
                "in clear; add --tls-cert/--tls-key",
                listen,
            )
        return
    if not security.insecure:
        raise ListenError(
            f"--listen {listen} is a TCP listener and needs a shared token: set "
            "LEASEKEEPER_TOKEN (workers need the same), or pass --insecure on loopback"
        )
    if not loopback:
        raise ListenError(
            f"--insecure allows no token on loopback only, and {listen} is not a loopback "
            "address: set LEASEKEEPER_TOKEN"
        )


def socket_dir_mode(socket_mode: int) -> int:
    """The directory lets in whom the socket does: owner, plus group or others to reach it."""
    mode = 0o700
    if socket_mode & 0o060:
        mode |= 0o050
    if socket_mode & 0o006:
        mode |= 0o005
    return mode


def prepare_socket_dir(path: Path, socket_mode: int) -> None:
    """Create the socket's directory (0700 unless ``socket_mode`` shares the socket) or
    check the existing one: owned by this user and writable by nobody else, so no one
    can swap the socket for their own."""
    directory = path.parent
    if not directory.exists():
        mode = socket_dir_mode(socket_mode)
        directory.mkdir(parents=True, mode=mode)
        os.chmod(directory, mode)  # mkdir's mode is masked by the umask
    found = ownership_problem(
        directory, owners=(os.getuid(),), writable=0o022, what="socket directory"
    )
    if found is None:
        return
    if found.writable:  # /tmp among them: changing its mode would break the machine
        raise ListenError(
            f"{found.text}, so anyone could replace the socket: give --listen a path in a "
            "directory only you can write to (unix:DIR/NAME.sock; serve creates DIR 0700)"
        )
    raise ListenError(f"{found.text}: give --listen a path in a directory you own")


def parse_socket_mode(text: str) -> int:
    """An octal mode such as ``0660``: read and write for the owner at least, no execute."""
    try:
        mode = int(text, 8)
    except ValueError:
        raise ListenError(f"--socket-mode {text!r} is not an octal mode such as 0660") from None
    if mode & ~0o666 or mode & 0o600 != 0o600:
        raise ListenError(
            f"--socket-mode {text} must give the owner read and write (0600) and set no "
            "execute or special bits, such as 0600 or 0660"
        )
    return mode
