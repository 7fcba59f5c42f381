"""What to fire for one entry, given the last fire and the time now: a pure decision.

Fires not yet made since ``since`` fall in one of two cases:

- the oldest is at most ``grace`` old: the scheduler was merely late (a slow
  loop, or a leader failover lasting about one session timeout). Every fire is
  made, oldest first, each with its own dedupe key, so a failover loses none;
- the oldest is older than ``grace``: the scheduler was down, a *misfire*. The
  entry's policy decides: ``catch_up_once`` makes one fire for the whole missed
  window, at its most recent fire time; ``skip`` makes none. Either way the entry
  then resumes at its next fire time.

The decision depends only on its arguments, so a restarted or newly elected
leader that reads the same last fire decides the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from producer.scheduler.entry import MisfirePolicy
from producer.scheduler.timing import CronSchedule

__all__ = ["Decision", "decide"]


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The fires to make now (oldest first) and where the entry's schedule resumes.

    ``missed`` is the misfired window (its oldest and most recent fire times) when
    the policy applied, else None; ``catch_up`` says the one fire is its catch-up.
    """

    fires: tuple[datetime, ...]
    resume_after: datetime
    missed: tuple[datetime, datetime] | None = None
    catch_up: bool = False


def decide(
    schedule: CronSchedule,
    policy: MisfirePolicy,
    *,
    since: datetime,
    now: datetime,
    grace: timedelta,
) -> Decision:
    """The fires due in ``(since, now]``; ``since`` is the last fire (or when the
    entry was first seen), both timezone-aware."""
    oldest = schedule.next_after(since)
    if oldest > now:
        return Decision(fires=(), resume_after=since)
    if now - oldest <= grace:
        fires = []
        for fire in schedule.iter_after(since):
            if fire > now:
                break
            fires.append(fire)
        return Decision(fires=tuple(fires), resume_after=fires[-1])
    latest = schedule.latest_at_or_before(now)
    if policy is MisfirePolicy.CATCH_UP_ONCE:
        return Decision(
            fires=(latest,), resume_after=latest, missed=(oldest, latest), catch_up=True
        )
    return Decision(fires=(), resume_after=latest, missed=(oldest, latest))
