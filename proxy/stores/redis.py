"""The Redis store: history shared by several workers and replicas.

URL: `redis://[user:password@]host:port/db` or `rediss://...` (TLS), as
redis-py reads it (query options such as `?socket_timeout=3` override the
defaults below). A standalone server (or a Sentinel-managed primary) is
expected: the scripts touch keys they compute, which Redis Cluster forbids.
A cluster node is refused: at start-up when it answers then (`check_not_cluster`),
else by every ping (so /readyz says 503 and the failure is logged).

Keys (prefix `rp:` by default; tenants never contain `:`, conversation ids
come last):
- `rp:turns:<tenant>:<conversation>`  list of turn records, oldest first
- `rp:conv:<tenant>:<conversation>`   hash: `n` turns ever appended (the next
  index), `gen` (a random id of this incarnation of the conversation), `model`
- `rp:refs:<tenant>:<conversation>`   list of `<turn>\\x1f<index key>`: what
  this conversation wrote to the tenant index, so it can be unindexed
- `rp:index:<tenant>`                 hash: `t:<tool_call_id>` / `f:<fp>` ->
  `<conversation>\\x1f<gen>\\x1f<turn>`
- `rp:recent:<tenant>`                sorted set: conversations by last write
- `rp:recent`                         sorted set: `<tenant>\\x1f<conversation>`
  by last write, every tenant (listing all, sweeping, eviction)
- `rp:profiles`                       hash: name -> JSON settings
- `rp:resp:<tenant>:<id>`             a stored response object (Responses API)
- `rp:responses`                      sorted set: `<tenant>\\x1f<id>` by write time

Every history key carries a TTL of `ttl_seconds`, refreshed on each write to
it (the refs list lives twice as long, so a sweep can still unindex an
expired conversation). An index entry names the `gen` of the conversation it
points at, so an entry left behind by an expired conversation never matches
a new conversation that reuses the id. Profiles are settings an admin wrote,
not history: they do not expire (as in the other stores).

Each append is one Lua script (atomic: concurrent appends to one
conversation from several replicas get distinct, ordered indexes), and so is
each lookup (one round trip) and each drop. Scripts are sent by SHA and
reloaded by redis-py when a restarted server no longer knows them.

Failures: short socket timeouts and a single quick retry make a dead server
fail in a second or two, not hang a request; the connection pool reconnects
by itself when the server is back. Every redis (and socket) error is raised
as StoreFailure.

Bounds honoured: `ttl_seconds` (key expiry; sorted-set members and index
entries of expired conversations are swept on a later write),
`max_turns_per_conversation` (oldest turns trimmed, with their index entries),
`max_conversations` (the least recently written go first, across tenants;
stored responses are counted and dropped the same way, on their own).
`max_bytes` is not: bound Redis memory with its own `maxmemory` and the
`volatile-lru` policy (every history key has a TTL, so all are candidates).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from urllib.parse import urlsplit

import orjson
import redis
import redis.asyncio as aioredis
from redis.asyncio.connection import parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.commands.core import AsyncScript
from redis.exceptions import RedisError

from proxy.errors import ConfigError
from proxy.reasoning.blocks import Turn
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

# Seconds: well below the runtime's per-call timeout, so a dead or
# unreachable server shows up as StoreFailure, fast.
CONNECT_TIMEOUT = 1.0
SOCKET_TIMEOUT = 1.0
SWEEP_INTERVAL = 60.0  # seconds between sweeps of expired conversations
SWEEP_BATCH = 200  # conversations dropped per sweep at most
SEP = "\x1f"

# Shared by the scripts: unindex a refs entry (`<turn>\x1f<key>`) when the
# index still points at `prefix` (`<conversation>\x1f` or a full reference).
_UNINDEX = """
local function turn_of(entry)
  return tonumber(string.sub(entry, 1, string.find(entry, '\\31', 1, true) - 1))
