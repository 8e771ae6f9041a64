"""What the live feed logs when its Redis goes away and comes back (a real
redis-server stopped and started again on its port): one line that it
failed, one that it is reachable again, and nothing after, whichever of
the feed's tasks (listener, sender, census) meets the outage first."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from proxy.live_redis import CENSUS_SECONDS, RedisLiveFeed
from tests.stores.servers import RedisServer

DEADLINE = 10.0  # seconds: correctness deadlines, not speed
SECRET = b"live-outage-secret"


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("live feed:"):
            self.lines.append((record.levelname, message))


@contextmanager
def feed_log() -> Iterator[Lines]:
    logger = logging.getLogger("proxy")
    handler, level = Lines(), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


async def _until(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        await asyncio.sleep(0.01)


def _run(scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """asyncio.run in a daemon thread of its own (as tests/test_live_redis.py)."""
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
    thread.join(60)
    assert outcome, "the scenario did not end in 60 s"
    if outcome[0] is not None:
        raise outcome[0]


def _restart(server: RedisServer, *, watched: bool, down: float) -> list[tuple[str, str]]:
    """A feed (with a viewer when `watched`) on `server`; the server stops,
    stays down `down` seconds, and starts again: the feed's log lines from
    the stop until several censuses after the feed got through again."""

    async def scenario(log: Lines) -> None:
        feed = RedisLiveFeed(server.url, prefix="rp-outage:", secret=SECRET)
        await feed.start()
        try:
            with feed.subscribe("alice") if watched else contextlib.nullcontext():
                # every connection made, and the stop half way between two
                # censuses: with a short outage, the census's connection
                # sits idle through it
                await asyncio.sleep(2.5 * CENSUS_SECONDS)
                assert log.lines == []
                server.stop()
                await _until(lambda: len(log.lines) >= 1, "the outage to be logged")
                await asyncio.sleep(down)
                server.start()  # the same port
                await _until(lambda: len(log.lines) >= 2, "the feed to get through again")
                await asyncio.sleep(3 * CENSUS_SECONDS)  # what each task does next
        finally:
            await feed.close()

    with feed_log() as log:
        _run(lambda: scenario(log))
    return log.lines


def _told_once(lines: list[tuple[str, str]]) -> None:
    assert len(lines) == 2, lines
    (level, failed), back = lines
    assert level == "WARNING", lines
    assert failed.startswith("live feed: redis "), lines
    assert failed.endswith(" failed: ConnectionError"), lines
    assert back == ("INFO", "live feed: redis reachable again"), lines


def test_a_watched_feed_says_once_that_redis_failed_and_once_that_it_is_back(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        for down in (0.1, 0.2, 1.5):  # shorter, and longer, than a census period
            _told_once(_restart(server, watched=True, down=down))
    finally:
        server.stop()


def test_an_unwatched_feed_says_that_redis_is_back_once_its_census_gets_through(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path / "redis").start()
    try:
        _told_once(_restart(server, watched=False, down=1.5))
    finally:
        server.stop()
