"""The live feed through Redis pub/sub (proxy/live_redis.py), on a real
redis-server: two feeds stand for two processes. A viewer on one sees the
other's streams with the tenant filter of the in-process feed; a dropped
subscription reconnects and tells its viewers to reload; a dead Redis never
blocks a publisher."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis

from proxy.live import QUEUE_SIZE, Subscription
from proxy.live_redis import OUTBOX_SIZE, RedisLiveFeed, live_channel
from tests.stores.servers import RedisServer

DEADLINE = 10.0  # seconds: correctness deadlines, not speed
SCENARIO_SECONDS = 60.0  # a whole scenario, before it counts as hung
SECRET = b"live-test-secret"


async def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.01)


def _run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """asyncio.run in a thread of its own (the inspector's browser tests keep
    an event loop running in the main thread for the session), a daemon one:
    a scenario that hangs fails here, and leaves nothing for the exit to
    wait for."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            asyncio.run(scenario())
        except BaseException as exc:  # handed to the test's thread
            outcome.append(exc)
        else:
            outcome.append(None)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SCENARIO_SECONDS)
    assert outcome, f"the scenario did not end in {SCENARIO_SECONDS:g} s"
    if outcome[0] is not None:
        raise outcome[0]


def _drain(sub: Subscription) -> list[dict[str, Any]]:
    events = []
    while not sub.queue.empty():
        events.append(sub.queue.get_nowait())
    return events


@asynccontextmanager
async def _feeds(url: str, prefix: str) -> AsyncIterator[tuple[RedisLiveFeed, RedisLiveFeed]]:
    a = RedisLiveFeed(url, prefix=prefix, secret=SECRET)
    b = RedisLiveFeed(url, prefix=prefix, secret=SECRET)
    await a.start()
    await b.start()
    try:
        yield a, b
    finally:
        await a.close()
        await b.close()


def test_the_channel_names_the_deployment() -> None:
    """Pub/sub ignores the database number (a proxy on /1 once saw the
    streams of one on /0): the channel tells apart what the
    store tells apart (database, key prefix) and the tenant secret."""
    channel = live_channel("redis://127.0.0.1:6379/0", "rp:", SECRET)
    assert channel.startswith("rp:live:0:")
    assert SECRET.decode() not in channel
    assert live_channel("redis://127.0.0.1:6379", "rp:", SECRET) == channel
    assert live_channel("redis://127.0.0.1:6379/1", "rp:", SECRET) != channel
    assert live_channel("redis://127.0.0.1:6379/0?db=1", "rp:", SECRET) == live_channel(
        "redis://127.0.0.1:6379/1", "rp:", SECRET
    )
    assert live_channel("redis://127.0.0.1:6379/0", "other:", SECRET) != channel
    assert live_channel("redis://127.0.0.1:6379/0", "rp:", b"another secret") != channel
    # a cluster has database 0 only: its processes share the one channel
    assert live_channel("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", "rp:", SECRET) == channel


