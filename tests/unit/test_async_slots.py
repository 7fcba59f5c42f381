"""The async handlers' slots: a waiter marked first gets the next free slot."""

from __future__ import annotations

import asyncio

import pytest

from workers.async_slots import AsyncSlots


async def _take(slots: AsyncSlots, name: str, order: list[str], *, first: bool = False) -> None:
    await slots.acquire(first=first)
    order.append(name)


def test_a_first_waiter_gets_the_next_free_slot_before_earlier_waiters() -> None:
    async def scenario() -> list[str]:
        slots, order = AsyncSlots(1), list[str]()
        await slots.acquire()  # the slot is busy
        waiting = [asyncio.create_task(_take(slots, f"bulk-{n}", order)) for n in range(2)]
        await asyncio.sleep(0)
        waiting.append(asyncio.create_task(_take(slots, "critical", order, first=True)))
        await asyncio.sleep(0)
        for _ in range(3):
            slots.release()
            await asyncio.sleep(0)
        await asyncio.gather(*waiting)
        return order

    assert asyncio.run(scenario()) == ["critical", "bulk-0", "bulk-1"]


def test_a_cancelled_waiter_does_not_lose_the_slot() -> None:
    async def scenario() -> list[str]:
        slots, order = AsyncSlots(1), list[str]()
        await slots.acquire()
        gone = asyncio.create_task(_take(slots, "gone", order, first=True))
        later = asyncio.create_task(_take(slots, "later", order))
        await asyncio.sleep(0)
        gone.cancel()
        slots.release()  # the cancelled waiter is skipped: "later" gets the slot
        await later
        with pytest.raises(asyncio.CancelledError):
            await gone
        slots.release()
        await _take(slots, "free again", order)  # and it was returned after
        return order

    assert asyncio.run(scenario()) == ["later", "free again"]


def test_a_waiter_handed_the_slot_as_it_is_cancelled_passes_it_on() -> None:
    async def scenario() -> list[str]:
        slots, order = AsyncSlots(1), list[str]()
        await slots.acquire()
        handed = asyncio.create_task(_take(slots, "handed", order))
        after = asyncio.create_task(_take(slots, "after", order))
        await asyncio.sleep(0)
        slots.release()  # "handed" has the slot, but has not run yet
        handed.cancel()
        await after
        return order

    assert asyncio.run(scenario()) == ["after"]


def test_fewer_than_one_slot_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        AsyncSlots(0)
