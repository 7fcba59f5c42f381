"""How a call to the leasekeeper fails, as the worker's loops tell the cases apart:
try again later (``LeaseKeeperUnavailable``), or stop (``LeaseKeeperRejected``,
and its case ``UntrustedSocket``). ``workers.client`` raises them."""

from __future__ import annotations


class LeaseKeeperUnavailable(Exception):
    """The call did not reach a working leasekeeper; trying again later may work.

    ``reconnecting`` is True when the client already waits out a backoff
    before its next call, so the caller need not pause on its own.
    """

    def __init__(self, message: str, *, reconnecting: bool = False) -> None:
        super().__init__(message)
        self.reconnecting = reconnecting


class LeaseKeeperRejected(Exception):
    """The leasekeeper refused the call in a way retrying cannot fix (token, version)."""


class UntrustedSocket(LeaseKeeperRejected):
    """The client would not connect: the Unix socket, or its directory, belongs to a
    user it does not trust (or anyone may write to the directory), so the server
    there may be someone else's, handing out their jobs (``jobcore.socket_owner``).
    A rejection: the worker stops, and ``workers run`` exits 2."""
