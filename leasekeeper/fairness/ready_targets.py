"""How long the oldest ready job of each priority class may wait: the alert's threshold.

The example alert "oldest ready job older than its class's target" compares
``leasekeeper_class_oldest_ready_age_seconds`` with
``leasekeeper_class_ready_target_seconds``, which the leasekeeper exports from
this setting (``--ready-target CLASS=DURATION``). One rule then serves every
class, and an operator changes a target where the classes are configured, not
in the rules file. A class without a target uses the default class's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from jobcore.durations import parse_duration

# A critical job is meant to start within a second, a default one within half a
# minute; bulk work may wait its turn for ten minutes.
DEFAULT_READY_TARGETS: Mapping[str, float] = {"critical": 1.0, "default": 30.0, "bulk": 600.0}


def ready_targets(values: Iterable[str], classes: Iterable[str]) -> dict[str, float]:
    """The defaults with ``CLASS=DURATION`` overrides, for every class in ``classes``
    (ValueError naming the flag and the value otherwise)."""
    known = list(classes)
    found = dict(DEFAULT_READY_TARGETS)
    for value in values:
        name, sep, text = value.partition("=")
        if not sep or name not in known:
            raise ValueError(
                f"--ready-target {value!r}: expected CLASS=DURATION with CLASS one of "
                f"{', '.join(known)} (e.g. critical=2s)"
            )
        try:
            seconds = parse_duration(text).total_seconds()
        except ValueError:
            seconds = -1.0
        if seconds <= 0:
            raise ValueError(f"--ready-target {value!r}: expected a duration > 0 (e.g. 500ms, 30s)")
        found[name] = seconds
    fallback = found.get("default", DEFAULT_READY_TARGETS["default"])
    return {name: found.get(name, fallback) for name in known}
