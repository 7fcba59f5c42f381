"""What the ready window asks of the policy that picks the next ready job.

Defined in the core, next to the window that calls it, so the core imports no
fairness module: the policies (``leasekeeper.fairness``) meet this protocol and the
engine hands the window one of them.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Iterator
from typing import Protocol, TypeVar

T = TypeVar("T")


class DispatchPolicy(Protocol[T]):
    """What the ready window needs of a dispatch policy; the engine builds one of
    fairness's (``WeightedFair`` unless ``LeaseEngine(policy=...)`` gives another)."""

    def push(self, tenant: str, item: T) -> None: ...

    def push_front(self, tenant: str, item: T) -> None: ...

    def pop(
        self, accept: Callable[[T], bool] | None = None, skip: Container[str] = frozenset()
    ) -> T | None:
        """The next item ``accept`` takes, from a tenant not in ``skip`` (those at their cap)."""
        ...

    def settled(self, tenant: str, cost_s: float) -> None:
        """A job of ``tenant`` ran for ``cost_s`` of handler time (for cost-aware policies)."""
        ...

    def has_any(self, kinds: frozenset[str] = frozenset()) -> bool: ...

    def remove_if(self, predicate: Callable[[T], bool]) -> list[T]: ...

    def tenants(self) -> dict[str, int]: ...

    def __iter__(self) -> Iterator[T]: ...

    def __len__(self) -> int: ...
