"""How far a running job has got: a fraction from 0 to 1 and an optional line of text.

A handler reports it (``ctx.progress(0.4, "rendered 800 of 2,000 pages")``), the
worker sends the latest value with a heartbeat, the leasekeeper holds it with the
lease and writes the last one into the job's status record when the job ends. The
worker, the leasekeeper and every reader of status records share the value, its
limits and its JSON form, so they live here, beside the status record.

The JSON form is flat (``"progress": 0.4, "progress_message": "..."``) in status
records, ``inspect job``, the leasekeeper's snapshot and the dashboard's
``/api/job`` alike: a reader without progress ignores both keys.
"""

from __future__ import annotations

import math
import numbers

__all__ = ["MESSAGE_MAX", "JobProgress", "checked"]

# The longest progress message, in characters: a status line, not a log.
MESSAGE_MAX = 200


class JobProgress:
    """One progress report: ``fraction`` in [0, 1], ``message`` ("" for none).

    A slotted class with its own ``__init__``, never changed once made: the
    leasekeeper keeps one per lease that reported progress, and a status record
    carries the last."""

    __slots__ = ("fraction", "message")

    def __init__(self, fraction: float, message: str = "") -> None:
        self.fraction = fraction
        self.message = message

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, JobProgress)
            and self.fraction == other.fraction
            and self.message == other.message
        )

    def __hash__(self) -> int:
        return hash((self.fraction, self.message))

    def __repr__(self) -> str:
        return f"JobProgress({self.fraction!r}, {self.message!r})"

    def text(self) -> str:
        """For people: "40% rendered 800 of 2,000 pages" (the percent floored to a tenth,
        so a job at 99.99% never reads as 100%; the nudge keeps 0.57 from reading 56.9%)."""
        percent = f"{math.floor(self.fraction * 1000 + 1e-6) / 10:g}%"
        return f"{percent} {self.message}" if self.message else percent

    def fields(self) -> dict[str, object]:
        """The JSON form: ``progress`` and, when there is one, ``progress_message``."""
        if self.message:
            return {"progress": self.fraction, "progress_message": self.message}
        return {"progress": self.fraction}

    @classmethod
    def from_fields(cls, fraction: object, message: object = None) -> JobProgress | None:
        """A value read back from JSON or from the wire; None when there is none or it
        is not a usable one (a number outside [0, 1], NaN): a reader never fails on
        it. A longer message than ``MESSAGE_MAX`` is cut to it."""
        if isinstance(fraction, bool) or not isinstance(fraction, int | float):
            return None
        if not 0.0 <= fraction <= 1.0:  # False for NaN too
            return None
        text = message[:MESSAGE_MAX] if isinstance(message, str) else ""
        return cls(float(fraction), text)


def checked(fraction: float, message: str = "") -> JobProgress:
    """A handler's report, or a ValueError (TypeError for a value of the wrong type)
    that names the problem and what to pass instead."""
    if type(fraction) is not float:
        fraction = _number(fraction)
    if not 0.0 <= fraction <= 1.0:
        if math.isnan(fraction):
            raise ValueError("progress fraction is NaN: pass a number from 0 to 1")
        raise ValueError(f"progress fraction must be from 0 to 1 (0.4 for 40%), got {fraction!r}")
    if type(message) is not str:
        raise TypeError(f"progress message must be a str, got {type(message).__name__}")
    if len(message) > MESSAGE_MAX:
        raise ValueError(
            f"progress message is {len(message)} characters, over the {MESSAGE_MAX} allowed: "
            "shorten it (it is a status line, not a log)"
        )
    return JobProgress(fraction, message)


def _number(value: object) -> float:
    """An int or another real number (a ``Fraction``, numpy's floats) as a float; a
    TypeError for anything else, a bool included."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return float(value)
    raise TypeError(f"progress fraction must be a number from 0 to 1, got {type(value).__name__}")
