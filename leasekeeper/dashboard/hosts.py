"""Which ``Host`` headers the dashboard answers: its defence against DNS rebinding.

A web page the operator opens can point its own DNS name at 127.0.0.1. The browser
then treats the dashboard as that page's origin: it may read every page (dead
letters with payloads and tracebacks, jobs) and, under ``--insecure``, even pass the
same-origin check of the write actions. The request still names the page's host in
``Host``, so answering only the names the operator reaches the dashboard by
(loopback names, the ``--listen`` host, each ``--allowed-host``) shuts that out. An
IP literal in ``Host`` cannot come from a rebound name, but only the listed ones are
allowed, so the list stays the one place to look.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus

__all__ = ["LOOPBACK_HOSTS", "HostCheck", "HostRefusal", "host_name", "normal_host"]

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_SHOWN_MAX = 100  # a refusal quotes at most this much of a foreign Host header


def normal_host(name: str) -> str:
    """One spelling per host: lower case, no brackets or trailing dot, IPv6 compressed
    (``[0:0::1]`` and ``::1`` are the same host)."""
    name = name.strip().lower().removeprefix("[").removesuffix("]").rstrip(".")
    try:
        return ipaddress.ip_address(name).compressed
    except ValueError:
        return name


def host_name(header: str) -> str | None:
    """The host of a ``Host`` header without its port, normalised; None if malformed
    (``[::1`` unclosed, a port that is not a number, a bare IPv6 address)."""
    text = header.strip()
    if text.startswith("["):
        end = text.find("]")
        name, rest = (text[1:end], text[end + 1 :]) if end > 0 else ("", "")
        if name and ":" not in name:
            return None  # brackets are for IPv6 only
    else:
        name, colon, port = text.partition(":")
        rest = colon + port
    if rest and not (rest.startswith(":") and rest[1:].isdigit()):
        return None
    normal = normal_host(name)
    return normal or None


@dataclass(frozen=True, kw_only=True)
class HostRefusal:
    """Why a request is not answered: the status and a short plain-text message."""

    status: HTTPStatus
    message: str


@dataclass(frozen=True)
class HostCheck:
    """The host names the dashboard answers to; every request is checked, whatever
    its path or method, before the access policy."""

    allowed: frozenset[str] = field(default_factory=lambda: frozenset(LOOPBACK_HOSTS))

    @classmethod
    def of(cls, names: Iterable[str]) -> HostCheck:
        """Loopback names plus ``names`` (the ``--listen`` host, each ``--allowed-host``)."""
        return cls(frozenset(LOOPBACK_HOSTS) | {normal_host(n) for n in names if n.strip()})

    def refusal(self, headers: Sequence[str]) -> HostRefusal | None:
        """None if the request's ``Host`` header (all its values) names an allowed host.

        HTTP/1.1 requires exactly one ``Host``; a request without one, with several or
        with a malformed one is a bad request, since its target cannot be told."""
        if len(headers) != 1:
            problem = "no Host header" if not headers else "more than one Host header"
            return HostRefusal(status=HTTPStatus.BAD_REQUEST, message=f"{problem}: send one")
        name = host_name(headers[0])
        if name is None:
            shown = headers[0][:_SHOWN_MAX]
            return HostRefusal(
                status=HTTPStatus.BAD_REQUEST,
                message=f"malformed Host header {shown!r}: send HOST or HOST:PORT",
            )
        if name in self.allowed:
            return None
        shown = name[:_SHOWN_MAX]
        return HostRefusal(
            status=HTTPStatus.FORBIDDEN,
            message=(
                f"host {shown!r} is not allowed (a guard against DNS rebinding); if you reach "
                f"the dashboard by that name, start it with --allowed-host {shown}"
            ),
        )
