"""The pool's Gate: a free slot is taken at once, waiters are served first
come first served, and a cancelled wait neither keeps its place nor loses a
slot handed to it."""

from __future__ import annotations

import asyncio

import pytest

from proxy.http1.gate import Gate

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_free_slots_are_taken_at_once_then_the_gate_closes() -> None:
    gate = Gate(2)
    assert gate.open
    gate.take()
    await gate.wait()  # the second, without waiting
    assert gate.free == 0
    assert not gate.open
    gate.give()
    assert gate.free == 1
    assert gate.open


async def test_waiters_get_released_slots_in_the_order_they_came() -> None:
    gate = Gate(1)
    gate.take()
    served: list[int] = []

    async def worker(n: int) -> None:
        await gate.wait()
        served.append(n)

    tasks = [asyncio.create_task(worker(n)) for n in range(4)]
    await asyncio.sleep(0)
    assert not gate.open  # a slot returned now goes to the line, not to a newcomer
    for n in range(4):
        gate.give()
        await asyncio.sleep(0)
        assert served == list(range(n + 1))
        assert gate.free == 0
    gate.give()
    assert gate.free == 1
    assert gate.open
    await asyncio.gather(*tasks)


async def test_a_newcomer_does_not_jump_the_line() -> None:
    gate = Gate(1)
    gate.take()
    first = asyncio.create_task(gate.wait())
    await asyncio.sleep(0)
    gate.give()  # handed to `first`, not made free
    assert gate.free == 0
    assert not gate.open
    second = asyncio.create_task(gate.wait())
    await asyncio.sleep(0)
    assert first.done()
    assert not second.done()
    gate.give()
    await second


async def test_a_cancelled_wait_leaves_the_line() -> None:
    gate = Gate(1)
    gate.take()
    leaving = asyncio.create_task(gate.wait())
    staying = asyncio.create_task(gate.wait())
    await asyncio.sleep(0)
    leaving.cancel()
    with pytest.raises(asyncio.CancelledError):
        await leaving
    gate.give()
    await staying  # served, though it came second
    gate.give()
    assert gate.free == 1
    assert gate.open


async def test_a_slot_handed_over_as_the_wait_is_cancelled_goes_to_the_next() -> None:
    gate = Gate(1)
    gate.take()
    cut = asyncio.create_task(gate.wait())
    after = asyncio.create_task(gate.wait())
    await asyncio.sleep(0)
    gate.give()  # `cut` is handed the slot ...
    cut.cancel()  # ... and cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await cut
    await asyncio.wait_for(after, 1)  # the slot went on; none was lost
    gate.give()
    assert gate.free == 1


async def test_a_timed_out_wait_loses_nothing() -> None:
    gate = Gate(1)
    gate.take()
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await gate.wait()
    gate.give()
    assert gate.free == 1
    assert gate.open
