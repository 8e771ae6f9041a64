"""The Redis store: history shared by several workers and replicas, on one
Redis server (or a Sentinel-managed primary) or on a Redis Cluster.

URLs (redis_keys.py): `redis://[user:password@]host:port/db`, `rediss://`
(TLS), `redis+cluster://host:port[,host:port...]`, `rediss+cluster://`.
Query options (`?socket_timeout=3`) are redis-py's and override the
defaults below. A plain URL that names a cluster node is refused (at
start-up when it answers then, else by every ping, so /readyz says 503): a
cluster needs the cluster client, which `redis+cluster://` selects, and a
cluster URL that reaches a standalone server is refused the same way.

Keys (redis_keys.py; one scheme for both, hash-tagged so that each script
touches one slot):
- `rp:{<tenant>:<conversation>}:turns`  list of turn records, oldest first
- `rp:{<tenant>:<conversation>}:conv`   hash: `n` turns ever appended (the
  next index), `gen` (a random id of this incarnation of the conversation),
  `t` (last write), `model`
- `rp:{<tenant>:<conversation>}:refs`   list of `<turn>\\x1f<gen>\\x1f<index key>`:
  what this conversation wrote to the tenant index, so it can be unindexed
- `rp:{<tenant>}:index`                 hash: `t:<tool_call_id>` / `f:<fp>` ->
  `<conversation>\\x1f<gen>\\x1f<turn>`
- `rp:{<tenant>}:recent`                sorted set: conversations by last write
- `rp:recent`                           sorted set: `<tenant>\\x1f<conversation>`
  by last write, every tenant (listing all, sweeping, eviction)
- `rp:profiles`                         hash: name -> JSON settings
- `rp:secret`                           the tenant secret of a deployment that
  configures none (SET NX by the first process to start, and again by every
  process using it that finds it gone: runtime.py; no TTL)
- `rp:{<tenant>:<id>}:response`         a stored response object (Responses API)
- `rp:responses`                        sorted set: `<tenant>\\x1f<id>` by write time

Data written by a version before this scheme (`rp:turns:<tenant>:<conv>`...)
is moved over by `reasoning-proxy store migrate` (redis_migrate.py).

Every history key carries a TTL of `ttl_seconds`, refreshed on each write to
it (the refs list lives twice as long, so a sweep can still unindex an
expired conversation). An index entry names the `gen` of the conversation it
points at, so an entry left behind by an expired or dropped conversation
never matches a new conversation that reuses the id. Profiles are settings
an admin wrote, not history: they do not expire (as in the other stores).

An append on one server is one script (APPEND_ALL in redis_scripts.py), so
one round trip, atomic: the turn (concurrent appends to one conversation
from several replicas get distinct, ordered indexes), the tenant's index and
recency, the global recency set. On a cluster its keys span slots, so it is
the same three steps as three scripts, in this order: the turn, atomically
in its conversation's slot, then the tenant's index and recency, and the
global recency set (these two at once). A reader between the steps finds
the turn by its conversation, not yet by its tool-call ids; a failed later
step fails the append (StoreFailure) with the turn kept. A delete and a
stored response are one script on one server too (DROP_ALL,
PUT_RESPONSE_ALL: the conversation, its index entries and recency; the
record, its place in `rp:responses` and the records evicted for it); on a
cluster a delete is a script in the conversation's slot then two at once
(index and recency, global recency), a stored response the record, then
its listing, then one DEL per evicted record. A lookup is an
index read, then a script in the turn's slot that checks the entry's `gen`.
A listing reads a recency set page by page, then the conversations' hashes
and the lengths of their turn lists (what it reports as `turns`: the turns
kept), and reads on past entries whose conversation is gone (expired, or
evicted by `maxmemory`, before a sweep clears the entry) until it has its
`limit`.
Scripts are sent by SHA and reloaded by redis-py when a server no longer
knows them (on a cluster, onto every primary).

Cluster: redis-py follows MOVED and ASK. While a slot migrates, a script
whose keys are split between the two nodes is answered TRYAGAIN (it did not
run), and redis-py gives up after a few tries; every call is then retried
here for up to SETTLE_SECONDS, which a slot's migration stays well within.
A cluster that answers CLUSTERDOWN (a master just restarted, for 2 s; a
master lost with no replica in its place, until it is back) is waited for
the same way by the first call only: while it still says so, calls fail at
once for DOWN_PAUSE, then one asks again.

Failures: short socket timeouts and a single quick retry make a dead server
fail in a second or two, not hang a request; the connection pool reconnects
by itself when the server is back. On one server the retry follows a
connection error only, never a timeout: a command that timed out may still
run (a server that stalls runs what it was sent when it wakes), and sent
twice an append would store its turn twice. Every redis (and socket) error is raised
as StoreFailure.

Bounds honoured: `ttl_seconds` (key expiry; sorted-set members and index
entries of expired conversations are swept on a later write),
`max_turns_per_conversation` (oldest turns trimmed, with their index entries),
`max_conversations` (the least recently written go first, across tenants,
counted in the global `rp:recent`, on a cluster too; stored responses are
counted and dropped the same way, on their own). A conversation whose
global-recency write failed is not counted until its next write (its TTL
still bounds it). `max_bytes` is not: bound Redis memory with its own
`maxmemory` and the `volatile-lru` policy (every history key has a TTL, so
all are candidates).

Eviction runs in batches: at most `slack` over, briefly. `slack` is 1% of
`max_conversations`, at least 1, at most SWEEP_BATCH (`eviction_slack`). An
append that counts more than `max_conversations + slack` sweeps before it
returns, back down to `max_conversations`: one script reads the count and
the oldest members, then the drops go in one pipeline and their unindexing
in another (on a cluster, one pipeline per master, at once), three round
trips for up to SWEEP_BATCH conversations. A sweep never drops the
conversation being written, nor one written since it was picked. One sweep
runs at a time per process: appends that finish while it runs (in this
process or on other replicas) can take the count past `max_conversations +
slack`, by at most the appends in flight, until the next append sweeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import (
    ClusterDownError,
    ClusterError,
    RedisClusterException,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError

from proxy.errors import ConfigError
from proxy.reasoning.blocks import Turn
from proxy.stores import redis_scripts as scripts
from proxy.stores.base import (
    ConversationInfo,
    ConversationKey,
    StoreFailure,
    StoreStats,
    TurnRefs,
    decode_turn,
    decode_turns,
    encode_turn,
)
from proxy.stores.redis_keys import SEP, Keys, is_cluster_url, parse_cluster_url

# Seconds: well below the runtime's per-call timeout, so a dead or
# unreachable server shows up as StoreFailure, fast.
CONNECT_TIMEOUT = 1.0
SOCKET_TIMEOUT = 1.0
SETTLE_SECONDS = 3.0  # a call answered TRYAGAIN (a slot in migration) is retried this long
# A cluster still answering CLUSTERDOWN after SETTLE_SECONDS is down (a master
# lost and no replica in its place): for this long, calls fail at once rather
# than each waiting SETTLE_SECONDS again; then one call asks it again.
DOWN_PAUSE = 1.0
SETTLE_PAUSE = 0.05
SWEEP_INTERVAL = 60.0  # seconds between sweeps of expired conversations
SWEEP_BATCH = 200  # conversations dropped per sweep at most
# A script that writes nothing but declares no `no-writes` flag: Redis 7
# refuses it as it refuses a write (OOM at `maxmemory` under `noeviction`,
# READONLY on a replica, NOREPLICAS under `min-replicas-to-write`), while
# PING and INFO still answer.
WRITE_PROBE = "#!lua\nreturn 1"
LIST_PAGE = 1000  # recency entries a listing reads per round trip, at most


def eviction_slack(max_conversations: int) -> int:
    """How far the count of conversations may run over `max_conversations`
    before a sweep takes it back down: 1% of the limit, at least 1, at most
    SWEEP_BATCH (what one sweep drops)."""
    return min(SWEEP_BATCH, max(1, max_conversations // 100))


Client = aioredis.Redis | RedisCluster
T = TypeVar("T")

# the errors that say a cluster call did not run, and may be tried again
_UNSETTLED = (ClusterError, TryAgainError)


def _text(value: Any) -> str:
    """A reply item as text (replies are bytes: the client does not decode,
    since turn records are binary JSON)."""
    return value.decode() if isinstance(value, bytes) else str(value)


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _texts(reply: Any) -> list[str]:
    return [_text(item) for item in reply]


def _scored(reply: Any) -> list[tuple[str, float]]:
    """The (member, score) pairs of a WITHSCORES reply."""
    return [(_text(member), float(score)) for member, score in reply]


def _pairs(reply: Any) -> list[tuple[str, float]]:
    """The (member, score) pairs of a flat WITHSCORES list (a script's reply)."""
    return [(_text(m), float(s)) for m, s in zip(reply[::2], reply[1::2], strict=True)]


def check_redis_url(url: str) -> None:
    """Raise ConfigError when the URL cannot work: it does not parse, its
    database is not a number, or it names an option redis-py does not have
    (the client object is built, no socket opened). A server that is down
    is no error here: the store connects when it comes up. Messages never
    quote the URL, which may hold a password."""
    if is_cluster_url(url):
        try:
            _cluster_client(url)
        except (TypeError, ValueError, RedisClusterException) as exc:
            raise ConfigError(f"invalid Redis store URL: {_option_error(exc)}") from None
        return
    try:
        parse_url(url)
    except ValueError as exc:
        raise ConfigError(f"invalid Redis store URL: {exc}") from None
    parts = urlsplit(url)
    if parts.scheme.lower() in ("redis", "rediss"):
        db = parts.path.lstrip("/")
        if db and not (db.isascii() and db.isdigit()):
            raise ConfigError(
                "invalid Redis store URL: the path must be a database number (redis://host:6379/0)"
            )
    try:
        aioredis.Redis.from_url(url).connection_pool.make_connection()  # type: ignore[no-untyped-call]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"invalid Redis store URL: {_option_error(exc)}") from None


CLUSTER_NODE_REFUSED = (
    "the Redis store URL names a Redis Cluster node: a cluster needs the cluster "
    "client, so name it redis+cluster://host:port[,host:port...] (or rediss+cluster://)"
)
NOT_A_CLUSTER = (
    "the Redis store URL says redis+cluster:// but the server is not in cluster mode: "
    "use redis://host:port/db for a standalone server"
)


def check_cluster_mode(url: str) -> None:
    """Raise ConfigError when the server answers and its mode is not the
    URL's: a cluster node behind a plain URL (its writes would fail on
    MOVED), or a standalone server behind a cluster URL. The proxy refuses
    to start rather than serve without history. A server that does not
    answer passes (as in `check_redis_url`); the store's ping refuses a
    mismatch found later."""
    cluster = is_cluster_url(url)
    target = parse_cluster_url(url).first_node_url if cluster else url
    client = redis.Redis.from_url(
        target, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=SOCKET_TIMEOUT
    )
    try:
        enabled = bool(client.info("cluster").get("cluster_enabled"))
    except (RedisError, OSError):
        return
    finally:
        client.close()
    if enabled and not cluster:
        raise ConfigError(CLUSTER_NODE_REFUSED)
    if cluster and not enabled:
        raise ConfigError(NOT_A_CLUSTER)


def _option_error(exc: Exception) -> str:
    """redis-py's complaint about a query option, without the rest of the URL."""
    text = str(exc)
    if "unexpected keyword argument" in text:
        return "unknown option " + text.rsplit("argument", 1)[1].strip()
    if isinstance(exc, RedisClusterException):
        return text.splitlines()[0]
    return type(exc).__name__


def _cluster_client(url: str) -> RedisCluster:
    """A cluster client (no socket opened until first use)."""
    parsed = parse_cluster_url(url)
    options: dict[str, Any] = {
        "socket_connect_timeout": CONNECT_TIMEOUT,
        "socket_timeout": SOCKET_TIMEOUT,
        # one retry after a reconnect or a fresh look at the cluster's layout
        "retry": Retry(NoBackoff(), 1),
        # a MOVED only patches that slot's owner: redis-py's periodic full
        # refresh closes every node's connections, under the calls that use them
        "reinitialize_steps": 0,
        **parsed.options,
    }
    nodes = [ClusterNode(host, port) for host, port in parsed.nodes]
    return RedisCluster(startup_nodes=nodes, **options)


def _client_for(url: str) -> Client:
    if is_cluster_url(url):
        return _cluster_client(url)
    return aioredis.Redis.from_url(
        url,
        socket_connect_timeout=CONNECT_TIMEOUT,
        socket_timeout=SOCKET_TIMEOUT,
        # one immediate retry, on a connection error only: it rides over a
        # connection the server closed while idle, and a dead server still
        # fails fast. Not on a timeout: the command may have run, and a
        # stalled server runs it again when it wakes (an append stored twice).
        retry=Retry(NoBackoff(), 1, supported_errors=(RedisConnectionError,)),
    )


@contextlib.contextmanager
def _failures(what: str) -> Iterator[None]:
    """The one place redis and socket errors become StoreFailure. ValueError
    covers records that no longer decode."""
    try:
        yield
    except (RedisError, RedisClusterException, OSError, TimeoutError, ValueError) as exc:
        raise StoreFailure(f"redis store {what} failed: {type(exc).__name__}: {exc}") from exc


async def _write_probe(call: Callable[[], Awaitable[Any]]) -> None:
    """Run WRITE_PROBE; a refusal (OOM, READONLY, NOREPLICAS) is StoreFailure."""
    with _failures("ping"):
        try:
            await call()
        except ResponseError as exc:
            if "compiling" not in str(exc):
                raise
            # a server before Redis 7 knows no script flags: it answered


class RedisStore:
    name = "redis"

    def __init__(
        self,
        url: str,
        *,
        max_conversations: int = 10_000,
        ttl_seconds: float = 7 * 24 * 3600,
        max_turns: int = 1000,
        prefix: str = "rp:",
        clock: Callable[[], float] = time.time,
    ) -> None:
        check_redis_url(url)  # refuse a malformed URL at start-up, not on the first request
        self.url = url
        self.cluster = is_cluster_url(url)
        self.keys = Keys(prefix)
        self._max_conversations = max_conversations
        self.slack = eviction_slack(max_conversations)
        # one server takes an append as one script; a cluster as three (one slot each)
        self.one_script = not self.cluster
        self._ttl = ttl_seconds
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._max_turns = max_turns
        self._clock = clock
        self._redis: Client | None = None
        self._scripts: dict[str, AsyncScript] = {}
        self._next_sweep = 0.0
        self._sweeping = False
        self.evictions = 0
        self.unsettled = 0  # calls a cluster did not run (TRYAGAIN...), tried again
        self._down_until = 0.0  # monotonic: the cluster said it is down; not asked until then

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Create the client (in the serving event loop) and check the server.
        A server that is down now is not fatal: the pool connects later."""
        if self._redis is None:
            with _failures("connect"):
                client = _client_for(self.url)
                self._redis = client
                self._scripts = {
                    name: client.register_script(text) for name, text in scripts.BY_NAME.items()
                }
        await self.ping()

    async def close(self) -> None:
        if self._redis is not None:
            client, self._redis = self._redis, None
            self._scripts = {}
            with _failures("close"):
                await client.aclose()

    async def ping(self) -> bool:
        """The server answers, in the URL's mode; on a cluster every primary
        says its state is ok and takes writes; one server takes writes
        (WRITE_PROBE). Each primary is asked for its own state: a master
        just restarted answers CLUSTERDOWN for its slots (Redis holds it
        down for 2 s) while the others already say ok."""
        r = self._client()
        if isinstance(r, RedisCluster):
            with _failures("ping"):
                await r.initialize()  # the layout: none yet at start, nor after a reset
                primaries = r.get_primaries()
                infos = await asyncio.gather(*(r.cluster_info(target_nodes=n) for n in primaries))
            for node, info in zip(primaries, infos, strict=True):
                state = _text(info.get("cluster_state"))
                if state != "ok":
                    raise StoreFailure(
                        f"redis store ping failed: cluster_state is {state} on {node.name}"
                    )
            # every primary holds some conversations: each must take writes
            await _write_probe(
                lambda: r.execute_command(
                    "EVAL", WRITE_PROBE, 0, target_nodes=RedisCluster.PRIMARIES
                )
            )
            self._down_until = 0.0  # every master says it serves its slots: ask again
            return True
        with _failures("ping"):
            info = await r.info("cluster")
        if info.get("cluster_enabled"):
            raise StoreFailure(CLUSTER_NODE_REFUSED)
        await _write_probe(lambda: r.eval(WRITE_PROBE, 0))
        return True

    def _client(self) -> Client:
        if self._redis is None:
            raise StoreFailure("the redis store is not started")
        return self._redis

    async def _settled(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`, again while a cluster answers that it did not run it (a
        slot in migration: TRYAGAIN, or redirections redis-py gave up on; a
        master just restarted: CLUSTERDOWN for its first 2 s). A cluster that
        still says CLUSTERDOWN after that is down: the calls of the next
        DOWN_PAUSE seconds fail at once, and then one asks again without
        waiting for it, so an outage does not slow every request down."""
        now = time.monotonic()
        if now < self._down_until:
            raise StoreFailure("redis store call failed: the cluster says it is down (CLUSTERDOWN)")
        deadline = now + SETTLE_SECONDS
        down = False  # the cluster said CLUSTERDOWN to this call
        try:
            while True:
                try:
                    result = await call()
                except _UNSETTLED as exc:
                    down = down or isinstance(exc, ClusterDownError)
                    if time.monotonic() > deadline or (down and self._down_until):
                        raise
                    self.unsettled += 1
                    await asyncio.sleep(SETTLE_PAUSE)
                else:
                    self._down_until = 0.0
                    return result
        except Exception:
            # however it ended (redis-py may meet the lost master itself as
            # it looks at the cluster's layout again, a ConnectionError)
            if down:
                self._down_until = time.monotonic() + DOWN_PAUSE
            raise

    async def _run(self, script: str, keys: list[str], args: Sequence[Any]) -> Any:
        if not self._scripts:
            raise StoreFailure("the redis store is not started")
        run = self._scripts[script]
        return await self._settled(lambda: run(keys=keys, args=args))

    # -- turns -------------------------------------------------------------------

    async def append(self, key: ConversationKey, turn: Turn, refs: TurnRefs) -> int:
        tenant, conversation = key.tenant, key.conversation
        now = self._clock()
        index_keys = refs.index_keys()
        member = f"{tenant}{SEP}{conversation}"
        conv_keys = self.keys.conversation(tenant, conversation)
        args = [encode_turn(turn), now, self._ttl_ms, self._max_turns, os.urandom(8).hex()]
        model = turn.model or ""
        with _failures("append"):
            if self.one_script:
                index, count = await self._run(
                    "APPEND_ALL",
                    [*conv_keys, *self.keys.tenant(tenant), self.keys.recent],
                    [*args, model, conversation, member, *index_keys],
                )
            else:
                appended = await self._run("APPEND", conv_keys, [*args, model, *index_keys])
                index, gen, stale = int(appended[0]), appended[1], appended[2]
                head = [conversation, gen, index, now, self._ttl_ms, len(stale)]
                _, count = await asyncio.gather(
                    self._run("INDEX", self.keys.tenant(tenant), [*head, *stale, *index_keys]),
                    self._run("TOUCH", [self.keys.recent], [now, member, self._ttl_ms]),
                )
        over = int(count) > self._max_conversations + self.slack
        if (over or now >= self._next_sweep) and not self._sweeping:
            self._sweeping = True  # one sweep at a time: the others would pick the same ones
            try:
                await self._sweep(now, member)
            except (RedisError, RedisClusterException, OSError, TimeoutError):
                # The turn is stored, so this append succeeded; the sweep is
                # housekeeping and runs again on the next write.
                self._next_sweep = 0.0
            finally:
                self._sweeping = False
        return int(index)

    async def _sweep(self, now: float, current: str) -> None:
        """Drop expired conversations (their keys are gone already; this clears
        what points at them), then the least recently written ones while there
        are more than `max_conversations`: all of one sweep at once, in three
        round trips (pipelines; on a cluster, one per master, at once)."""
        self._next_sweep = now + min(self._ttl, SWEEP_INTERVAL)
        cutoff = now - self._ttl
        count, expired, found = await self._run(
            "OLDEST", [self.keys.recent], [cutoff, self._max_conversations, SWEEP_BATCH]
        )
        excess = int(count) - int(expired) - self._max_conversations
        drops: list[tuple[str, float, bool]] = []  # member, newest last write, evicted
        for member, score in _pairs(found):
            if score < cutoff:
                drops.append((member, cutoff, False))
            elif excess > 0 and member != current:
                drops.append((member, score, True))
                excess -= 1
        if not drops:
            return
        dropped = await self._pipelined(
            [("DROP", self._conversation_keys(member), [repr(limit)]) for member, limit, _ in drops]
        )
        unindex: list[tuple[str, list[str], Sequence[Any]]] = []
        unlist: list[Any] = []
        for (member, limit, evicted), (status, written, refs) in zip(drops, dropped, strict=True):
            if int(status) == -1:  # written since: kept
                continue
            if evicted and int(status) == 1:
                self.evictions += 1
            tenant, _, conversation = member.partition(SEP)
            newest = _text(written) if written else repr(limit)
            unindex.append(("UNINDEX", self.keys.tenant(tenant), [conversation, newest, *refs]))
            unlist += [member, newest]
        if unlist:
            await self._pipelined([*unindex, ("UNLIST", [self.keys.recent], unlist)])

    def _conversation_keys(self, member: str) -> list[str]:
        tenant, _, conversation = member.partition(SEP)
        return self.keys.conversation(tenant, conversation)

    async def _pipelined(self, calls: list[tuple[str, list[str], Sequence[Any]]]) -> list[Any]:
        """Scripts in one pipeline (on a cluster, one per master, at once). A
        call the pipeline got an error for (a script the server lost, a slot
        in migration) is run again on its own, which reloads or waits: every
        script here can run twice."""
        r = self._client()
        if not self._scripts:
            raise StoreFailure("the redis store is not started")
        async with r.pipeline(transaction=False) as pipe:
            for name, keys, args in calls:
                pipe.execute_command("EVALSHA", self._scripts[name].sha, len(keys), *keys, *args)
            replies = await pipe.execute(raise_on_error=False)
        out: list[Any] = []
        for (name, keys, args), reply in zip(calls, replies, strict=True):
            if isinstance(reply, Exception):
                reply = await self._run(name, keys, args)
            out.append(reply)
        return out

    async def _drop(self, member: str, limit: float | None) -> int:
        """Drop a conversation unless written after `limit`; then what points
        at it: its index entries, its place in the recency sets (on one
        server, all in one script)."""
        tenant, _, conversation = member.partition(SEP)
        bound = "" if limit is None else repr(limit)
        if self.one_script:
            keys = [*self._conversation_keys(member), *self.keys.tenant(tenant), self.keys.recent]
            return int(await self._run("DROP_ALL", keys, [bound, conversation, member]))
        status, written, refs = await self._run("DROP", self._conversation_keys(member), [bound])
        if int(status) == -1:
            return -1
        # unlist only what was written up to the dropped incarnation's last write
        newest = _text(written) if written else bound
        await asyncio.gather(
            self._run("UNINDEX", self.keys.tenant(tenant), [conversation, newest, *refs]),
            self._run("UNLIST", [self.keys.recent], [member, newest]),
        )
        return int(status)

    async def turns(self, key: ConversationKey) -> list[Turn]:
        r = self._client()
        turns_key = self.keys.conversation(key.tenant, key.conversation)[0]
        with _failures("read"):
            return decode_turns(await self._settled(lambda: r.lrange(turns_key, 0, -1)))

    async def lookup(self, tenant: str, index_key: str) -> Turn | None:
        r = self._client()
        index = self.keys.tenant(tenant)[0]
        with _failures("lookup"):
            ref = await self._settled(lambda: r.hget(index, index_key))
            if ref is None:
                return None
            conversation, _, rest = _text(ref).rpartition(SEP)
            conversation, _, gen = conversation.rpartition(SEP)
            if not rest.isdigit():
                return None
            keys = self.keys.conversation(tenant, conversation)[:2]
            record = await self._run("LOOKUP", keys, [gen, rest])
            return None if record is None else decode_turn(record)

    async def delete(self, key: ConversationKey) -> bool:
        with _failures("delete"):
            return await self._drop(f"{key.tenant}{SEP}{key.conversation}", limit=None) == 1

    async def conversations(self, tenant: str | None, limit: int = 100) -> list[ConversationInfo]:
        """The `limit` most recently written live conversations. A member of
        the recency set can outlive its conversation (expired a moment ago,
        dropped by another replica, evicted by Redis's `maxmemory`): such
        members are skipped and the listing reads on past them, page after
        page, so that a caller asking for one more than it shows (`has_more`)
        is told the truth. Pages go down the scores from a cursor (the last
        score read, and how many members at that score were read), not by
        offset: a conversation written meanwhile moves above the cursor
        instead of shifting the later pages, so none is listed twice or
        passed over for it."""
        r = self._client()
        cutoff = self._clock() - self._ttl
        recent = self.keys.recent if tenant is None else self.keys.tenant(tenant)[1]
        out: list[ConversationInfo] = []
        seen: set[str] = set()
        top, at_top, page = math.inf, 0, limit
        with _failures("list"):
            while len(out) < limit:
                found = _scored(await self._range(r, recent, top, cutoff, at_top, page))
                out += await self._live(r, tenant, [m for m in found if m[0] not in seen])
                seen.update(member for member, _ in found)
                if len(found) < page:
                    break
                last = found[-1][1]
                tied = sum(1 for _, score in found if score == last)
                at_top = tied + (at_top if last == top else 0)
                top, page = last, min(2 * page, LIST_PAGE)
        return out[:limit]

    async def _range(
        self, r: Client, recent: str, top: float, cutoff: float, skip: int, num: int
    ) -> Any:
        """Members of a recency set from score `top` down to `cutoff`, the
        first `skip` of them left out, `num` at most, with their scores."""
        return await self._settled(
            lambda: r.zrevrangebyscore(recent, top, cutoff, start=skip, num=num, withscores=True)
        )

    async def _live(
        self, r: Client, tenant: str | None, found: list[tuple[str, float]]
    ) -> list[ConversationInfo]:
        """The listed members whose conversation is still there."""
        if not found:
            return []
        names: list[tuple[str, str, float]] = []
        for member, score in found:
            t, _, c = member.partition(SEP) if tenant is None else (tenant, "", member)
            names.append((t, c, score))
        keys = [self.keys.conversation(t, c)[:2] for t, c, _ in names]
        metas = await self._settled(lambda: self._metas(r, keys))
        out: list[ConversationInfo] = []
        for (t, c, updated), ((n, model), kept) in zip(names, metas, strict=True):
            # expired or dropped (its recency entry not yet swept), or its turns
            # evicted by `maxmemory`: GET /v1/conversations/{id} finds nothing
            if n is None or not int(kept):
                continue
            # the turns kept (`n` counts every turn ever appended)
            out.append(
                ConversationInfo(t, c, int(kept), updated, model.decode() if model else None)
            )
        return out

    @staticmethod
    async def _metas(r: Client, keys: list[list[str]]) -> list[tuple[Any, Any]]:
        """Per conversation (its turns key, its hash): the hash's `n` and
        `model`, and how many turns the list keeps; pipelined (on a cluster,
        per node)."""
        async with r.pipeline(transaction=False) as pipe:
            for turns_key, conv_key in keys:
                pipe.execute_command("HMGET", conv_key, "n", "model")
                pipe.execute_command("LLEN", turns_key)
            replies = list(await pipe.execute())
        return list(zip(replies[::2], replies[1::2], strict=True))

    @staticmethod
    async def _each(r: Client, keys: list[str], *command: str) -> list[Any]:
        """One command per key, pipelined (on a cluster, per node)."""
        name, *rest = command
        async with r.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.execute_command(name, key, *rest)
            return list(await pipe.execute())

    # -- the tenant secret --------------------------------------------------------

    async def tenant_secret(self, drawn: bytes) -> bytes:
        r = self._client()
        with _failures("secret"):
            await self._settled(lambda: r.set(self.keys.secret, drawn, nx=True))
            kept = await self._settled(lambda: r.get(self.keys.secret))
        if not kept:
            raise StoreFailure("the redis store did not keep the tenant secret")
        return _bytes(kept)

    # -- profiles ----------------------------------------------------------------

    async def get_profile(self, name: str) -> dict[str, Any] | None:
        r = self._client()
        with _failures("profile read"):
            body = await self._settled(lambda: r.hget(self.keys.profiles, name))
            if body is None:
                return None
            value: dict[str, Any] = orjson.loads(body)
            return value

    async def put_profile(self, name: str, values: dict[str, Any]) -> None:
        r = self._client()
        with _failures("profile write"):
            await self._settled(lambda: r.hset(self.keys.profiles, name, orjson.dumps(values)))

    async def delete_profile(self, name: str) -> bool:
        r = self._client()
        with _failures("profile delete"):
            return int(await self._settled(lambda: r.hdel(self.keys.profiles, name))) > 0

    async def list_profiles(self) -> dict[str, dict[str, Any]]:
        r = self._client()
        with _failures("profile list"):
            items = await self._settled(lambda: r.hgetall(self.keys.profiles))
            return {_text(k): orjson.loads(v) for k, v in items.items()}

    # -- stored responses ----------------------------------------------------------

    async def put_response(self, tenant: str, response_id: str, record: bytes) -> None:
        """The record, then its place in `rp:responses`, then the records
        evicted to make room: on one server one script, on a cluster each in
        its own slot."""
        r = self._client()
        now = self._clock()
        member = f"{tenant}{SEP}{response_id}"
        body = bytes(record)
        key = self.keys.response(tenant, response_id)
        listing = [now, member, self._ttl_ms, now - self._ttl, self._max_conversations]
        with _failures("response write"):
            if self.one_script:
                evicted = _texts(
                    await self._run(
                        "PUT_RESPONSE_ALL",
                        [key, self.keys.responses],
                        [body, *listing, self.keys.prefix],
                    )
                )
            else:
                await self._settled(lambda: r.set(key, body, px=self._ttl_ms))
                evicted = _texts(await self._run("LIST_RESPONSE", [self.keys.responses], listing))
                for gone in evicted:
                    t, _, i = gone.partition(SEP)
                    gone_key = self.keys.response(t, i)
                    await self._settled(lambda: r.delete(gone_key))  # noqa: B023 (awaited at once)
        self.evictions += len(evicted)

    async def get_response(self, tenant: str, response_id: str) -> bytes | None:
        r = self._client()
        key = self.keys.response(tenant, response_id)
        with _failures("response read"):
            record = await self._settled(lambda: r.get(key))
        return None if record is None else _bytes(record)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        r = self._client()
        key = self.keys.response(tenant, response_id)
        member = f"{tenant}{SEP}{response_id}"
        with _failures("response delete"):
            deleted = await self._settled(lambda: r.delete(key))
            await self._settled(lambda: r.zrem(self.keys.responses, member))
        return int(deleted) > 0

    async def stats(self) -> StoreStats:
        """Counts live conversations, their turns and the memory of their turn
        lists (Redis's estimate): one pipelined pass, meant for a metrics
        scrape, not for every request."""
        r = self._client()
        cutoff = self._clock() - self._ttl
        with _failures("stats"):
            members = _texts(
                await self._settled(lambda: r.zrangebyscore(self.keys.recent, cutoff, "+inf"))
            )
            turn_keys = []
            for member in members:
                tenant, _, conversation = member.partition(SEP)
                turn_keys.append(self.keys.conversation(tenant, conversation)[0])
            lengths = await self._settled(lambda: self._each(r, turn_keys, "LLEN"))
            sizes = await self._settled(lambda: self._each(r, turn_keys, "MEMORY USAGE"))
        turns = sum(int(n) for n in lengths)
        used = sum(int(b or 0) for b in sizes)
        return StoreStats(len(members), turns, used, {"evictions": self.evictions})
