"""How dead letters look on a terminal (``rich``) and to scripts (JSON).

Everything a handler or producer chose (ids, types, tenants, error messages,
tracebacks, payloads) goes through ``jobcore.terminal_text.escaped`` before
``rich`` sees it: markup in an error message would break the listing, and an
escape sequence would reach the operator's terminal. JSON output is left as it
came (``json.dumps`` escapes control characters)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable
from typing import Any

from rich import box
from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from jobcore.terminal_text import cell, escaped
from leasekeeper.dlq.entries import DlqEntry, format_ms
from schemas.codec import DecodeError, EnvelopeCodec, SchemaError

__all__ = ["detail", "entries_table", "location", "render_detail", "summary", "to_json"]

_TRACEBACK_LINES = 12
_RAW_EXCERPT = 64
_LETTER_FIELDS = (
    "reason",
    "detail",
    "died_at",
    "source_topic",
    "source_partition",
    "source_offset",
    "problem",
)
_JOB_FIELDS = (
    "queue",
    "type",
    "tenant_id",
    "attempt",
    "max_attempts",
    "replay_count",
    "timeout_s",
    "dedupe_key",
    "priority",
    "created_at_ms",
)


def location(entry: DlqEntry) -> str:
    """``PARTITION:OFFSET`` on the DLQ topic: how ``show`` finds an entry without a job id."""
    return f"{entry.partition}:{entry.offset}"


def summary(entry: DlqEntry) -> dict[str, Any]:
    """One dead letter as a flat record: a ``list --json`` line."""
    letter, job, last = entry.letter, entry.job, entry.last_error
    return {
        "job_id": job.job_id if job else None,
        "type": job.type if job else None,
        "tenant": job.tenant_id if job else None,
        "reason": letter.reason if letter else None,
        "detail": letter.detail if letter else entry.problem,
        "attempts": job.attempt if job else None,
        "max_attempts": job.max_attempts if job else None,
        "replay_count": job.replay_count if job else None,
        "last_error_class": last.error_class if last else None,
        "last_error_message": last.message if last else None,
        "died_at": format_ms(letter.died_at_ms) if letter else None,
        "died_at_ms": letter.died_at_ms if letter else None,
        "dlq_partition": entry.partition,
        "dlq_offset": entry.offset,
        "problem": entry.problem,
    }


def entries_table(entries: Iterable[DlqEntry], title: str, *, wide: bool = False) -> Table:
    """Dead letters, one line each: the other columns end in an ellipsis where 80
    columns run out, so a screen of them stays a list to scan. The id and the time are
    never cut (they are what ``dlq show`` and ``--since`` take). ``wide`` gives the
    tenant and the reason columns of their own and wraps rather than cuts."""
    table = Table(title=escaped(title), box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0), show_edge=False)
    table.add_column("job id", no_wrap=True)
    table.add_column("type", max_width=None if wide else 16)
    if wide:
        table.add_column("tenant")
        table.add_column("reason")
    table.add_column("tries", no_wrap=True, justify="right")
    table.add_column("died at", no_wrap=True)
    table.add_column("last error")
    for entry in entries:
        table.add_row(*_entry_cells(entry, wide))
    return table


def _entry_cells(entry: DlqEntry, wide: bool) -> list[Text]:
    row = summary(entry)
    last = row["last_error_class"]
    error = f"{last}: {_clip(row['last_error_message'], 60)}" if last else _clip(row["detail"], 70)
    if not wide and row["reason"]:
        error = f"{row['reason']}; {error}" if error else row["reason"]
    cells = [row["job_id"] or location(entry), row["type"] or "(undecodable)"]
    if wide:
        cells += [row["tenant"] or "-", row["reason"] or "-"]
    attempts = f"{row['attempts']}/{row['max_attempts']}" if entry.job else "-"
    cells += [attempts, row["died_at"] or "-", error or "-"]
    return [cell(text, wrap=wide) for text in cells]


def detail(entry: DlqEntry, codec: EnvelopeCodec) -> dict[str, Any]:
    """Everything about one dead letter: a ``show --json`` record."""
    letter, job = entry.letter, entry.job
    record: dict[str, Any] = {
        "dlq_partition": entry.partition,
        "dlq_offset": entry.offset,
        "problem": entry.problem,
    }
    if letter is not None:
        record.update(
            reason=letter.reason,
            detail=letter.detail,
            source_topic=letter.source_topic,
            source_partition=letter.source_partition,
            source_offset=letter.source_offset,
            died_at=format_ms(letter.died_at_ms),
            died_at_ms=letter.died_at_ms,
            raw_key=_b64(letter.raw_key),
            raw_value=_b64(letter.raw_value),
        )
    if job is not None:
        envelope = job.to_avro()
        envelope["payload"] = _payload(codec, job.type, job.payload)
        envelope["errors"] = [error.to_avro() for error in job.errors]
        record["job"] = envelope
    return record


def render_detail(record: dict[str, Any], console: Console) -> None:
    """The full record: where it died and why, the envelope, the payload, every attempt."""
    job = record.get("job")
    where = f"{record['dlq_partition']}:{record['dlq_offset']}"
    title = f"dead letter {job['job_id']}" if job else f"dead letter at {where}"
    console.print(Panel(_fields(record), title=escaped(title), expand=False))
    if job:
        payload = json.dumps(job["payload"], indent=2, default=_json_default)
        console.print(Panel(escaped(payload, lines=True), title="payload", expand=False))
        for error in job["errors"]:
            console.print(_attempt_panel(error))


def _fields(record: dict[str, Any]) -> Table:
    grid = Table.grid(padding=(0, 2))
    for key in _LETTER_FIELDS:
        if record.get(key) is not None:
            grid.add_row(key, escaped(record[key]))
    job = record.get("job")
    if job:
        for key in _JOB_FIELDS:
            if key.endswith("_ms"):  # an ISO time beside ``died_at``, not epoch ms
                grid.add_row(key[:-3], format_ms(job[key]) if job[key] else "none")
            else:
                grid.add_row(key, escaped(job[key]))
        return grid
    for key in ("raw_key", "raw_value"):
        value = record.get(key)
        grid.add_row(key, "null" if value is None else f"{value[:_RAW_EXCERPT]}... (base64)")
    return grid


def _attempt_panel(error: dict[str, Any]) -> Panel:
    when = format_ms(error["at_ms"])
    message = escaped(f"{error['error_class']}: {error['message']}", lines=True)
    header = f"{message}\nworker {escaped(error['worker'])} at {when}"
    lines = escaped(error["traceback"], lines=True).strip().splitlines()
    excerpt = "\n".join(lines[-_TRACEBACK_LINES:])
    if len(lines) > _TRACEBACK_LINES:
        excerpt = f"... ({len(lines) - _TRACEBACK_LINES} lines above)\n{excerpt}"
    body = f"{header}\n\n{excerpt}" if excerpt else header
    return Panel(body, title=f"attempt {escaped(error['attempt'])}", expand=False)


def to_json(record: dict[str, Any]) -> str:
    return json.dumps(record, default=_json_default, sort_keys=False)


def _payload(codec: EnvelopeCodec, job_type: str, data: bytes) -> Any:
    """The payload decoded when this reader has its schema, else its bytes and why not."""
    try:
        return codec.decode_payload(job_type, data)
    except (DecodeError, SchemaError) as exc:
        return {"undecoded_base64": _b64(data), "why": str(exc)}


def _json_default(value: object) -> object:
    if isinstance(value, bytes | bytearray):
        return _b64(bytes(value))
    return str(value)


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def _clip(text: object, limit: int) -> str:
    value = "" if text is None else str(text).replace("\n", " ")
    return value if len(value) <= limit else value[: limit - 1] + "…"