def test_a_viewer_on_one_process_sees_the_other_ones_streams_filtered_by_tenant(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> None:
        async with _feeds(redis_server.url, "rp-live-1:") as (a, b):
            assert not b.active  # nobody watches anywhere: B describes nothing
            with a.subscribe("alice") as alice, a.subscribe(None) as admin:
                await _until(lambda: b.active, "B to learn that someone watches")
                b.publish("alice", {"type": "delta", "text": "mine"})
                b.publish("bob", {"type": "delta", "text": "not alice's"})
                await _until(lambda: admin.queue.qsize() == 2, "the admin's two events")
                await asyncio.sleep(0.2)  # time for a wrongly routed event to arrive
                assert _drain(alice) == [{"type": "delta", "text": "mine"}]
                assert _drain(admin) == [
                    {"type": "delta", "text": "mine", "tenant": "alice"},
                    {"type": "delta", "text": "not alice's", "tenant": "bob"},
                ]
                # A's own events reach its viewers once (in process), not again via Redis
                a.publish("alice", {"type": "delta", "text": "local"})
                await asyncio.sleep(0.3)
                assert _drain(alice) == [{"type": "delta", "text": "local"}]
            await _until(lambda: not b.active, "B to learn that nobody watches any more")

    _run(scenario)


def test_a_dropped_subscription_reconnects_and_tells_its_viewers(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> None:
        async with _feeds(redis_server.url, "rp-live-2:") as (a, b):
            with a.subscribe("alice") as alice:
                await _until(lambda: b.active, "B to see the viewer")
                admin = aioredis.Redis.from_url(redis_server.url)
                try:
                    assert await admin.client_kill_filter(_type="pubsub") >= 1
                finally:
                    await admin.aclose()
                await _until(lambda: alice.dropped > 0, "the viewer to be told it missed events")

                async def delivered() -> bool:
                    b.publish("alice", {"type": "delta", "text": "after"})
                    await asyncio.sleep(0.05)
                    return any(e["text"] == "after" for e in _drain(alice))

                deadline = time.monotonic() + DEADLINE
                while not await delivered():
                    assert time.monotonic() < deadline, "no event after the reconnect"

    _run(scenario)


def test_a_dead_redis_never_blocks_a_publisher_and_the_feed_comes_back(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis").start()

    async def scenario() -> None:
        async with _feeds(server.url, "rp:") as (a, b):
            with a.subscribe("alice") as alice, b.subscribe("alice") as local:
                await _until(lambda: b.active and b._remote > 0, "B to see A's viewer")
                server.kill()
                started = time.monotonic()
                for i in range(3 * OUTBOX_SIZE):
                    b.publish("alice", {"type": "delta", "text": str(i)})
                # publishing is a queue put: thousands return at once (a bound
                # of seconds, far above the microseconds it takes, not a speed test)
                assert time.monotonic() - started < 2.0
                assert b._outbox.qsize() <= OUTBOX_SIZE
                # B's own viewer got the events, in process, Redis or not (as
                # many as its queue holds: a slow viewer loses the rest)
                texts = [e["text"] for e in _drain(local)]
                assert texts == [str(i) for i in range(QUEUE_SIZE)]
                await _until(lambda: b.lost >= 2 * OUTBOX_SIZE, "the events that could not go")
                await _until(lambda: alice.dropped > 0, "A's viewer to be told")
                await asyncio.sleep(1.0)  # several reconnects fail meanwhile
                assert alice.dropped == 1  # told once per outage, not per failed retry
                server.start()  # the same port
                _drain(alice)

                async def delivered() -> bool:
                    b.publish("alice", {"type": "delta", "text": "back"})
                    await asyncio.sleep(0.05)
                    return any(e["text"] == "back" for e in _drain(alice))

                deadline = time.monotonic() + 3 * DEADLINE
                while not await delivered():
                    assert time.monotonic() < deadline, "the feed did not come back"

    try:
        _run(scenario)
    finally:
        server.stop()


def test_close_ends_a_task_that_lost_its_cancellation(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancellation can be lost inside a read (its own timeout firing at
    the same moment); close() cancels again rather than wait forever."""
    stubborn: list[asyncio.Task[None]] = []

    async def census(self: RedisLiveFeed, r: aioredis.Redis) -> None:
        stubborn.append(asyncio.current_task())  # type: ignore[arg-type]
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(3600)  # the first cancellation, lost
        await asyncio.sleep(3600)

    monkeypatch.setattr(RedisLiveFeed, "_census", census)

    async def scenario() -> None:
        feed = RedisLiveFeed(redis_server.url, prefix="rp-live-close:", secret=SECRET)
        await feed.start()
        await asyncio.sleep(0.05)
        closing = asyncio.create_task(feed.close())
        done, _ = await asyncio.wait({closing}, timeout=DEADLINE)
        assert closing in done, "close() waited on a task that lost its cancellation"
        await closing
        assert stubborn[0].cancelled()

    _run(scenario)
