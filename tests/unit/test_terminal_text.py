"""Text a handler or producer chose reaches the operator's terminal as text only.

An error message with ``[/data/in.csv]`` in it made ``dlq list`` raise (rich read
it as a closing tag), ``[/]`` did the same to ``dlq show``, and escape sequences
(clear the screen, set the window title) went through to the terminal. Each
command that shows job data is run here on such data: it must finish, show the
text literally, and write no ESC byte (the consoles are not terminals here, so an
ESC could only have come from the data).
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from click.testing import CliRunner
from rich.console import Console

from jobcore.terminal_text import escaped, printable
from leasekeeper.dlq import DlqEntry, decode_entry
from leasekeeper.dlq import cli as dlq_cli
from leasekeeper.dlq.render import _attempt_panel
from leasekeeper.ordering.cli import ordering
from leasekeeper.ordering.values import LaneEntry, LaneState, LineId
from leasekeeper.views.inspect_view import job_lines, render_snapshot
from producer import cli as producer_cli
from producer import status_cli
from producer.lookup import JobLookup
from producer.scheduler.listing import ListRow, render_rows
from schemas.codec import EnvelopeCodec, SchemaRegistry
from schemas.job import AttemptError, DeadLetter, Job

CODEC = EnvelopeCodec(SchemaRegistry())
T0 = 1_767_225_600_000
ESC = "\x1b"
CLEAR = "x [/y] \x1b[2J"  # a closing tag with nothing to close, and "clear the screen"
PATH = "OSError: cannot open [/data/in.csv]"  # a closing tag that matches nothing
TITLE = "title \x1b]0;owned\x07 [link=https://evil.example]docs[/link]"  # OSC, and a forged link


def test_printable_shows_control_characters_as_their_escapes() -> None:
    assert printable(CLEAR) == "x [/y] \\x1b[2J"
    assert printable("a\nb\tc\rd\x7f\x9b\u202e") == "a\\x0ab\\x09c\\x0dd\\x7f\\x9b\\u202e"
    assert printable("a\n\tb\r", lines=True) == "a\n\tb\\x0d"
    assert printable("naïve café ✓") == "naïve café ✓", "printable text is left alone"
    assert escaped(PATH) == "OSError: cannot open \\[/data/in.csv]"


def job(job_id: str, message: str, *, traceback: str = "") -> Job:
    error = AttemptError(
        attempt=1, at_ms=T0, worker=f"w {CLEAR}", error_class="ValueError", message=message,
        traceback=traceback,
    )  # fmt: skip
    return Job(
        job_id=job_id,
        queue="q",
        tenant_id=f"acme {CLEAR}",
        type="noop",
        payload=b"",
        attempt=1,
        created_at_ms=T0,
        errors=(error,),
    )


def dead(job_id: str, message: str, offset: int, *, traceback: str = "") -> DlqEntry:
    value = CODEC.encode_dead_letter(
        DeadLetter(
            envelope=CODEC.encode(job(job_id, message, traceback=traceback)),
            reason="attempts exhausted",
            detail=f"detail {CLEAR}",
            source_topic="jobs.q",
            source_partition=0,
            source_offset=offset,
            died_at_ms=T0,
        )
    )
    return decode_entry(CODEC, 0, offset, value)


@pytest.fixture
def dead_letters(monkeypatch: pytest.MonkeyPatch) -> list[DlqEntry]:
    """``dlq list`` and ``dlq show`` reading these entries instead of Kafka."""
    entries = [
        dead("job-clear", CLEAR, 0, traceback=f"Traceback:\n  line [/]\n{CLEAR}\n{TITLE}"),
        dead("job-path", PATH, 1),
    ]
    monkeypatch.setattr(dlq_cli, "require_kafka", lambda *_: None)
    monkeypatch.setattr(dlq_cli, "read_dead_letters", lambda *_: iter(entries))
    monkeypatch.setenv("COLUMNS", "200")
    return entries


def _dlq(*args: str) -> str:
    result = CliRunner().invoke(dlq_cli.dlq, [*args, "--queue", "q", "--bootstrap", "x:1"])
    assert result.exception is None, result.output
    assert result.exit_code == 0, result.output
    assert ESC not in result.output
    return result.output


def test_dlq_list_shows_markup_and_escapes_in_error_messages_as_text(
    dead_letters: list[DlqEntry],
) -> None:
    output = _dlq("list", "--wide")
    assert "ValueError: x [/y] \\x1b[2J" in output
    assert "ValueError: OSError: cannot open [/data/in.csv]" in output
    assert "acme x [/y] \\x1b[2J" in output
    assert "2 dead letters" in output


@pytest.mark.parametrize("job_id", ["job-clear", "job-path"])
def test_dlq_show_shows_markup_and_escapes_as_text(
    dead_letters: list[DlqEntry], job_id: str
) -> None:
    output = _dlq("show", job_id)
    message = CLEAR if job_id == "job-clear" else PATH
    assert f"ValueError: {printable(message)}" in output
    assert "worker w x [/y] \\x1b[2J" in output
    assert "detail x [/y] \\x1b[2J" in output
    if job_id == "job-clear":
        assert "  line [/]" in output, "a traceback keeps its lines"
        assert "title \\x1b]0;owned\\x07 [link=https://evil.example]docs[/link]" in output


def test_dlq_show_of_an_ambiguous_prefix_lists_the_ids_as_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    entries = [dead(f"abcdefgh-{n} {CLEAR}", "m", n) for n in range(2)]
    monkeypatch.setattr(dlq_cli, "require_kafka", lambda *_: None)
    monkeypatch.setattr(dlq_cli, "read_dead_letters", lambda *_: iter(entries))
    result = CliRunner().invoke(dlq_cli.dlq, ["show", "abcdefgh", "--queue", "q"])
    assert result.exit_code == 1
    assert ESC not in result.output
    assert "abcdefgh-0 x [/y] \\x1b[2J, abcdefgh-1 x [/y] \\x1b[2J" in result.output


def test_an_attempt_panel_renders_a_forged_link_and_a_title_sequence_as_text() -> None:
    """The scenario of the review's experiment: a closing tag with nothing to close
    and a link tag, then OSC and CSI sequences, rendered to a real terminal."""
    error = {"at_ms": 0, "error_class": "ValueError", "worker": "w1", "attempt": 1,
             "message": "bad row [/], see [link=https://evil.example]docs[/link]",
             "traceback": ""}  # fmt: skip
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100)
    console.print(_attempt_panel(error))
    assert "bad row [/], see [link=https://evil.example]docs[/link]" in out.getvalue()
    assert "\x1b]8;" not in out.getvalue(), "no hyperlink was made"
    error["message"] = "looks fine \x1b]0;owned\x07 \x1b[2J"
    out.truncate(0)
    console.print(_attempt_panel(error))
    assert "\x1b]0;owned" not in out.getvalue() and "\x1b[2J" not in out.getvalue()
    assert "looks fine \\x1b]0;owned\\x07 \\x1b[2J" in out.getvalue()


def test_ordering_list_shows_keys_and_reasons_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    head = LaneEntry(
        line=LineId(topic="jobs.q", partition=0, tenant=f"t {CLEAR}", key=f"k {PATH}"),
        seq=1,
        job=job(f"id {CLEAR}", "m"),
        state=LaneState.DEAD,
        reason=f"dead: {CLEAR}",
    )
    monkeypatch.setattr("leasekeeper.ordering.cli._connect", lambda *_: (None, None))
    monkeypatch.setattr("leasekeeper.ordering.cli._lane", lambda *_: [head])
    result = CliRunner().invoke(ordering, ["list", "--queue", "q"])
    assert result.exit_code == 0, result.output
    assert ESC not in result.output
    assert result.output == (
        "k OSError: cannot open [/data/in.csv] (tenant t x [/y] \\x1b[2J): head job "
        "id x [/y] \\x1b[2J dead, 0 behind it; dead: x [/y] \\x1b[2J\n"
    )


def snapshot() -> dict[str, Any]:
    lease = {
        "job_id": f"id {CLEAR}",
        "type": f"type {PATH}",
        "tenant": f"tenant {CLEAR}",
        "worker": f"worker {TITLE}",
        "attempt": 1,
        "age_s": 1.0,
        "expires_in_s": 2.0,
    }
    return {
        "queue": "q",
        "member": "m",
        "ready": 0,
        "commits": 0,
        "counters": {},
        "partitions": [
            {
                "topic": "jobs.q",
                "partition": 0,
                "committed": 1,
                "highest_fetched": 1,
                "unresolved": [],
                "unresolved_count": 0,
                "leases": [lease],
            }
        ],
        "in_flight_by_tenant": {f"tenant {CLEAR}": 1},
        "blocked_keys": [
            {
                "state": "dead",
                "key": f"key {PATH}",
                "tenant": f"tenant {CLEAR}",
                "topic": "jobs.q",
                "partition": 0,
                "job_id": f"id {CLEAR}",
                "due_ms": 0,
                "held": 2,
                "reason": f"reason {TITLE}",
            }
        ],
        "breakers": [
            {
                "type": f"type {PATH}",
                "state": "open",
                "forced": True,
                "failure_rate": 1.0,
                "calls": 3,
                "parked": 1,
                "reason": f"reason {CLEAR}",
            }
        ],
        "limits": {
            "share": 1.0,
            "limiters": [
                {
                    "kind": "tenant",
                    "key": f"tenant {CLEAR}",
                    "limit": "5/s",
                    "rate_per_s": 1.0,
                    "tokens": 1.0,
                    "waiting": 1,
                    "parked": 0,
                }
            ],
        },
    }


def test_inspect_shows_job_data_as_text() -> None:
    out = io.StringIO()
    render_snapshot(snapshot(), Console(file=out, width=400, color_system=None), now_ms=T0)
    text = out.getvalue()
    assert ESC not in text
    for shown in (
        "id x [/y] \\x1b[2J",
        "type OSError: cannot open [/data/in.csv]",
        "worker title \\x1b]0;owned\\x07 [link=https://evil.example]docs[/link]",
        "in flight by tenant: tenant x [/y] \\x1b[2J 1",
        "blocked key key OSError: cannot open [/data/in.csv] (tenant tenant x [/y] \\x1b[2J",
        "reason title \\x1b]0;owned\\x07 [link=https://evil.example]docs[/link]",
        "breaker type OSError: cannot open [/data/in.csv]: open",
        "tenant tenant x [/y] \\x1b[2J: limit 5/s",
    ):
        assert shown in text


def test_inspect_job_shows_job_data_as_text() -> None:
    view = {"job_id": f"id {CLEAR}", "state": "leased", "worker": f"w {CLEAR}\nforged: line"}
    lines = job_lines(view, T0)
    assert lines[:2] == [
        "job id x [/y] \\x1b[2J: leased",
        "  worker: w x [/y] \\x1b[2J\\x0aforged: line",
    ]
    assert ESC not in "".join(lines)


def test_producer_status_shows_the_last_error_as_text(monkeypatch: pytest.MonkeyPatch) -> None:
    found = JobLookup(job_id="j", state="dead", source="status topic jobs.q.status",
                      worker=f"w {CLEAR}", last_error=f"ValueError: {CLEAR}",
                      note=f"note {CLEAR}")  # fmt: skip
    monkeypatch.setattr(status_cli, "require_kafka", lambda *_: None)
    monkeypatch.setattr(status_cli, "job_lookup", lambda *_, **__: found)
    result = CliRunner().invoke(producer_cli.main, ["status", "q", "j", "--bootstrap", "x:1"])
    assert result.exit_code == 0, result.output
    assert result.output == (
        "job j: dead (worker w x [/y] \\x1b[2J, last error ValueError: x [/y] \\x1b[2J) "
        "[from the status topic jobs.q.status]\n"
        "  note x [/y] \\x1b[2J\n"
    )


def test_cron_list_shows_entry_names_as_text() -> None:
    row = ListRow(entry=f"nightly {PATH}", schedule="0 3 * * *", timezone="UTC",
                  misfire="skip", next_local="-", next_utc="-", last_fire="[/]")  # fmt: skip
    out = io.StringIO()
    render_rows([row], Console(file=out, width=300, color_system=None))
    assert "nightly OSError: cannot open [/data/in.csv]" in out.getvalue()
