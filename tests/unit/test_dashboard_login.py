"""``/login?token=``: the link ``make run`` prints hands the browser the token's cookie."""

from __future__ import annotations

from http import HTTPStatus
from http.cookies import SimpleCookie
from urllib.parse import urlencode

import pytest

from leasekeeper.dashboard.access import Access, AccessPolicy, Request
from leasekeeper.dashboard.login import COOKIE, login

TOKEN = "s3cret-Token_1"


def presented(set_cookie: str) -> str | None:
    """What the browser sends back, parsed as the server parses a ``Cookie`` header."""
    sent = SimpleCookie(set_cookie)
    return sent[COOKIE].value if COOKIE in sent else None


@pytest.mark.parametrize("token", [TOKEN, 'with space; and "quotes"'])
def test_the_right_token_sets_a_strict_http_only_cookie_and_redirects(token: str) -> None:
    answer = login(token, urlencode({"token": token}), "")
    assert answer.status is HTTPStatus.SEE_OTHER
    assert answer.location == "/"
    assert answer.set_cookie is not None
    assert "HttpOnly" in answer.set_cookie and "SameSite=Strict" in answer.set_cookie
    assert "Path=/" in answer.set_cookie
    cookie = presented(answer.set_cookie)
    assert cookie == token
    visitor = Request(method="GET", peer="10.0.0.5", cookie_token=cookie)
    assert AccessPolicy(token=token).access(visitor) is Access.WRITE


def test_behind_a_prefix_the_cookie_and_the_redirect_stay_under_it() -> None:
    answer = login(TOKEN, f"token={TOKEN}", "/ops/jobs")
    assert answer.location == "/ops/jobs/"
    assert answer.set_cookie is not None and "Path=/ops/jobs" in answer.set_cookie


@pytest.mark.parametrize("query", ["", "token=", "token=wrong", f"token={TOKEN}x"])
def test_a_wrong_or_missing_token_gets_no_cookie(query: str) -> None:
    answer = login(TOKEN, query, "")
    assert answer.status is HTTPStatus.FORBIDDEN
    assert answer.set_cookie is None and answer.location is None
    assert "token" in answer.message


def test_without_a_token_there_is_nothing_to_log_in_to() -> None:
    answer = login(None, "token=anything", "")
    assert answer.status is HTTPStatus.NOT_FOUND
    assert answer.set_cookie is None
    assert "DASHBOARD_TOKEN" in answer.message
