"""Who may read and who may act: the dashboard's security policy, as pure functions.

Secure by default: the dashboard listens on loopback; any other address needs a
token (``DASHBOARD_TOKEN``) unless ``--insecure`` is given. Without credentials a
loopback visitor may read but not act. Write actions are POST only and must come
from the dashboard's own pages (``Sec-Fetch-Site: same-origin``) or from a
client that sends the token in ``Authorization`` (scripts, which send no
``Sec-Fetch-Site``); ``--read-only`` turns them off for everyone.
"""

from __future__ import annotations

import base64
import hmac
import ipaddress
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["Access", "AccessPolicy", "AccessVerdict", "Request", "listen_problem"]


class Access(StrEnum):
    DENIED = "denied"
    READ = "read"
    WRITE = "write"


class AccessVerdict(StrEnum):
    OK = "ok"
    UNAUTHORIZED = "unauthorized"  # 401: credentials needed
    FORBIDDEN = "forbidden"  # 403: credentials do not allow it, or a cross-site POST


@dataclass(frozen=True, kw_only=True)
class Request:
    """What the policy needs to know of one HTTP request."""

    method: str
    peer: str
    authorization: str | None = None
    cookie_token: str | None = None
    fetch_site: str | None = None


def is_loopback(host: str) -> bool:
    if host in ("localhost", ""):
        return host == "localhost"
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def listen_problem(host: str, *, token: str | None, insecure: bool) -> str | None:
    """Why the dashboard must not start on ``host``, or None."""
    if is_loopback(host) or token or insecure:
        return None
    return (
        f"--listen {host} is not loopback and no DASHBOARD_TOKEN is set: anyone who can "
        "reach it could replay and cancel jobs. Set DASHBOARD_TOKEN, or pass --insecure."
    )


@dataclass(frozen=True, kw_only=True)
class AccessPolicy:
    token: str | None
    insecure: bool = False
    read_only: bool = False

    def access(self, request: Request) -> Access:
        """What this visitor may do, before looking at the action."""
        if self._credentials_valid(request) or self.insecure:
            return Access.WRITE
        if self.token is None or not self._presented(request):
            return Access.READ if is_loopback(request.peer) else Access.DENIED
        return Access.DENIED  # a wrong token

    def check(self, request: Request) -> AccessVerdict:
        access = self.access(request)
        if access is Access.DENIED:
            return AccessVerdict.UNAUTHORIZED
        if request.method in ("GET", "HEAD"):
            return AccessVerdict.OK
        if request.method != "POST" or self.read_only or access is not Access.WRITE:
            return AccessVerdict.FORBIDDEN
        return AccessVerdict.OK if self._same_origin(request) else AccessVerdict.FORBIDDEN

    def who(self, request: Request) -> str:
        """For the audit log line of a write action."""
        if self._credentials_valid(request):
            user = _basic_user(request.authorization)
            return f"{user or 'token'}@{request.peer}"
        return f"anonymous@{request.peer}"

    def _same_origin(self, request: Request) -> bool:
        if request.fetch_site is None:  # not a browser: a script with the token
            return self._bearer(request.authorization) is not None and self._credentials_valid(
                request
            )
        return request.fetch_site == "same-origin"

    def _presented(self, request: Request) -> bool:
        return bool(request.authorization or request.cookie_token)

    def _credentials_valid(self, request: Request) -> bool:
        if self.token is None:
            return False
        offered = (
            self._bearer(request.authorization)
            or _basic_password(request.authorization)
            or request.cookie_token
        )
        return offered is not None and hmac.compare_digest(offered.encode(), self.token.encode())

    @staticmethod
    def _bearer(header: str | None) -> str | None:
        if header and header.lower().startswith("bearer "):
            return header[7:].strip()
        return None


def _basic(header: str | None) -> tuple[str, str] | None:
    if not header or not header.lower().startswith("basic "):
        return None
    try:
        user, _, password = base64.b64decode(header[6:].strip()).decode().partition(":")
    except (ValueError, UnicodeDecodeError):
        return None
    return user, password


def _basic_password(header: str | None) -> str | None:
    found = _basic(header)
    return found[1] if found else None


def _basic_user(header: str | None) -> str | None:
    found = _basic(header)
    return found[0] if found else None
