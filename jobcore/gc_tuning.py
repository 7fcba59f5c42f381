"""Garbage-collector settings for the processes this project owns (``leasekeeper
serve``, ``workers run``), applied once start-up is over.

Python's cyclic collector scans every tracked object in a full (generation 2)
collection, with the GIL held. In a leasekeeper that is every module, gRPC and
Kafka object loaded at start-up plus the ready window: 30-115 ms per full
collection on a busy 2-vCPU machine, several in 20 s at 2,300 jobs/s, and every
job fetched or claimed meanwhile waits. Two changes remove them while serving:

- ``gc.freeze()`` after start-up moves what start-up built (modules, classes,
  the app, clients) out of the collector's sight for good: it lives as long as
  the process, so scanning it could never free anything.
- A larger first-generation threshold: most per-job objects are dead before a
  young collection runs, so fewer survive into the older generations, and full
  collections, which Python runs only once a quarter of the old generation is
  new, come much later.

Reference cycles are still collected; only less often and over less. ``JOBS_GC``
set to ``default`` keeps Python's own settings (for comparison, or when a handler
leans on prompt collection of cycles). Library callers (``JobProducer``,
``Worker`` built in one's own process) are never tuned: the process is theirs.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Mapping
from dataclasses import dataclass

from jobcore.config import ENV_GC

__all__ = ["ENV_GC", "THRESHOLDS", "GcSetting", "settle_after_startup"]

KEEP_DEFAULTS = "default"

# Young collections every 20,000 net allocations instead of 700: a no-op job's
# objects (a grant, a decoded payload, a settlement) are short-lived, so most die
# between two collections; older generations as Python has them.
THRESHOLDS = (20_000, 10, 10)


@dataclass(frozen=True)
class GcSetting:
    """What ``settle_after_startup`` did (the settings in force afterwards)."""

    tuned: bool
    frozen: int
    thresholds: tuple[int, int, int]


def settle_after_startup(environ: Mapping[str, str] | None = None) -> GcSetting:
    """Collect once, freeze what survived, and raise the young threshold; call after
    imports and set-up, before serving. Does nothing with ``JOBS_GC=default``."""
    env = os.environ if environ is None else environ
    if env.get(ENV_GC, "").strip().lower() == KEEP_DEFAULTS:
        return GcSetting(tuned=False, frozen=gc.get_freeze_count(), thresholds=gc.get_threshold())
    gc.collect()
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
    return GcSetting(tuned=True, frozen=gc.get_freeze_count(), thresholds=gc.get_threshold())
