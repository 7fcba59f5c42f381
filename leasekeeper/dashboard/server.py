"""The dashboard's HTTP server: routing, the access policy, the audit log.

Python's own threaded HTTP server is enough for a handful of operators and
keeps the dashboard free of a web framework; pages are plain functions of the
fleet state and Kafka. ``base_path`` lets it run behind a reverse proxy under a
prefix: links carry the prefix, and requests with or without it are accepted.
Every request's ``Host`` is checked first (``hosts.py``), against DNS rebinding.
"""

from __future__ import annotations

import json
import logging
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, quote, urlsplit

from jobcore.kafka import KafkaException
from jobcore.plain import plain
from leasekeeper.dashboard.access import AccessPolicy, AccessVerdict, Request
from leasekeeper.dashboard.actions import (
    Actions,
    FilterError,
    page_cursors,
    selection_from_query,
)
from leasekeeper.dashboard.answers import Response, api_error, kafka_trouble, no_queue
from leasekeeper.dashboard.dlq_pages import dlq_entry_page, dlq_list_page
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.hosts import HostCheck, HostRefusal
from leasekeeper.dashboard.html import e, layout, link, live
from leasekeeper.dashboard.job_detail import job_at, job_section
from leasekeeper.dashboard.job_lookup import job_page, lookup
from leasekeeper.dashboard.kafka_view import KafkaView
from leasekeeper.dashboard.login import COOKIE, LOGIN_PATH, login
from leasekeeper.dashboard.pages import (
    leasekeepers_page,
    overview_page,
    queue_page,
    scheduled_page,
)
from leasekeeper.dashboard.relays_view import RelayState, relays_section
from leasekeeper.dlq.reader import DlqError

__all__ = ["Dashboard", "DashboardServer"]

log = logging.getLogger(__name__)
audit = logging.getLogger("leasekeeper.dashboard.audit")

_QUEUE = r"([A-Za-z0-9._-]+)"
OVERVIEW_MAX = 30


@dataclass(frozen=True, kw_only=True)
class Dashboard:
    """Everything a page needs; one per server."""

    fleet: FleetState
    kafka: KafkaView
    actions: Actions
    policy: AccessPolicy
    base: str = ""
    wall: Callable[[], float] = time.time
    relays: RelayState = field(default_factory=RelayState)
    hosts: HostCheck = field(default_factory=HostCheck)

    def now_ms(self) -> int:
        return round(self.wall() * 1000)

    def queues(self) -> list[str]:
        """Every queue of the cluster: those with live leasekeepers first."""
        live = self.fleet.queues(self.now_ms())
        return live + [q for q in self.kafka.queues() if q not in live]

    def shown_queues(self) -> tuple[list[str], list[str]]:
        """The queues the overview measures (live ones first, ``OVERVIEW_MAX`` at
        most: a shared cluster may hold hundreds), and the rest, listed by name."""
        every = self.queues()
        return every[:OVERVIEW_MAX], every[OVERVIEW_MAX:]


def _page(d: Dashboard, title: str, active: str, body: str) -> Response:
    html = layout(title=title, base=d.base, active=active, body=body, read_only=d.policy.read_only)
    return Response(status=HTTPStatus.OK, body=html)


def _json(value: object) -> Response:
    return Response(status=HTTPStatus.OK, body=json.dumps(value), content_type="application/json")


def _error(d: Dashboard, status: HTTPStatus, message: str) -> Response:
    page = _page(d, status.phrase, "", f'<p class="bad" id="problem">{e(message)}</p>')
    return Response(status=status, body=page.body, message=message)


