"""The dashboard's pure parts: access policy, fleet state, snapshot caps, HTML escaping."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from jobcore.cron_board import CronEntryView, scheduler_names
from leasekeeper.dashboard.access import AccessPolicy, AccessVerdict, Request, listen_problem
from leasekeeper.dashboard.actions import FilterError, page_cursors, selection_from_query
from leasekeeper.dashboard.cron_view import CronRow
from leasekeeper.dashboard.fleet_view import FleetState
from leasekeeper.dashboard.hosts import HostCheck, host_name
from leasekeeper.dashboard.html import Raw, table
from leasekeeper.dashboard.kafka_view import discover_queues
from leasekeeper.dashboard.pages import cron_section
from leasekeeper.views.fleet import cap_leases, fleet_record

TOKEN = "s3cret"


def req(method: str = "GET", peer: str = "127.0.0.1", **kw: str | None) -> Request:
    return Request(method=method, peer=peer, **kw)  # type: ignore[arg-type]


def test_loopback_without_credentials_reads_but_cannot_act() -> None:
    policy = AccessPolicy(token=TOKEN)
    assert policy.check(req()) is AccessVerdict.OK
    assert policy.check(req("POST", fetch_site="same-origin")) is AccessVerdict.FORBIDDEN


def test_other_addresses_need_the_token() -> None:
    policy = AccessPolicy(token=TOKEN)
    assert policy.check(req(peer="10.0.0.5")) is AccessVerdict.UNAUTHORIZED
    bearer = f"Bearer {TOKEN}"
    assert policy.check(req(peer="10.0.0.5", authorization=bearer)) is AccessVerdict.OK
    assert policy.check(req(peer="10.0.0.5", authorization="Bearer wrong")) is (
        AccessVerdict.UNAUTHORIZED
    )


def test_basic_auth_password_and_cookie_are_the_token() -> None:
    policy = AccessPolicy(token=TOKEN)
    basic = "Basic " + base64.b64encode(f"ops:{TOKEN}".encode()).decode()
    post = req("POST", peer="10.0.0.5", authorization=basic, fetch_site="same-origin")
    assert policy.check(post) is AccessVerdict.OK
    assert policy.who(post) == "ops@10.0.0.5"
    cookie = req("POST", peer="10.0.0.5", cookie_token=TOKEN, fetch_site="same-origin")
    assert policy.check(cookie) is AccessVerdict.OK


def test_writes_are_post_only_same_origin_and_off_when_read_only() -> None:
    policy = AccessPolicy(token=TOKEN)
    auth = f"Bearer {TOKEN}"
    assert policy.check(req("PUT", authorization=auth)) is AccessVerdict.FORBIDDEN
    assert policy.check(req("POST", authorization=auth, fetch_site="cross-site")) is (
        AccessVerdict.FORBIDDEN
    )
    assert policy.check(req("POST", authorization=auth)) is AccessVerdict.OK  # a script
    read_only = AccessPolicy(token=TOKEN, read_only=True)
    assert read_only.check(req("POST", authorization=auth)) is AccessVerdict.FORBIDDEN


def test_insecure_lets_the_same_origin_page_act_but_not_other_sites() -> None:
    policy = AccessPolicy(token=None, insecure=True)
    assert policy.check(req("POST", fetch_site="same-origin")) is AccessVerdict.OK
    assert policy.check(req("POST", fetch_site="cross-site")) is AccessVerdict.FORBIDDEN
    assert policy.check(req("POST")) is AccessVerdict.FORBIDDEN  # no header, no token


def test_listening_off_loopback_needs_a_token_or_insecure() -> None:
    assert listen_problem("127.0.0.1", token=None, insecure=False) is None
    assert listen_problem("::1", token=None, insecure=False) is None
    problem = listen_problem("0.0.0.0", token=None, insecure=False)
    assert problem is not None and "DASHBOARD_TOKEN" in problem and "0.0.0.0" in problem
    assert listen_problem("0.0.0.0", token=TOKEN, insecure=False) is None
    assert listen_problem("0.0.0.0", token=None, insecure=True) is None


def test_host_headers_lose_their_port_and_case_and_ipv6_keeps_its_brackets_apart() -> None:
    assert host_name("LocalHost:8700") == "localhost"
    assert host_name("[::1]:8700") == host_name("[0:0::1]") == "::1"
    assert host_name("dash.example.") == "dash.example"
    for malformed in ("::1", "[::1", "[::1]x", "host:port", "[dash.example]", ""):
        assert host_name(malformed) is None, malformed


def test_only_loopback_names_and_the_given_hosts_are_answered() -> None:
    check = HostCheck.of(["0.0.0.0", "Dash.Example", "::2"])
    for host in ("localhost", "127.0.0.1:1", "[::1]:8700", "0.0.0.0:8700", "dash.example:443",
                 "[::2]"):  # fmt: skip
        assert check.refusal([host]) is None, host
    refused = check.refusal(["evil.example:8700"])
    assert refused is not None and refused.status == 403
    assert "--allowed-host evil.example" in refused.message
    missing, twice = check.refusal([]), check.refusal(["localhost", "localhost"])
    assert missing is not None and missing.status == 400 and "no Host" in missing.message
    assert twice is not None and twice.status == 400
    assert HostCheck().refusal(["dash.example"]) is not None  # loopback only by default


def test_the_command_answers_its_listen_host_and_each_allowed_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from leasekeeper.dashboard import cli as dashboard_cli
    from leasekeeper.ops.cli import main

    served: list[HostCheck] = []
    monkeypatch.setattr(dashboard_cli, "require_kafka", lambda *a: None)
    monkeypatch.setattr(dashboard_cli, "KafkaView", lambda *a: None)
    monkeypatch.setattr(dashboard_cli, "StatusIndex", lambda *a, **k: None)
    monkeypatch.setattr(dashboard_cli, "_serve", lambda d, host, port: served.append(d.hosts))
    monkeypatch.setenv("DASHBOARD_TOKEN", TOKEN)
    monkeypatch.setenv("DASHBOARD_ALLOWED_HOSTS", "a.example, b.example [::3]")
    args = ["dashboard", "--listen", "10.1.2.3:8700", "--state-dir", str(tmp_path)]
    assert CliRunner().invoke(main, args).exit_code == 0
    flags = [*args, "--allowed-host", "C.example", "--allowed-host", "[::4]"]
    assert CliRunner().invoke(main, flags).exit_code == 0
    loopback = {"localhost", "127.0.0.1", "::1"}
    assert served[0].allowed == loopback | {"10.1.2.3", "a.example", "b.example", "::3"}
    assert served[1].allowed == loopback | {"10.1.2.3", "c.example", "::4"}
    result = CliRunner().invoke(main, [*args, "--allowed-host", "dash.example:443"])
    assert result.exit_code != 0 and "has a port" in result.output
    assert "Traceback" not in result.output


def test_watermarks_leave_out_a_partition_whose_first_answer_failed() -> None:
    """A topic created a moment ago may have no leader yet: its partition is left
    out of the answer, and the other partitions still count."""
    from jobcore.kafka import KafkaError, KafkaException, watermarks

    class Answer:
        def __init__(self, offset: int | None) -> None:
            self.offset = offset

        def result(self, timeout: float) -> Answer:
            if self.offset is None:
                raise KafkaException(KafkaError(KafkaError.LEADER_NOT_AVAILABLE))
            return self

    class Admin:
        calls = 0

        def list_offsets(self, request: dict[Any, Any], request_timeout: float) -> dict[Any, Any]:
            self.calls += 1
            low = self.calls == 1
            return {tp: Answer(None if low and tp.topic == "new" else 5) for tp in request}

    found = watermarks(Admin(), [("old", 0), ("new", 0)])  # type: ignore[arg-type]
    assert found == {("old", 0): (5, 5)}


def snapshot(acked: int, nacked: int = 0, leases: int = 0) -> dict[str, object]:
    lease = {"job_id": "j", "type": "t", "tenant": "a", "worker": "w", "attempt": 1,
             "expires_in_s": 1.0, "lease_id": "l"}  # fmt: skip
    return {
        "queue": "orders",
        "counters": {"acked": acked, "nacked": nacked, "expired": 0},
        "partitions": [
            {
                "topic": "jobs.orders",
                "partition": 0,
                "leases": [{**lease, "job_id": f"j{i}", "age_s": float(i)} for i in range(leases)],
            }
        ],
    }


def record(snap: dict[str, object], at_ms: int, instance: str = "lk-1") -> bytes:
    return json.dumps(fleet_record(snap, instance=instance, now_ms=at_ms, max_leases=10)).encode()


def test_fleet_keeps_the_latest_record_drops_tombstones_and_stale_ones() -> None:
    fleet = FleetState(stale_after_s=30)
    fleet.apply("orders@lk-1", record(snapshot(1), 1_000))
    fleet.apply("orders@lk-1", record(snapshot(5), 2_000))
    fleet.apply("orders@lk-2", record(snapshot(0), 2_000, instance="lk-2"))
    assert [r["snapshot"]["counters"]["acked"] for r in fleet.current(3_000)] == [5, 0]
    fleet.apply("orders@lk-2", None)
    assert len(fleet.current(3_000)) == 1
    assert fleet.current(2_000 + 31_000) == []
    assert fleet.queues(3_000) == ["orders"]


def test_rates_come_from_counter_growth_and_survive_a_restart() -> None:
    fleet = FleetState()
    fleet.apply("k", record(snapshot(10, 1), 0))
    fleet.sample(0)
    fleet.apply("k", record(snapshot(40, 4), 2_000))
    fleet.sample(2_000)
    fleet.apply("k", record(snapshot(2, 0), 4_000))  # restarted: counters from 0
    fleet.sample(4_000)
    points = fleet.history("orders")
    assert [(p.processed, p.failed) for p in points] == [(15.0, 1.5), (0.0, 0.0)]


def test_a_published_snapshot_is_versioned_and_capped() -> None:
    capped = cap_leases(snapshot(0, leases=50), max_leases=10)
    kept = capped["partitions"][0]["leases"]  # type: ignore[index]
    assert len(kept) == 10 and min(x["age_s"] for x in kept) == 40.0
    assert capped["leases_total"] == 50 and capped["leases_omitted"] == 40
    rec = json.loads(record(snapshot(0), 5))
    assert rec["version"] == 1 and rec["instance"] == "lk-1" and rec["queue"] == "orders"


def test_queues_are_found_by_their_ready_and_dlq_topics() -> None:
    names = {"jobs.a", "jobs.a.dlq", "jobs.a.retry.1s", "jobs.b", "jobs._leasekeepers", "x.c"}
    assert discover_queues(names, "jobs") == ["a"]


def test_tables_escape_every_value_but_built_links() -> None:
    html = table(("a", "b"), [("<script>x</script>", Raw('<a href="/">ok</a>'))])
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert '<a href="/">ok</a>' in html


def test_dlq_filters_from_the_query_string() -> None:
    selection = selection_from_query("type=email&tenant=&since=2025-03-01")
    assert selection.type == "email" and selection.tenant is None
    assert selection.since_ms == 1740787200000
    with pytest.raises(FilterError, match="not an ISO 8601 time"):
        selection_from_query("until=yesterday")


def test_dlq_page_cursors_from_the_query_string() -> None:
    before, after = page_cursors("type=email&before=1%3A40%2C0%3A7")
    assert before is not None and before.offsets == ((0, 7), (1, 40)) and after is None
    assert before.encode() == "0:7,1:40" and before.get(2, 99) == 99
    with pytest.raises(FilterError, match="PARTITION:OFFSET"):
        page_cursors("before=latest")
    with pytest.raises(FilterError, match="not both"):
        page_cursors("before=0:1&after=0:1")


def test_the_command_refuses_an_open_address_without_a_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from click.testing import CliRunner

    from leasekeeper.ops.cli import main

    monkeypatch.delenv("DASHBOARD_TOKEN", raising=False)
    result = CliRunner().invoke(main, ["dashboard", "--listen", "0.0.0.0:8700"])
    assert result.exit_code != 0
    assert "0.0.0.0" in result.output and "DASHBOARD_TOKEN" in result.output
    assert "Traceback" not in result.output


def test_cron_rows_say_when_an_entry_is_overdue_never_fired_or_not_on_the_board() -> None:
    now = 1_800_000_000_000

    def view(name: str, next_ms: int | None) -> CronEntryView:
        return CronEntryView(name=name, schedule="* * * * *", timezone="UTC", queue="q",
                             type="noop", misfire="skip", next_fire_ms=next_ms)  # fmt: skip

    rows = [
        CronRow(scheduler="s", name="late", view=view("late", now - 120_000),
                last_fire_ms=now - 180_000, last_job_id="j1"),
        CronRow(scheduler="s", name="soon", view=view("soon", now + 5_000),
                last_fire_ms=None, last_job_id=None),
        CronRow(scheduler="old", name="legacy", view=None, last_fire_ms=now - 1_000,
                last_job_id="j2"),
    ]  # fmt: skip
    html = cron_section("/b", rows, now)
    assert "(2 min ago): overdue, no leader is firing" in html
    assert 'href="/b/job?id=j1&amp;queue=q"' in html and "(3 min ago)" in html
    assert "(in 5 s)" in html and 'class="muted cron-last">never<' in html
    assert "unknown (no leader has published it)" in html
    assert "No cron scheduler" in cron_section("/b", [], now)


def test_scheduler_groups_are_found_by_their_topics() -> None:
    topics = {"jobs._scheduler.a.state", "jobs._scheduler.b.entries", "jobs._scheduler.c.leader",
              "jobs.q", "other._scheduler.d.state"}  # fmt: skip
    assert scheduler_names(topics, "jobs") == ["a", "b"]


def test_the_queue_page_lists_blocked_ordering_keys_and_why() -> None:
    from leasekeeper.dashboard.pages import _blocked_keys

    now = 1_000_000
    blocked = [
        {"topic": "jobs.q", "partition": 0, "tenant": "acme", "key": "user-42", "head_seq": 7,
         "job_id": "j7", "state": "retrying", "due_ms": now + 12_000,
         "reason": "retrying: <smtp down>", "held": 3},
        {"topic": "jobs.q", "partition": 1, "tenant": "beta", "key": "user-9", "head_seq": 2,
         "job_id": "j2", "state": "dead", "due_ms": 0, "reason": "dead: bad payload", "held": 1},
    ]  # fmt: skip
    records = [{"instance": "lk-1", "snapshot": {"blocked_keys": blocked}}]
    html = _blocked_keys(records, now)  # type: ignore[arg-type]
    assert "Blocked ordering keys" in html
    assert "user-42" in html and "in 12s" in html and "&lt;smtp down&gt;" in html
    assert "user-9" in html and "until replayed or skipped" in html
    assert _blocked_keys([{"instance": "lk-1", "snapshot": {}}], now) == ""  # type: ignore[list-item]
