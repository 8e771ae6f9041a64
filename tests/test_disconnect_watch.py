"""The disconnect watch: a request answered within WATCH_DELAY never starts
the watching task; after it, a client's close cancels the request's task."""

from __future__ import annotations

import asyncio
import gc
import weakref

import pytest

from proxy.api.asgi import WATCH_DELAY, DisconnectWatch, Message


def test_a_quick_request_never_starts_the_watching_task() -> None:
    received = 0

    async def receive() -> Message:
        nonlocal received
        received += 1
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def request() -> bool:
        watch = DisconnectWatch(receive)
        await asyncio.sleep(WATCH_DELAY / 4)
        watch.stop()
        await asyncio.sleep(WATCH_DELAY * 2)  # past the delay: still nothing
        return watch.gone

    assert asyncio.run(request()) is False
    assert received == 0


def test_after_the_delay_a_client_that_leaves_cancels_the_request() -> None:
    left = asyncio.Event()

    async def receive() -> Message:
        await left.wait()
        return {"type": "http.disconnect"}

    async def request() -> DisconnectWatch:
        watch = DisconnectWatch(receive)
        asyncio.get_running_loop().call_later(WATCH_DELAY * 3, left.set)
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            assert watch.absorb()
        finally:
            watch.stop()
        return watch

    watch = asyncio.run(asyncio.wait_for(request(), 5))
    assert watch.gone


def test_a_client_gone_before_the_delay_is_noticed_when_it_ends() -> None:
    async def receive() -> Message:
        return {"type": "http.disconnect"}

    async def request() -> float:
        loop = asyncio.get_running_loop()
        start = loop.time()
        watch = DisconnectWatch(receive)
        with pytest.raises(asyncio.CancelledError):
            await asyncio.sleep(10)
        assert watch.absorb()
        watch.stop()
        return loop.time() - start

    waited = asyncio.run(asyncio.wait_for(request(), 5))
    assert WATCH_DELAY * 0.9 <= waited < 1.0


def test_a_stopped_watch_leaves_no_reference_cycle() -> None:
    """The watching task, cancelled by stop(), keeps its CancelledError, whose
    traceback holds the watch's frames: a watch still holding that task would
    make a cycle, and every streamed request would leave its whole state
    (normalizer, turn builder, the server's request cycle) for the cyclic
    collector instead of freeing it when it ends."""

    class Receiver:
        async def __call__(self) -> Message:
            await asyncio.Event().wait()
            return {"type": "http.disconnect"}

    async def request() -> bool:
        receiver = Receiver()
        watch = DisconnectWatch(receiver)
        await asyncio.sleep(WATCH_DELAY * 2)  # the watching task is waiting in receive()
        watch.stop()
        gone = weakref.ref(receiver)
        del watch, receiver
        for _ in range(3):
            await asyncio.sleep(0)  # the task takes its cancellation and ends
        return gone() is None

    gc.collect()
    gc.disable()
    try:
        assert asyncio.run(request())
    finally:
        gc.enable()