def get(d: Dashboard, path: str, query: str) -> Response:
    """Route a GET (path without the base)."""
    now = d.now_ms()
    if path in ("", "/"):
        shown, others = d.shown_queues()
        body = overview_page(d.base, d.fleet, d.kafka, shown, now) + _others(d, others)
        body += live("relays", relays_section(d.relays.current(now), now))
        return _page(d, "Overview", "", body)
    if path == "/leasekeepers":
        d.kafka.topics()  # with Kafka down, say so rather than list no leasekeepers
        return _page(d, "Leasekeepers and workers", "leasekeepers", leasekeepers_page(d.fleet, now))
    if path == "/scheduled":
        return _page(d, "Scheduled", "scheduled", scheduled_page(d.base, d.fleet, d.kafka, now))
    if path == "/dlq":
        links = "".join(f"<li>{link(d.base, f'dlq/{q}', q)}</li>" for q in d.queues()[:500])
        return _page(d, "Dead letters", "dlq", f"<ul>{links}</ul>")
    if path == "/job":
        return _job(d, query)
    if path == "/api/overview":
        return _json(_overview_json(d))
    if path == "/api/job":
        job_id, queues = _job_query(d, query)
        if (refused := _unknown_queue(d, queues)) is not None:
            return refused
        return _json(plain(lookup(d.actions, d.fleet, queues, job_id, now)))
    return _queue_routes(d, path, query)


def _queue_routes(d: Dashboard, path: str, query: str) -> Response:
    named = re.match(r"/(?:queues|dlq)/([^/]+)", path)
    if named and named.group(1) not in (known := d.queues()):
        return _error(d, HTTPStatus.NOT_FOUND, no_queue(named.group(1), known))
    if m := re.fullmatch(f"/queues/{_QUEUE}", path):
        body = queue_page(d.base, m.group(1), d.fleet, d.kafka, d.now_ms())
        return _page(d, f"Queue {m.group(1)}", "", body)
    if m := re.fullmatch(f"/dlq/{_QUEUE}", path):
        queue = m.group(1)
        before, after = page_cursors(query)
        selection = selection_from_query(query)
        page = d.actions.dead_letters(queue, selection, before=before, after=after)
        body = dlq_list_page(d.base, queue, page, query, d.policy.read_only)
        return _page(d, f"Dead letters of {queue}", "dlq", body)
    if m := re.fullmatch(f"/dlq/{_QUEUE}/([0-9]+)/([0-9]+)", path):
        queue, partition, offset = m.group(1), int(m.group(2)), int(m.group(3))
        entry = d.actions.dead_letter(queue, partition, offset)
        if entry is None:
            return _error(d, HTTPStatus.NOT_FOUND, f"no dead letter at {partition}/{offset}")
        body = dlq_entry_page(d.base, queue, entry, d.policy.read_only)
        return _page(d, f"Dead letter {partition}/{offset} of {queue}", "dlq", body)
    return _error(d, HTTPStatus.NOT_FOUND, "no such page")


def _others(d: Dashboard, others: list[str]) -> str:
    if not others:
        return ""
    links = ", ".join(link(d.base, f"queues/{q}", q) for q in others[:500])
    return f"<details><summary>{len(others)} more queues</summary><p>{links}</p></details>"


def _job_query(d: Dashboard, query: str) -> tuple[str, list[str]]:
    """The job id, and the queues whose status topics to read: the one given, or
    those with live leasekeepers (reading every queue's would not scale)."""
    values = parse_qs(query)
    job_id = values.get("id", [""])[0].strip()
    queue = values.get("queue", [""])[0].strip()
    return job_id, [queue] if queue else d.fleet.queues(d.now_ms())


def _unknown_queue(d: Dashboard, queues: list[str]) -> Response | None:
    """A queue asked for by name that is malformed (400) or not there (404): said so,
    never looked up (a malformed name must not reach the status index's reader)."""
    for queue in queues:
        if not re.fullmatch(_QUEUE, queue):
            message = f"invalid queue name {queue!r}: use letters, digits, . _ -"
            return _error(d, HTTPStatus.BAD_REQUEST, message)
    if len(queues) == 1 and queues[0] not in (known := d.queues()):
        return _error(d, HTTPStatus.NOT_FOUND, no_queue(queues[0], known))
    return None


