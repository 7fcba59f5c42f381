"""Cron entries for the Scheduled page: from Kafka only, no scheduler configuration.

Each scheduler group keeps two compacted topics (see ``jobcore/cron_board.py``):
its leader's notice board of entries (schedule, queue, type, next fire) and the
record of last fires that a leader trusts before it fires. The page lists the
board's entries, with the last fire from the state topic and everything else
from the board; a group without a board (schedulers older than it) still shows
each entry's last fire.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from jobcore.cron_board import (
    CronEntryView,
    decode_last_fire,
    entries_topic,
    read_compacted_many,
    scheduler_names,
    state_topic,
)
from jobcore.kafka import KafkaException, KafkaSettings

__all__ = ["CronRow", "read_cron"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class CronRow:
    scheduler: str
    name: str
    view: CronEntryView | None  # None: only the state topic knows the entry
    last_fire_ms: int | None
    last_job_id: str | None


def read_cron(settings: KafkaSettings, prefix: str, topics: set[str]) -> list[CronRow]:
    """Every entry of every scheduler group of ``prefix``, by group and name."""
    groups = scheduler_names(topics, prefix)
    wanted = [t for g in groups for t in (entries_topic(prefix, g), state_topic(prefix, g))]
    try:
        tables = read_compacted_many(settings, [t for t in wanted if t in topics])
    except (KafkaException, TimeoutError) as exc:
        log.warning("cannot read the cron schedulers' topics: %s", exc)
        return []
    rows = []
    for scheduler in groups:
        board = tables.get(entries_topic(prefix, scheduler), {})
        state = tables.get(state_topic(prefix, scheduler), {})
        # The board lists the entries a leader runs (a removed one is gone from it; its
        # last fire stays in the state topic). Without a board (schedulers older than
        # it), the state topic's names are all there is.
        names = {k.decode(errors="replace") for k in (board or state)}
        for name in sorted(names):
            rows.append(_row(scheduler, name, board.get(name.encode()), state.get(name.encode())))
    return rows


def _row(scheduler: str, name: str, shown: bytes | None, fired: bytes | None) -> CronRow:
    view = last_ms = last_job = None
    if shown is not None:
        try:
            view = CronEntryView.decode(shown)
            last_ms, last_job = view.last_fire_ms, view.last_job_id
        except ValueError as exc:
            log.debug("cron entry %s of %s: %s", name, scheduler, exc)
    if fired is not None:
        try:
            last = decode_last_fire(fired)
        except ValueError as exc:
            log.debug("last fire of cron entry %s of %s: %s", name, scheduler, exc)
        else:  # the record a leader trusts wins over the board's copy
            last_ms, last_job = round(last.at.timestamp() * 1000), last.job_id
    return CronRow(
        scheduler=scheduler, name=name, view=view, last_fire_ms=last_ms, last_job_id=last_job
    )
