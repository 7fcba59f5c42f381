"""What an outbox relay tells the dashboard about itself: ``jobs._outbox_relays``.

Shared by the relay (``producer``), which writes it, and the dashboard
(``leasekeeper``), which reads it; the leasekeeper must not import the producer,
so the record lives here. A relay that cannot read its database says so in
``error`` and leaves the counts out: the dashboard must show "cannot read the
database", never "0 waiting".
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["RELAY_REPORT_VERSION", "RelayReport"]

RELAY_REPORT_VERSION = 1


@dataclass(frozen=True, kw_only=True)
class RelayReport:
    """One relay's backlog as it last read it.

    ``database`` is ``host:port/dbname`` (never a password); ``waiting`` and
    ``lag_s`` (age of the oldest staged row) are None exactly when ``error`` says
    why the database could not be read."""

    instance: str
    database: str
    published_at_ms: int
    active: bool
    relayed: int
    waiting: int | None = None
    lag_s: float | None = None
    error: str | None = None
    version: int = RELAY_REPORT_VERSION

    def __post_init__(self) -> None:
        if (self.error is None) == (self.waiting is None or self.lag_s is None):
            raise ValueError("a relay report has either the counts or an error, not both")

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> RelayReport:
        """Parse a record of the topic; ValueError (or KeyError, TypeError) when it is
        not one a reader of this version understands. Unknown fields are ignored, so
        a newer relay's report still shows."""
        version = int(record["version"])
        if version < 1:
            raise ValueError(f"relay report version {version} is not supported")
        error = record.get("error")
        waiting, lag_s = record.get("waiting"), record.get("lag_s")
        return cls(
            version=version,
            instance=str(record["instance"]),
            database=str(record.get("database", "")),
            published_at_ms=int(record["published_at_ms"]),
            active=bool(record.get("active", False)),
            relayed=int(record.get("relayed", 0)),
            waiting=None if error is not None or waiting is None else int(waiting),
            lag_s=None if error is not None or lag_s is None else float(lag_s),
            error=None if error is None else str(error),
        )