def _job(d: Dashboard, query: str) -> Response:
    job_id, queues = _job_query(d, query)
    if (refused := _unknown_queue(d, queues)) is not None:
        return refused
    found = lookup(d.actions, d.fleet, queues, job_id, d.now_ms()) if job_id else None
    body = job_page(d.base, job_id, found, can_act=not d.policy.read_only)
    where = found.lease_id or found.record if found is not None else None
    if where:
        held = job_at(d.actions.kafka, d.actions.codec, where)
        body += job_section(held, d.actions.codec)
    return _page(d, "Job", "job", body)


def _overview_json(d: Dashboard) -> dict[str, object]:
    now = d.now_ms()
    queues = {}
    for queue in d.shown_queues()[0]:
        offsets = d.kafka.offsets(queue)
        history = d.fleet.history(queue)
        queues[queue] = {
            "backlog": offsets.backlog,
            "dlq_depth": offsets.dlq_depth,
            "oldest_ready_ms": offsets.oldest_ready_ms,
            "processed_per_s": history[-1].processed if history else None,
            "failed_per_s": history[-1].failed if history else None,
        }
    return {
        "queues": queues,
        "leasekeepers": d.fleet.current(now),
        "outbox_relays": [plain(r) for r in d.relays.current(now)],
    }


def _cancel(d: Dashboard, query: str, who: str) -> Response:
    values = parse_qs(query)
    queue = values.get("queue", [""])[0].strip()
    job_id = values.get("id", [""])[0].strip()
    if not re.fullmatch(_QUEUE, queue) or not job_id:
        return _error(d, HTTPStatus.BAD_REQUEST, "cancel needs a queue and a job id")
    audit.info("%s: cancel job %s of %s", who, job_id, queue)
    d.actions.cancel(queue, job_id, reason=f"cancelled from the dashboard by {who}")
    back = link(d.base, f"job?id={job_id}&queue={queue}", "look the job up")
    body = f'<p id="cancel-result">cancellation recorded for {e(job_id)}</p><p>{back}</p>'
    return _page(d, "Cancel", "job", body)


def post(d: Dashboard, path: str, query: str, who: str) -> Response:
    """The write actions: cancel a job; replay (or its dry run) of a DLQ selection."""
    if path == "/job/cancel":
        return _cancel(d, query, who)
    m = re.fullmatch(f"/dlq/{_QUEUE}/replay", path)
    if m is None:
        return _error(d, HTTPStatus.NOT_FOUND, "no such action")
    queue = m.group(1)
    form_mode = parse_qs(query).get("mode", ["dry-run"])[0]
    selection = selection_from_query(query)
    dry_run = form_mode != "replay"
    audit.info(
        "%s: %s dead letters of %s matching %s",
        who,
        "dry run of replay of" if dry_run else "replay",
        queue,
        selection,
    )
    report = d.actions.replay(queue, selection, dry_run=dry_run)
    count = len(report.selected) if dry_run else report.replayed
    verb = "would replay" if dry_run else "replayed"
    failed = "".join(f'<li class="bad">{e(f)}</li>' for f in report.failed)
    back = link(d.base, f"dlq/{queue}", "back to the dead letters")
    body = (
        f'<p id="replay-result">{e(verb)} {count} of {report.scanned} read '
        f"({report.not_matching} not matching, {len(report.undecodable)} undecodable)</p>"
        f"<ul>{failed}</ul><p>{back}</p>"
    )
    return _page(d, "Replay" if not dry_run else "Replay: dry run", "dlq", body)