end
local function unindex(index, entry, prefix, exact)
  local sep = string.find(entry, '\\31', 1, true)
  local key = string.sub(entry, sep + 1)
  local ref = redis.call('HGET', index, key)
  if not ref then return end
  if exact then
    if ref == prefix .. string.sub(entry, 1, sep - 1) then redis.call('HDEL', index, key) end
  elseif string.sub(ref, 1, #prefix) == prefix then
    redis.call('HDEL', index, key)
  end
end
"""

# KEYS: turns, conv, refs, index, recent:<tenant>, recent
# ARGV: record, now, ttl_ms, max_turns, conversation, new gen, model or '', member, index keys...
# -> {turn index, conversations in `recent`}
APPEND = (
    _UNINDEX
    + """
local turns, conv, refs, index = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local ttl, max = tonumber(ARGV[3]), tonumber(ARGV[4])
local mine = ARGV[5] .. '\\31'
if redis.call('HSETNX', conv, 'gen', ARGV[6]) == 1 then
  -- a new conversation: forget what an expired one of the same id left behind
  for _, entry in ipairs(redis.call('LRANGE', refs, 0, -1)) do
    unindex(index, entry, mine, false)
  end
  redis.call('DEL', turns, refs)
end
local ref = mine .. redis.call('HGET', conv, 'gen') .. '\\31'
local n = redis.call('HINCRBY', conv, 'n', 1)
local turn = n - 1
if ARGV[7] ~= '' then redis.call('HSET', conv, 'model', ARGV[7]) end
redis.call('RPUSH', turns, ARGV[1])
for i = 9, #ARGV do
  redis.call('HSET', index, ARGV[i], ref .. turn)
  redis.call('RPUSH', refs, turn .. '\\31' .. ARGV[i])
end
local first = n - max  -- the oldest turn kept
if first > 0 then
  redis.call('LTRIM', turns, -max, -1)
  while true do
    local entry = redis.call('LINDEX', refs, 0)
    if not entry or turn_of(entry) >= first then break end
    redis.call('LPOP', refs)
    unindex(index, entry, ref, true)
  end
end
redis.call('ZADD', KEYS[5], ARGV[2], ARGV[5])
redis.call('ZADD', KEYS[6], ARGV[2], ARGV[8])
for i = 1, 6 do redis.call('PEXPIRE', KEYS[i], ttl) end
redis.call('PEXPIRE', refs, 2 * ttl)
return {turn, redis.call('ZCARD', KEYS[6])}
"""
)

# KEYS: index; ARGV: index key, turns key prefix, conv key prefix -> record or nil
LOOKUP = """
local ref = redis.call('HGET', KEYS[1], ARGV[1])
if not ref then return false end
local conversation, gen, turn = string.match(ref, '^(.*)\\31([^\\31]*)\\31(%d+)$')
if not conversation then return false end
local meta = redis.call('HMGET', ARGV[3] .. conversation, 'n', 'gen')
if not meta[1] or meta[2] ~= gen then return false end
local turns = ARGV[2] .. conversation
local len = redis.call('LLEN', turns)
local position = tonumber(turn) - (tonumber(meta[1]) - len)
if position < 0 or position >= len then return false end
return redis.call('LINDEX', turns, position)
"""

# KEYS: turns, conv, refs, index, recent:<tenant>, recent
# ARGV: conversation, member, newest score to drop ('' for any)
# -> 1 dropped, 0 nothing there, -1 kept (written since it was chosen)
DROP = (
    _UNINDEX
    + """
local score = redis.call('ZSCORE', KEYS[6], ARGV[2])
if ARGV[3] ~= '' and score and tonumber(score) > tonumber(ARGV[3]) then return -1 end
local existed = redis.call('EXISTS', KEYS[2])
local mine = ARGV[1] .. '\\31'
for _, entry in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  unindex(KEYS[4], entry, mine, false)
end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
redis.call('ZREM', KEYS[5], ARGV[1])
redis.call('ZREM', KEYS[6], ARGV[2])
return existed
"""
)

# KEYS: the response's key, the responses sorted set
# ARGV: record, ttl_ms, now, cutoff, max, member, response key prefix
PUT_RESPONSE = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[6])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. ARGV[4])
local excess = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[5])
local dropped = 0
if excess > 0 then
  for _, member in ipairs(redis.call('ZRANGE', KEYS[2], 0, excess)) do
    if dropped < excess and member ~= ARGV[6] then
      local sep = string.find(member, '\\31', 1, true)
      local tenant, id = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
      redis.call('DEL', ARGV[7] .. tenant .. ':' .. id)
      redis.call('ZREM', KEYS[2], member)
      dropped = dropped + 1
    end
  end
end
redis.call('PEXPIRE', KEYS[2], ARGV[2])
return dropped
"""


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


def check_redis_url(url: str) -> None:
    """Raise ConfigError when the URL cannot work: it does not parse, its
    database is not a number, or it names an option redis-py does not have
    (the connection object is built, no socket opened). A server that is
    down is no error here: the store connects when it comes up. Messages
    never quote the URL, which may hold a password."""
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


CLUSTER_REFUSED = (
    "the Redis store URL names a Redis Cluster node: Redis Cluster is not supported "
    "(the store's scripts touch keys in several slots); use a standalone Redis or a "
    "Sentinel-managed primary"
)


def check_not_cluster(url: str) -> None:
    """Raise ConfigError when the server answers and runs in cluster mode:
    its writes would fail on MOVED, so the proxy refuses to start rather
    than serve without history. A server that does not answer passes (as
    in `check_redis_url`); the store's ping refuses a cluster found later."""
    client = redis.Redis.from_url(
        url, socket_connect_timeout=CONNECT_TIMEOUT, socket_timeout=SOCKET_TIMEOUT
    )
    try:
        enabled = client.info("cluster").get("cluster_enabled")
    except (RedisError, OSError):
        return
    finally:
        client.close()
    if enabled:
        raise ConfigError(CLUSTER_REFUSED)


def _option_error(exc: Exception) -> str:
    """redis-py's complaint about a query option, without the rest of the URL."""
    text = str(exc)
    if "unexpected keyword argument" in text:
        return "unknown option " + text.rsplit("argument", 1)[1].strip()
    return type(exc).__name__


@contextlib.contextmanager
def _failures(what: str) -> Iterator[None]:
    """The one place redis and socket errors become StoreFailure. ValueError
    covers records that no longer decode."""
    try:
        yield
    except (RedisError, OSError, TimeoutError, ValueError) as exc:
        raise StoreFailure(f"redis store {what} failed: {type(exc).__name__}: {exc}") from exc


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
        self._max_conversations = max_conversations
        self._ttl = ttl_seconds
        self._ttl_ms = max(1, round(ttl_seconds * 1000))
        self._max_turns = max_turns
        self._prefix = prefix
        self._clock = clock
        self._redis: aioredis.Redis | None = None
        self._append: AsyncScript | None = None
        self._lookup: AsyncScript | None = None
        self._drop_script: AsyncScript | None = None
        self._put_response: AsyncScript | None = None
        self._next_sweep = 0.0
        self.evictions = 0

    # -- keys --------------------------------------------------------------------

    def _keys(self, tenant: str, conversation: str) -> list[str]:
        """The six keys an append, a drop or a delete touch, in script order."""
        p = self._prefix
        return [
            f"{p}turns:{tenant}:{conversation}",
            f"{p}conv:{tenant}:{conversation}",
            f"{p}refs:{tenant}:{conversation}",
            f"{p}index:{tenant}",
            f"{p}recent:{tenant}",
            f"{p}recent",
        ]

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        """Create the client (in the serving event loop) and check the server.
        A server that is down now is not fatal: the pool connects later."""
        if self._redis is None:
            with _failures("connect"):
                self._redis = aioredis.Redis.from_url(
                    self.url,
                    socket_connect_timeout=CONNECT_TIMEOUT,
                    socket_timeout=SOCKET_TIMEOUT,
                    # one immediate retry: it rides over a connection the server
                    # closed while idle, and a dead server still fails fast
                    retry=Retry(NoBackoff(), 1),
                )
                self._append = self._redis.register_script(APPEND)
                self._lookup = self._redis.register_script(LOOKUP)
                self._drop_script = self._redis.register_script(DROP)
                self._put_response = self._redis.register_script(PUT_RESPONSE)
        await self.ping()

    async def close(self) -> None:
        if self._redis is not None:
            client, self._redis = self._redis, None
            self._append = self._lookup = self._drop_script = self._put_response = None
            with _failures("close"):
                await client.aclose()

    async def ping(self) -> bool:
        """The server answers, and is no cluster node (whose writes fail on MOVED)."""
        with _failures("ping"):
            info = await self._client().info("cluster")
        if info.get("cluster_enabled"):
            raise StoreFailure(CLUSTER_REFUSED)
        return True

    def _client(self) -> aioredis.Redis:
        if self._redis is None:
            raise StoreFailure("the redis store is not started")
        return self._redis

    def _script(self, script: AsyncScript | None) -> AsyncScript:
        if script is None:
            raise StoreFailure("the redis store is not started")
        return script

    # -- turns -------------------------------------------------------------------

    async def append(self, key: ConversationKey, turn: Turn, refs: TurnRefs) -> int:
        r = self._client()
        now = self._clock()
        member = f"{key.tenant}{SEP}{key.conversation}"
        args: list[str | bytes | float | int] = [
            encode_turn(turn),
            now,
            self._ttl_ms,
            self._max_turns,
            key.conversation,
            os.urandom(8).hex(),
            turn.model or "",
            member,
            *refs.index_keys(),
        ]
        with _failures("append"):
            index, count = await self._script(self._append)(
                keys=self._keys(key.tenant, key.conversation), args=args
            )
        if now >= self._next_sweep or int(count) > self._max_conversations:
            try:
                await self._sweep(r, now, int(count), member)
            except (RedisError, OSError, TimeoutError):
                # The turn is stored, so this append succeeded; the sweep is
                # housekeeping and runs again on the next write.
                self._next_sweep = 0.0
        return int(index)

    async def _sweep(self, r: aioredis.Redis, now: float, count: int, current: str) -> None:
        """Drop expired conversations (their keys are gone already; this clears
        what points at them), then the least recently written ones while there
        are more than `max_conversations`."""
        self._next_sweep = now + min(self._ttl, SWEEP_INTERVAL)
        recent = f"{self._prefix}recent"
        cutoff = now - self._ttl
        expired = _texts(
            await r.zrangebyscore(recent, "-inf", f"({cutoff}", start=0, num=SWEEP_BATCH)
        )
        for member in expired:
            await self._drop(r, member, limit=cutoff)
        excess = count - len(expired) - self._max_conversations
        if excess <= 0:
            return
        for member, score in _scored(await r.zrange(recent, 0, excess, withscores=True)):
            if excess <= 0:
                break
            if member == current:
                continue
            if await self._drop(r, member, limit=score) == 1:
                self.evictions += 1
                excess -= 1

    async def _drop(self, r: aioredis.Redis, member: str, limit: float | None) -> int:
        tenant, _, conversation = member.partition(SEP)
        keys = self._keys(tenant, conversation)
        bound = "" if limit is None else repr(limit)
        return int(
            await self._script(self._drop_script)(keys=keys, args=[conversation, member, bound])
        )

    async def turns(self, key: ConversationKey) -> list[Turn]:
        turns_key = self._keys(key.tenant, key.conversation)[0]
        with _failures("read"):
            return decode_turns(await self._client().lrange(turns_key, 0, -1))

    async def lookup(self, tenant: str, index_key: str) -> Turn | None:
        p = self._prefix
        with _failures("lookup"):
            record = await self._script(self._lookup)(
                keys=[f"{p}index:{tenant}"],
                args=[index_key, f"{p}turns:{tenant}:", f"{p}conv:{tenant}:"],
            )
            return None if record is None else decode_turn(record)

    async def delete(self, key: ConversationKey) -> bool:
        with _failures("delete"):
            member = f"{key.tenant}{SEP}{key.conversation}"
            return await self._drop(self._client(), member, limit=None) == 1

    async def conversations(self, tenant: str | None, limit: int = 100) -> list[ConversationInfo]:
        r = self._client()
        cutoff = self._clock() - self._ttl
        recent = f"{self._prefix}recent" + ("" if tenant is None else f":{tenant}")
        with _failures("list"):
            found = await r.zrevrangebyscore(
                recent, "+inf", cutoff, start=0, num=limit, withscores=True
            )
            names: list[tuple[str, str, float]] = []
            for member, score in _scored(found):
                t, _, c = member.partition(SEP) if tenant is None else (tenant, "", member)
                names.append((t, c, score))
            async with r.pipeline(transaction=False) as pipe:
                for t, c, _ in names:
                    pipe.hmget(self._keys(t, c)[1], ["n", "model"])
                metas: Sequence[list[bytes | None]] = await pipe.execute()
        out: list[ConversationInfo] = []
        for (t, c, updated), (n, model) in zip(names, metas, strict=True):
            if n is None:  # expired or dropped since the listing
                continue
            out.append(ConversationInfo(t, c, int(n), updated, model.decode() if model else None))
        return out

    # -- profiles ----------------------------------------------------------------

    async def get_profile(self, name: str) -> dict[str, Any] | None:
        with _failures("profile read"):
            body = await self._client().hget(f"{self._prefix}profiles", name)
            if body is None:
                return None
            value: dict[str, Any] = orjson.loads(body)
            return value

    async def put_profile(self, name: str, values: dict[str, Any]) -> None:
        with _failures("profile write"):
            await self._client().hset(f"{self._prefix}profiles", name, orjson.dumps(values))

    async def delete_profile(self, name: str) -> bool:
        with _failures("profile delete"):
            return int(await self._client().hdel(f"{self._prefix}profiles", name)) > 0

    async def list_profiles(self) -> dict[str, dict[str, Any]]:
        with _failures("profile list"):
            items = await self._client().hgetall(f"{self._prefix}profiles")
            return {_text(k): orjson.loads(v) for k, v in items.items()}

    # -- stored responses ----------------------------------------------------------

    async def put_response(self, tenant: str, response_id: str, record: bytes) -> None:
        p = self._prefix
        now = self._clock()
        with _failures("response write"):
            dropped = await self._script(self._put_response)(
                keys=[f"{p}resp:{tenant}:{response_id}", f"{p}responses"],
                args=[
                    bytes(record),
                    self._ttl_ms,
                    now,
                    now - self._ttl,
                    self._max_conversations,
                    f"{tenant}{SEP}{response_id}",
                    f"{p}resp:",
                ],
            )
        self.evictions += int(dropped)

    async def get_response(self, tenant: str, response_id: str) -> bytes | None:
        with _failures("response read"):
            record = await self._client().get(f"{self._prefix}resp:{tenant}:{response_id}")
        return None if record is None else _bytes(record)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        r = self._client()
        with _failures("response delete"):
            async with r.pipeline(transaction=True) as pipe:
                pipe.delete(f"{self._prefix}resp:{tenant}:{response_id}")
                pipe.zrem(f"{self._prefix}responses", f"{tenant}{SEP}{response_id}")
                deleted, _ = await pipe.execute()
        return int(deleted) > 0

    async def stats(self) -> StoreStats:
        """Counts live conversations, their turns and the memory of their turn
        lists (Redis's estimate): one pipelined pass, meant for a metrics
        scrape, not for every request."""
        r = self._client()
        cutoff = self._clock() - self._ttl
        with _failures("stats"):
            members = _texts(await r.zrangebyscore(f"{self._prefix}recent", cutoff, "+inf"))
            async with r.pipeline(transaction=False) as pipe:
                for member in members:
                    tenant, _, conversation = member.partition(SEP)
                    turns_key = self._keys(tenant, conversation)[0]
                    pipe.llen(turns_key)
                    pipe.memory_usage(turns_key)
                results = await pipe.execute()
        turns = sum(int(n) for n in results[0::2])
        used = sum(int(b or 0) for b in results[1::2])
        return StoreStats(len(members), turns, used, {"evictions": self.evictions})
