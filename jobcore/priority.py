"""Priority classes: their names and weights, shared by producer and leasekeeper.

Priorities are separate classes with weighted polling, not a priority number: a
strict priority column starves the low classes. Each class has its own topic (the
default class keeps ``jobs.Q``; the others are ``jobs.Q.<class>``) and its own share
of the leasekeeper's window. Producer and leasekeeper read the same setting,
``JOBS_PRIORITY_CLASSES`` (``critical=6,default=3,bulk=1`` when unset), so a class
the producer accepts is one the leasekeeper fetches.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_CLASS = "default"
ENV_PRIORITY_CLASSES = "JOBS_PRIORITY_CLASSES"
DEFAULT_WEIGHTS: Mapping[str, int] = {"critical": 6, DEFAULT_CLASS: 3, "bulk": 1}
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True, kw_only=True)
class PriorityClasses:
    """Class name → weight; ``default`` is always one of them."""

    weights: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def __post_init__(self) -> None:
        object.__setattr__(self, "weights", dict(self.weights))
        if DEFAULT_CLASS not in self.weights:
            raise ValueError(f"priority classes {self.describe()} must include {DEFAULT_CLASS!r}")
        for name, weight in self.weights.items():
            if not _NAME.match(name):
                raise ValueError(f"priority class {name!r}: use lower-case letters, digits, _ -")
            if weight < 1:
                raise ValueError(f"priority class {name!r}: weight must be >= 1, got {weight}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.weights)

    def check(self, name: str) -> str:
        """``name`` when it is a known class; ValueError naming the known ones otherwise."""
        if name not in self.weights:
            raise ValueError(
                f"unknown priority class {name!r}: use one of {', '.join(self.weights)}"
            )
        return name

    def describe(self) -> str:
        return ",".join(f"{name}={weight}" for name, weight in self.weights.items())

    @classmethod
    def parse(cls, text: str, origin: str = ENV_PRIORITY_CLASSES) -> PriorityClasses:
        """``critical=6,default=3,bulk=1``; ValueError names ``origin`` and the bad part."""
        weights: dict[str, int] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, weight = part.partition("=")
            if not sep or not weight.strip().isdigit():
                raise ValueError(
                    f"{origin}: {part!r} is not NAME=WEIGHT (e.g. critical=6,default=3,bulk=1)"
                )
            weights[name.strip()] = int(weight)
        try:
            return cls(weights=weights)
        except ValueError as exc:
            raise ValueError(f"{origin}: {exc}") from None

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PriorityClasses:
        env = os.environ if environ is None else environ
        text = env.get(ENV_PRIORITY_CLASSES, "")
        return cls.parse(text) if text.strip() else cls()
