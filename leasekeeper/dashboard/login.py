"""``/login?token=TOKEN``: a link that hands the browser the token's cookie once.

A browser cannot be told to send a bearer header, and basic auth's prompt asks a
person to paste a long random token. A link printed where the token was made (``make
run``) instead carries it once: a right token gets the ``dashboard_token`` cookie
(HttpOnly, so no page script can read it; SameSite=Strict, so no other site's page
can make the browser act with it) and a redirect to the overview, so the token
leaves the address bar and the history's last entry. A wrong token gets nothing.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from http import HTTPStatus
from http.cookies import SimpleCookie
from urllib.parse import parse_qs

__all__ = ["COOKIE", "LOGIN_PATH", "LoginAnswer", "login"]

COOKIE = "dashboard_token"
LOGIN_PATH = "/login"


@dataclass(frozen=True, kw_only=True)
class LoginAnswer:
    status: HTTPStatus
    message: str = ""
    location: str | None = None
    set_cookie: str | None = None


def login(token: str | None, query: str, base: str) -> LoginAnswer:
    """The answer to ``GET /login?token=...`` for a dashboard whose token is ``token``."""
    if token is None:
        return LoginAnswer(
            status=HTTPStatus.NOT_FOUND,
            message="this dashboard has no DASHBOARD_TOKEN: there is nothing to log in to",
        )
    offered = parse_qs(query).get("token", [""])[0]
    if not offered or not hmac.compare_digest(offered.encode(), token.encode()):
        return LoginAnswer(
            status=HTTPStatus.FORBIDDEN,
            message="wrong or missing token: open the link the dashboard's starter printed",
        )
    cookie: SimpleCookie = SimpleCookie()
    cookie[COOKIE] = token
    morsel = cookie[COOKIE]
    morsel["path"] = base or "/"
    morsel["httponly"] = True
    morsel["samesite"] = "Strict"
    return LoginAnswer(
        status=HTTPStatus.SEE_OTHER,
        location=f"{base}/",
        set_cookie=morsel.OutputString(),
    )
