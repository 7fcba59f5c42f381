"""Whose Unix socket it is: the ownership rules both ends of the worker channel apply.

Whoever owns a socket's directory, or may write to it, decides which server
answers there. The leasekeeper refuses to listen in a directory it does not own
(``leasekeeper/rpc/listen.py``); a worker refuses to connect to a socket whose
directory or file belongs to a user it does not trust, since that user's
server would hand it jobs to run with its credentials and read their results.

A worker trusts, for the default socket (``jobcore.config.socket_directory``,
a directory of its own user's), only its own user; for a ``--target`` it was
given, also root and one uid it names (``--trust-owner``). It never trusts a
directory others may write to (o+w: anyone could put a socket there); a
group-writable one is accepted (the socket's own owner is checked too, so a
group member's socket is still refused), and so is a group-shared socket
(``leasekeeper serve --socket-mode 0660``).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

from jobcore.config import ENV_TRUST_OWNER, socket_directory

__all__ = [
    "OTHERS_WRITE",
    "ROOT_UID",
    "OwnerProblem",
    "ownership_problem",
    "socket_absent",
    "target_problem",
]

ROOT_UID = 0
# The write bits a worker refuses on a socket's directory (the leasekeeper refuses
# group-write as well on its own directory).
OTHERS_WRITE = 0o002


class OwnerProblem(NamedTuple):
    """Why a path is not safe: ``text`` names it, its owner and what was expected."""

    text: str
    owner: int
    writable: bool  # False: the owner is wrong


def _uid_name(uid: int) -> str:
    if uid == os.getuid():
        return f"uid {uid} (this user)"
    return f"uid {uid} (root)" if uid == ROOT_UID else f"uid {uid}"


def ownership_problem(
    path: Path, *, owners: Collection[int], writable: int, what: str
) -> OwnerProblem | None:
    """What makes ``path`` unsafe: owned by none of ``owners``, or any bit of
    ``writable`` set in its mode; None when it is safe. Raises OSError when it
    cannot be read."""
    info = path.stat()
    if info.st_uid not in owners:
        expected = " or ".join(_uid_name(uid) for uid in sorted(set(owners)))
        text = f"{what} {path} is owned by uid {info.st_uid}, expected {expected}"
        return OwnerProblem(text=text, owner=info.st_uid, writable=False)
    if info.st_mode & writable:
        mode = stat.S_IMODE(info.st_mode)
        text = f"{what} {path} is writable by others (mode {mode:04o})"
        return OwnerProblem(text=text, owner=info.st_uid, writable=True)
    return None


def target_problem(target: str, trust_owner: int | None = None) -> str | None:
    """Why a worker must not connect to ``target`` (two lines: what, then the fix),
    or None. Only ``unix:`` paths are checked; a socket or directory that does not
    exist yet is no problem (the connect fails, and the next one checks again).
    Made once per channel, never per job."""
    if not target.startswith("unix:"):
        return None
    sock = _socket_path(target)
    default = sock.parent.absolute() == socket_directory().absolute()
    owners = {os.getuid()}
    if not default:
        owners |= {ROOT_UID} if trust_owner is None else {ROOT_UID, trust_owner}
    for path, what in ((sock.parent, "socket directory"), (sock, "socket")):
        try:
            found = ownership_problem(path, owners=owners, writable=OTHERS_WRITE, what=what)
        except FileNotFoundError:
            return None
        except OSError as exc:
            return (
                f"refusing to connect: cannot check who owns the leasekeeper {what} {path} "
                f"({exc.strerror})\ngive --target a socket this user may reach"
            )
        if found is not None:
            return f"refusing to connect: the leasekeeper {found.text}\n{_fix(found, default)}"
    return None


def socket_absent(target: str) -> str | None:
    """What is missing where a ``unix:`` target should be (its directory, the socket,
    or a socket in place of another file), or None: for the warning of a worker that
    started first or was given the wrong path. Made once per outage, never per job."""
    if not target.startswith("unix:"):
        return None
    sock = _socket_path(target)
    if not sock.parent.is_dir():
        return f"the socket directory {sock.parent} does not exist"
    if not sock.exists():
        return f"no socket at {sock} (the path does not exist)"
    if not sock.is_socket():
        return f"{sock} is not a socket"
    return None


def _socket_path(target: str) -> Path:
    return Path(target.removeprefix("unix:").removeprefix("//"))


def _fix(found: OwnerProblem, default: bool) -> str:
    if found.writable:
        return (
            "anyone could put a socket there: give --target a socket in a directory only "
            "its owner can write to (as `leasekeeper serve` creates)"
        )
    if default:
        return (
            "another user may have made it to hand this worker their jobs: have root remove "
            "it and restart the leasekeeper, or set XDG_RUNTIME_DIR to a private directory"
        )
    return (
        f"if uid {found.owner} runs your leasekeeper, trust it with --trust-owner "
        f"{found.owner} ({ENV_TRUST_OWNER}; trust_owner= in Python)"
    )