class _Handler(BaseHTTPRequestHandler):
    dashboard: Dashboard
    server_version = "jobqueue-dashboard"

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_HEAD(self) -> None:
        self._serve("HEAD")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _request(self) -> Request:
        cookie = SimpleCookie(self.headers.get("Cookie", ""))
        token = cookie[COOKIE].value if COOKIE in cookie else None
        return Request(
            method=self.command,
            peer=self.client_address[0],
            authorization=self.headers.get("Authorization"),
            cookie_token=token,
            fetch_site=self.headers.get("Sec-Fetch-Site"),
        )

    def _serve(self, method: str) -> None:
        d = self.dashboard
        refusal = d.hosts.refusal(self.headers.get_all("Host") or [])
        if refusal is not None:
            self._refuse_host(refusal, head=method == "HEAD")
            return
        url = urlsplit(self.path)
        path = url.path
        if d.base and (path == d.base or path.startswith(d.base + "/")):
            path = path[len(d.base) :]
        query = url.query
        if path == LOGIN_PATH and method in ("GET", "HEAD"):  # before: it brings the token
            self._send(self._login(query), head=method == "HEAD")
            return
        request = self._request()
        verdict = d.policy.check(request)
        if verdict is not AccessVerdict.OK:
            self._refuse(verdict)
            return
        if method == "POST":
            query = "&".join(q for q in (query, self._form()) if q)
        try:
            response = (
                post(d, path, query, d.policy.who(request))
                if method == "POST"
                else get(d, path, query)
            )
        except FilterError as exc:
            response = _error(d, HTTPStatus.BAD_REQUEST, str(exc))
        except (KafkaException, DlqError) as exc:
            trouble = kafka_trouble(exc, d.kafka.bootstrap)
            response = _error(d, HTTPStatus.SERVICE_UNAVAILABLE, trouble)
        if path.startswith("/api/") and response.status >= HTTPStatus.BAD_REQUEST:
            response = api_error(response.status, response.message)
        self._send(response, head=method == "HEAD")

    def _login(self, query: str) -> Response:
        d = self.dashboard
        answer = login(d.policy.token, query, d.base)
        if answer.set_cookie is None or answer.location is None:
            return _error(d, answer.status, answer.message)
        log.info("%s logged in with the token", self.address_string())
        headers = (("Location", answer.location), ("Set-Cookie", answer.set_cookie))
        return Response(status=answer.status, body="", headers=headers)

    def _form(self) -> str:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(min(length, 65536)).decode(errors="replace") if length else ""

    def _refuse(self, verdict: AccessVerdict) -> None:
        d = self.dashboard
        if verdict is AccessVerdict.UNAUTHORIZED:
            status, text = HTTPStatus.UNAUTHORIZED, "credentials needed (DASHBOARD_TOKEN)"
        else:
            status, text = HTTPStatus.FORBIDDEN, "not allowed: read-only, or not from this page"
        response = _error(d, status, text)
        self._send(response, challenge=verdict is AccessVerdict.UNAUTHORIZED)

    def _refuse_host(self, refusal: HostRefusal, *, head: bool) -> None:
        """Plain text, nothing of the dashboard's pages: the asker may be a foreign site."""
        log.info("refused %s: %s", self.address_string(), refusal.message)
        body = refusal.message + "\n"
        plain = Response(status=refusal.status, body=body, content_type="text/plain; charset=utf-8")
        self._send(plain, head=head)

    def _send(self, response: Response, *, head: bool = False, challenge: bool = False) -> None:
        data = response.body.encode()
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("X-Frame-Options", "DENY")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Referrer-Policy", "same-origin")
        if challenge:
            self.send_header("WWW-Authenticate", 'Basic realm="job queue dashboard"')
        for name, value in response.headers:
            self.send_header(name, value)
        self.end_headers()
        if not head:
            self.wfile.write(data)


class DashboardServer:
    """The HTTP server on its own thread; ``address`` is what it bound."""

    def __init__(self, dashboard: Dashboard, host: str, port: int) -> None:
        handler = type("Handler", (_Handler,), {"dashboard": dashboard})
        self._httpd = ThreadingHTTPServer((host, port), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, name="dashboard-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


def url_of(host: str, port: int, base: str) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}{quote(base)}/"
