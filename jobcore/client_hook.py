"""The one seam where tests put Kafka clients of their own in place of librdkafka's.

``make_producer``, ``make_consumer``, ``make_admin`` and ``make_share_consumer``
(``jobcore.kafka``) go through :func:`build_client` once per client they build, never
per record; with nothing installed they build the real clients. The runtime never
installs anything: an in-memory cluster for tests (the ``memkafka`` package) does,
so the real loop, relay and feeds run in-process with no broker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

__all__ = ["ClientFactory", "build_client", "install_clients", "installed_clients"]

Client = TypeVar("Client")


class ClientFactory(Protocol):
    """Builds clients from the very config dict the real client would be given."""

    def producer(self, config: dict[str, Any]) -> Any: ...

    def consumer(self, config: dict[str, Any]) -> Any: ...

    def share_consumer(self, config: dict[str, Any]) -> Any: ...

    def admin(self, config: dict[str, Any]) -> Any: ...


_installed: list[ClientFactory | None] = [None]


def install_clients(factory: ClientFactory | None) -> ClientFactory | None:
    """Make every client from ``factory`` from now on (None: the real clients again);
    returns the one installed before, for a caller that restores it."""
    previous = _installed[0]
    _installed[0] = factory
    return previous


def installed_clients() -> ClientFactory | None:
    return _installed[0]


def build_client(
    kind: str, real: Callable[[dict[str, Any]], Client], config: dict[str, Any]
) -> Client:
    """``real(config)``, or the installed factory's client of ``kind`` (``producer``,
    ``consumer``, ``share_consumer``, ``admin``) built from the same config."""
    factory = _installed[0]
    if factory is None:
        return real(config)
    return cast(Client, getattr(factory, kind)(config))
