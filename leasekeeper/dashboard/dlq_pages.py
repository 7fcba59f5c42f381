"""The dead-letter pages: a page of a queue's DLQ with its filter, replay and paging
links, and one dead letter with its attempt history.

A listing shows one page (``leasekeeper.dlq.paging``), never the whole topic, so it
states a total only when the page holds every match; the dry run counts the rest.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode

from leasekeeper.dashboard.html import Raw, e, link, table
from leasekeeper.dlq.entries import DlqEntry, format_ms
from leasekeeper.dlq.paging import DlqPage

__all__ = ["PAGING", "dlq_entry_page", "dlq_list_page", "filters_only"]

PAGING = ("before", "after")  # the query's page cursors; the rest is the filter

_FILTERS = (
    ("type", "type"),
    ("tenant", "tenant"),
    ("error_class", "error class"),
    ("reason", "reason"),
    ("since", "since (ISO)"),
    ("until", "until (ISO)"),
)


def filters_only(query: str) -> str:
    """The query without its page cursor: what a replay, or another page, selects."""
    return urlencode([(k, v) for k, v in parse_qsl(query) if k not in PAGING])


def dlq_list_page(base: str, queue: str, page: DlqPage, query: str, read_only: bool) -> str:
    rows = []
    for entry in page.entries:
        job, letter, last = entry.job, entry.letter, entry.last_error
        where = f"{entry.partition}/{entry.offset}"
        rows.append(
            (
                Raw(link(base, f"dlq/{queue}/{where}", job.job_id if job else where)),
                job.type if job else "-",
                job.tenant_id if job else "-",
                last.error_class if last else "-",
                letter.reason if letter else entry.problem,
                format_ms(letter.died_at_ms) if letter else "-",
                job.attempt if job else "-",
            )
        )
    listing = table(
        ("job", "type", "tenant", "error class", "reason", "died at", "attempts"),
        rows,
        numeric=(6,),
    )
    filters = filters_only(query)
    above, below = (_page_links(base, queue, filters, page, ids) for ids in (True, False))
    return (
        _filter_form(base, queue, query)
        + f"<p id=matching>{e(_summary(page))}</p>"
        + ("" if read_only else _replay_form(base, queue, filters, page))
        + above
        + listing
        + below
    )


def _summary(page: DlqPage) -> str:
    found = f"{len(page.entries)} matching dead letters"
    if page.complete:
        return found
    text = f"{found} on this page, newest first (the topic holds up to {page.depth})"
    if page.cut_short:
        text += f"; this page stopped after reading {page.read} records, older ones may match"
    return text


def _page_links(base: str, queue: str, filters: str, page: DlqPage, ids: bool) -> str:
    """The links to the newest, newer and older pages (above the table with ids)."""

    def to(cursor: dict[str, str], text: str, name: str) -> str:
        query = "&".join(q for q in (filters, urlencode(cursor)) if q)
        path = f"dlq/{queue}" + (f"?{query}" if query else "")
        return link(base, path, text, **({"id": name} if ids else {}))

    links = []
    if page.newer is not None:
        links.append(to({}, "newest", "newest"))
        links.append(to({"after": page.newer.encode()}, "← newer", "newer"))
    if page.older is not None:
        links.append(to({"before": page.older.encode()}, "older →", "older"))
    return f'<p class="pages">{" · ".join(links)}</p>' if links else ""


def _filter_form(base: str, queue: str, query: str) -> str:
    values = dict(parse_qsl(query))
    fields = "".join(
        f'<label>{e(label)} <input name="{name}" value="{e(values.get(name, ""))}"></label> '
        for name, label in _FILTERS
    )
    return (
        f'<form method="get" action="{e(base + "/dlq/" + queue)}">{fields}'
        '<button type="submit">Search</button></form>'
    )


def _replay_form(base: str, queue: str, filters: str, page: DlqPage) -> str:
    action = e(f"{base}/dlq/{queue}/replay?{filters}")
    count = f" {len(page.entries)}" if page.complete else ""
    return (
        f'<form method="post" action="{action}" class="inline">'
        '<button name="mode" value="dry-run" id="dry-run">Dry run: count what would replay'
        "</button> "
        f'<button name="mode" value="replay" class="danger" id="replay-all">Replay all{count}'
        " matching</button></form>"
    )


def dlq_entry_page(base: str, queue: str, entry: DlqEntry, read_only: bool) -> str:
    job, letter = entry.job, entry.letter
    facts: list[tuple[str, object]] = []
    if letter is not None:
        facts += [
            ("reason", letter.reason),
            ("detail", letter.detail),
            ("died at", format_ms(letter.died_at_ms)),
            ("source", f"{letter.source_topic}/{letter.source_partition}/{letter.source_offset}"),
        ]
    if job is not None:
        facts += [
            ("job id", job.job_id),
            ("type", job.type),
            ("tenant", job.tenant_id),
            ("attempts", f"{job.attempt} of {job.max_attempts}"),
            ("replayed before", job.replay_count),
        ]
    history = [
        (err.attempt, format_ms(err.at_ms), err.worker, err.error_class, err.message)
        for err in (job.errors if job else ())
    ]
    tracebacks = "".join(
        f"<details><summary>attempt {err.attempt}: traceback</summary><pre>{e(err.traceback)}"
        "</pre></details>"
        for err in (job.errors if job else ())
        if err.traceback
    )
    replay = ""
    if job is not None and not read_only:
        replay = (
            f'<form method="post" action="{e(f"{base}/dlq/{queue}/replay?job_id={job.job_id}")}">'
            '<button name="mode" value="replay" id="replay-one">Replay this job</button></form>'
        )
    return (
        table(("field", "value"), facts)
        + "<h2>Attempt history</h2>"
        + table(("attempt", "at", "worker", "error class", "message"), history, numeric=(0,))
        + tracebacks
        + replay
        + (f'<p class="bad">{e(entry.problem)}</p>' if entry.problem else "")
    )
