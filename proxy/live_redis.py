"""The live feed between processes: every worker and replica of one
deployment on a Redis sees every stream, and nothing of other deployments.

One pub/sub channel per deployment carries the events (`live_channel`):
Redis pub/sub ignores the database number, so the channel's name holds what
sets a deployment apart, the store's key prefix and database number, and a
tag of the tenant secret. A batch per message:
`{"o": origin, "b": [[tenant, event], ...]}`
(one message per batch keeps a busy fleet's listeners from parsing one
message per delta); each process delivers
what it receives to its own subscribers with the tenant filter of
`LiveFeed`. A process delivers its own events at once, in process, and
skips them when they come back from Redis (`origin` is drawn per process),
so its own streams show even while Redis is down.

Three background tasks, none on a stream's path:
- sender: `publish()` only puts the event in a bounded outbox (full: the
  event is dropped and counted); the sender publishes what is there (up to
  BATCH events) as one message. When Redis fails, the batch is dropped,
  and the sender waits a little before the next try.
- listener: subscribed only while this process has subscribers. A dropped
  connection is reconnected (with a growing pause, at most RETRY_MAX
  seconds); its subscribers are told once that they may have missed
  events, and reload from the store.
- census: every CENSUS_SECONDS, how many processes listen on the channel
  (PUBSUB NUMSUB), so that a process nobody watches describes no streams
  (`active`). A viewer that just arrived sees the streams that start after
  the next census, or at once on the process serving the page.

Redis is one server to all three: the log says once that it failed (the
first task that meets the outage) and once that it is reachable again (the
first task that gets through after it). A result that was on its way before
the last of these two lines (a census that set out before the listener got
through) does not say it again. A connection Redis closed while it was idle
(a restart shorter than a census period) is opened again at once, as the
store's client does, so a restart is not a failure seen after it is over.

On a Redis Cluster (a `redis+cluster://` store URL) the feed uses the first
node the URL lists: a PUBLISH reaches the subscribers of every node, but
PUBSUB NUMSUB counts only the node asked, so every process must list the
same first node (while it is down, the feed shows each process's own
streams only).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import logging
import math
import uuid
from typing import Any

import orjson
import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from proxy.live import LiveFeed
from proxy.stores.redis_keys import is_cluster_url, parse_cluster_url

log = logging.getLogger("proxy")

OUTBOX_SIZE = 4096  # events waiting to be published, at most
BATCH = 256  # events per message
TIMEOUT = 1.0  # seconds: connect and socket timeouts
LISTEN_POLL = 1.0  # seconds a listener waits for a message before it looks around
CENSUS_SECONDS = 1.0
RETRY_MIN = 0.1  # seconds before reconnecting, doubled up to RETRY_MAX
RETRY_MAX = 5.0
FLUSH_SECONDS = 1.0  # at close, what the outbox holds gets this long to go out
CLOSE_SECONDS = 2.0  # then the tasks get this long to stop

_FAILURES = (RedisError, OSError, TimeoutError)


def live_channel(url: str, prefix: str, secret: bytes) -> str:
    """The live feed's channel for a store at `url` whose keys start with
    `prefix`, under the tenant secret: `<prefix>live:<db>:<tag>`.

    Processes that share stored data (one database, one prefix) and one
    secret (so one key is one tenant) share a channel; any other pair does
    not, though PUBLISH reaches every database of the server. The secret
    counts because tenants are HMACs under it, except `anonymous`, which is
    the same name under every secret: deployments on one database with
    different secrets would otherwise show each other's anonymous streams
    (and every stream, to an admin). The tag is an HMAC, so the channel's
    name (PUBSUB CHANNELS lists it) says nothing of the secret. A cluster
    has only database 0."""
    db = 0 if is_cluster_url(url) else int(parse_url(url).get("db") or 0)
    tag = hmac.new(secret, b"reasoning-proxy live feed", hashlib.sha256).hexdigest()[:16]
    return f"{prefix}live:{db}:{tag}"


class RedisLiveFeed(LiveFeed):
    def __init__(self, url: str, *, secret: bytes, prefix: str = "rp:") -> None:
        super().__init__()
        self.url = url
        self.channel = live_channel(url, prefix, secret)
        self.origin = uuid.uuid4().hex
        self.lost = 0  # events not published: outbox full or Redis failing
        self._redis: aioredis.Redis | None = None
        self._subscriber: aioredis.Redis | None = None
        self._outbox: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(OUTBOX_SIZE)
        self._wanted = asyncio.Event()  # this process has subscribers
        self._listening = False
        self._remote = 0  # listeners on the channel in other processes
        self._tasks: list[asyncio.Task[None]] = []
        self._failing = False
        self._changed = -math.inf  # loop time of the last line about reachability
        self._sending = False  # a batch is on its way

    @property
    def active(self) -> bool:
        return bool(self._subscribers) or self._remote > 0

    async def start(self) -> None:
        url = parse_cluster_url(self.url).first_node_url if is_cluster_url(self.url) else self.url
        # one immediate retry on a connection error for PUBLISH and the census:
        # a pooled connection the server closed while idle (it restarted) is
        # opened again. Not for the subscription: redis-py would subscribe
        # again by itself, and the viewers would not learn that they missed
        # what was sent meanwhile.
        self._redis = aioredis.Redis.from_url(
            url,
            socket_connect_timeout=TIMEOUT,
            socket_timeout=TIMEOUT,
            retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
        )
        self._subscriber = aioredis.Redis.from_url(
            url, socket_connect_timeout=TIMEOUT, socket_timeout=TIMEOUT
        )
        self._tasks = [
            asyncio.create_task(self._send(self._redis)),
            asyncio.create_task(self._listen(self._subscriber)),
            asyncio.create_task(self._census(self._redis)),
        ]

    async def close(self) -> None:
        self.end_subscriptions()
        # the last events of the streams a shutdown let finish (their turn_end)
        # still go out, for a moment at most
        deadline = asyncio.get_running_loop().time() + FLUSH_SECONDS
        while self._tasks and (self._sending or not self._outbox.empty()):
            if asyncio.get_running_loop().time() > deadline:
                break
            await asyncio.sleep(0.01)
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        # A cancellation that lands as a read's own timeout fires can be lost
        # (redis-py reads under asyncio.timeout; before Python 3.12 the two
        # can race), and the task then goes on: cancel again until each task
        # has ended, for a moment at most.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CLOSE_SECONDS
        pending = set(tasks)
        while pending and loop.time() < deadline:
            _, pending = await asyncio.wait(pending, timeout=0.05)
            for task in pending:
                task.cancel()
        if pending:
            log.warning("live feed: %d task(s) did not stop at close", len(pending))
        for task in tasks:
            if task.done() and not task.cancelled():
                task.exception()  # retrieved: the loops end only by cancellation
        clients = (self._redis, self._subscriber)
        self._redis = self._subscriber = None
        for client in clients:
            if client is not None:
                with contextlib.suppress(*_FAILURES):
                    await client.aclose()

    def publish(self, tenant: str, event: dict[str, Any]) -> None:
        self.deliver(tenant, event)
        if self._remote <= 0:
            return  # nobody elsewhere watches
        try:
            self._outbox.put_nowait((tenant, event))
        except asyncio.QueueFull:
            self.lost += 1

    def _watched(self, watched: bool) -> None:
        if watched:
            self._wanted.set()
        else:
            self._wanted.clear()

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _trouble(self, what: str, exc: BaseException, since: float) -> None:
        """Log the first failure of an outage, not every retry, nor a call
        that set out (at loop time `since`) before the feed last got
        through: that one met the outage already told, or its end."""
        if not self._failing and since >= self._changed:
            self._failing = True
            self._changed = self._now()
            log.warning("live feed: redis %s failed: %s", what, type(exc).__name__)

    def _recovered(self, since: float) -> None:
        """A call that set out at `since` got through: the end of an outage,
        unless it set out before the outage was told."""
        if self._failing and since >= self._changed:
            self._failing = False
            self._changed = self._now()
            log.info("live feed: redis reachable again")

    # -- the tasks ---------------------------------------------------------------

    async def _send(self, r: aioredis.Redis) -> None:
        pause = RETRY_MIN
        while True:
            self._sending = False
            batch = [await self._outbox.get()]
            self._sending = True
            while len(batch) < BATCH and not self._outbox.empty():
                batch.append(self._outbox.get_nowait())
            since = self._now()
            try:
                await r.publish(self.channel, orjson.dumps({"o": self.origin, "b": batch}))
            except _FAILURES as exc:
                self.lost += len(batch)
                self._trouble("publish", exc, since)
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)
            else:
                pause = RETRY_MIN
                self._recovered(since)

    async def _listen(self, r: aioredis.Redis) -> None:
        pause = RETRY_MIN
        while True:
            await self._wanted.wait()
            pubsub = r.pubsub(ignore_subscribe_messages=True)
            since = self._now()
            try:
                await pubsub.subscribe(self.channel)
                self._listening = True
                pause = RETRY_MIN
                self._recovered(since)
                while self._wanted.is_set():
                    since = self._now()
                    message = await pubsub.get_message(timeout=LISTEN_POLL)
                    if message is not None:
                        self._receive(message["data"])
            except _FAILURES as exc:
                self._trouble("subscribe", exc, since)
                if self._listening:
                    # a subscription dropped: what is sent until the next one is
                    # lost, so pages reload (once, not on every failed retry)
                    self.missed()
                await asyncio.sleep(pause)
                pause = min(pause * 2, RETRY_MAX)
            finally:
                self._listening = False
                with contextlib.suppress(*_FAILURES):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    def _receive(self, data: bytes) -> None:
        try:
            item = orjson.loads(data)
            origin, batch = item["o"], item["b"]
        except (orjson.JSONDecodeError, KeyError, TypeError):
            return  # not ours: someone else published on the channel
        if origin == self.origin or not isinstance(batch, list):
            return
        for entry in batch:
            if isinstance(entry, list) and len(entry) == 2:
                tenant, event = entry
                if isinstance(tenant, str) and isinstance(event, dict):
                    self.deliver(tenant, event)

    async def _census(self, r: aioredis.Redis) -> None:
        while True:
            since = self._now()
            try:
                reply = await r.pubsub_numsub(self.channel)
                count = int(reply[0][1]) if reply else 0
                self._remote = count - (1 if self._listening else 0)
            except _FAILURES as exc:
                self._remote = 0  # nothing can be published anyway
                self._trouble("census", exc, since)
            else:
                self._recovered(since)
            await asyncio.sleep(CENSUS_SECONDS)
