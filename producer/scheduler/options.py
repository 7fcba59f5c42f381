"""How a group of schedulers runs: its name (topics and consumer group), how fast a
dead leader is replaced, and when a late fire counts as a misfire."""

from __future__ import annotations

import math
from dataclasses import dataclass

from jobcore.cron_board import entries_topic, state_topic
from jobcore.topics import DEFAULT_PREFIX

__all__ = ["DEFAULT_MISFIRE_GRACE_S", "DEFAULT_SESSION_TIMEOUT_MS", "SchedulerOptions"]

# The broker's default minimum (group.min.session.timeout.ms): a killed leader is
# replaced after about this long.
DEFAULT_SESSION_TIMEOUT_MS = 6000
# Longer than a failover (one session timeout plus a rebalance), so a new leader
# makes the fires the old one missed; shorter than any real outage.
DEFAULT_MISFIRE_GRACE_S = 60.0


@dataclass(frozen=True, kw_only=True)
class SchedulerOptions:
    """Schedulers with the same ``name`` (and topic prefix) elect one leader and share
    the record of last fires; give separate deployments separate names."""

    name: str = "default"
    prefix: str = DEFAULT_PREFIX
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    misfire_grace_s: float = DEFAULT_MISFIRE_GRACE_S

    def __post_init__(self) -> None:
        if not self.name or any(c in self.name for c in " /\\:@") or self.name.strip() != self.name:
            raise ValueError(f"invalid scheduler name {self.name!r}: use letters, digits, . _ -")
        if self.session_timeout_ms < 1:
            raise ValueError(f"session_timeout_ms must be > 0, got {self.session_timeout_ms}")
        # A fire is always made a little after its time; below a second, "late" and
        # "missed" would blur and a skip entry could skip fires that were on time.
        if not (self.misfire_grace_s >= 1 and math.isfinite(self.misfire_grace_s)):
            raise ValueError(f"misfire_grace_s must be >= 1 second, got {self.misfire_grace_s}")

    @property
    def leader_topic(self) -> str:
        """One partition; the group member assigned it is the leader."""
        return f"{self.prefix}._scheduler.{self.name}.leader"

    @property
    def state_topic(self) -> str:
        """Compacted; key = entry name, value = its last fire."""
        return state_topic(self.prefix, self.name)

    @property
    def entries_topic(self) -> str:
        """Compacted; key = entry name, value = the entry with its next and last fire."""
        return entries_topic(self.prefix, self.name)

    @property
    def group(self) -> str:
        """The consumer group whose membership elects the leader."""
        return f"scheduler.{self.prefix}.{self.name}"
