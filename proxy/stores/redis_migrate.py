"""`reasoning-proxy store migrate --store redis://...`: moves a Redis store
written before the hash-tagged key scheme (redis_keys.py) to it, in place.

Before, keys were `rp:turns|conv|refs:<tenant>:<conversation>`,
`rp:index:<tenant>`, `rp:recent:<tenant>` and `rp:resp:<tenant>:<id>`, and
a refs entry was `<turn>\\x1f<index key>`. `rp:recent`, `rp:responses` and
`rp:profiles` keep their names and contents. Keys are renamed (their TTLs
go with them); a refs list is rewritten with its conversation's `gen`; a
conversation's `t` (last write) comes from `rp:recent`.

Only a standalone server can hold the old names (a cluster was refused
then). Run it with the old proxies stopped, before or just after the new
ones start; running it again moves nothing twice. Where the new names exist
already (the new version wrote that conversation first), the new data is
kept: old turns are left to expire, old index and recency entries are added
only where the new ones have none.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

import redis

from proxy.errors import ConfigError
from proxy.stores.redis import CONNECT_TIMEOUT, check_cluster_mode, check_redis_url
from proxy.stores.redis_keys import SEP, Keys, is_cluster_url


@dataclass
class Moved:
    conversations: int = 0
    indexes: int = 0
    recents: int = 0
    responses: int = 0
    kept_newer: int = 0  # old keys left alone: the new names were there first
    dropped_refs: int = 0  # refs of conversations gone already (unindexed)

    def summary(self) -> str:
        return (
            f"moved {self.conversations} conversation(s), {self.indexes} tenant index(es), "
            f"{self.recents} tenant recency set(s), {self.responses} stored response(s); "
            f"{self.kept_newer} left to expire (newer data under the new names), "
            f"{self.dropped_refs} stale refs list(s) dropped"
        )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _scan(r: redis.Redis, pattern: str) -> Iterator[str]:
    # a list first: the loop renames what it found, which SCAN may see again
    yield from [_text(k) for k in r.scan_iter(match=pattern, count=500)]


def migrate(r: redis.Redis, prefix: str = "rp:") -> Moved:
    keys, moved = Keys(prefix), Moved()
    for old_conv in _scan(r, f"{prefix}conv:*"):
        tenant, _, conversation = old_conv[len(prefix) + 5 :].partition(":")
        _conversation(r, keys, tenant, conversation, moved)
    for old_refs in _scan(r, f"{prefix}refs:*"):  # what is left has no conversation
        tenant, _, conversation = old_refs[len(prefix) + 5 :].partition(":")
        _unindex_expired(r, f"{prefix}index:{tenant}", conversation, old_refs)
        moved.dropped_refs += int(r.delete(old_refs))
    for old in _scan(r, f"{prefix}index:*"):
        new = keys.tenant(old[len(prefix) + 6 :])[0]
        if r.renamenx(old, new):
            moved.indexes += 1
        else:
            for field, value in r.hgetall(old).items():
                r.hsetnx(new, field, value)
            r.delete(old)
            moved.kept_newer += 1
    for old in _scan(r, f"{prefix}recent:*"):
        new = keys.tenant(old[len(prefix) + 7 :])[1]
        if r.renamenx(old, new):
            moved.recents += 1
        else:
            pairs = cast(list[tuple[bytes, float]], r.zrange(old, 0, -1, withscores=True))
            for member, score in pairs:
                r.zadd(new, {member: score}, gt=True)
            r.delete(old)
            moved.kept_newer += 1
    for old in _scan(r, f"{prefix}resp:*"):
        tenant, _, response_id = old[len(prefix) + 5 :].partition(":")
        if r.renamenx(old, keys.response(tenant, response_id)):
            moved.responses += 1
        else:
            r.delete(old)
            moved.kept_newer += 1
    return moved


def _conversation(r: redis.Redis, keys: Keys, tenant: str, conversation: str, moved: Moved) -> None:
    p = keys.prefix
    old_turns, old_conv, old_refs = (
        f"{p}{kind}:{tenant}:{conversation}" for kind in ("turns", "conv", "refs")
    )
    turns, conv, refs = keys.conversation(tenant, conversation)
    if r.exists(conv):
        moved.kept_newer += 1
        return
    gen = r.hget(old_conv, "gen")
    written = r.zscore(keys.recent, f"{tenant}{SEP}{conversation}")
    entries = r.lrange(old_refs, 0, -1)
    ttl = int(r.pttl(old_refs))
    if r.exists(old_turns):
        r.rename(old_turns, turns)
    r.rename(old_conv, conv)
    r.hset(conv, "t", repr(time.time() if written is None else float(written)))
    if entries and gen is not None:
        rewritten = []
        for entry in entries:
            turn, _, index_key = _text(entry).partition(SEP)
            rewritten.append(f"{turn}{SEP}{_text(gen)}{SEP}{index_key}")
        r.rpush(refs, *rewritten)
        if ttl > 0:
            r.pexpire(refs, ttl)
    r.delete(old_refs)
    moved.conversations += 1


def _unindex_expired(r: redis.Redis, index: str, conversation: str, refs: str) -> None:
    """What the old version's sweep did for an expired conversation: drop
    its index entries (`<conversation>\x1f<gen>\x1f<turn>`, any gen)."""
    for entry in r.lrange(refs, 0, -1):
        turn, _, index_key = _text(entry).partition(SEP)
        ref = r.hget(index, index_key)
        if ref is None:
            continue
        name, _, rest = _text(ref).partition(SEP)
        if name == conversation and rest.endswith(f"{SEP}{turn}"):
            r.hdel(index, index_key)


def migrate_command(url: str | None) -> str:
    """Check the URL, migrate, and say what moved. ConfigError when the URL
    names no standalone Redis store."""
    if not url or not url.lower().startswith(("redis://", "rediss://")):
        if url and is_cluster_url(url):
            raise ConfigError(
                "nothing to migrate on a cluster: the old key names were only ever "
                "written to a standalone server"
            )
        raise ConfigError("store migrate needs --store redis://host:port/db (or rediss://)")
    check_redis_url(url)
    check_cluster_mode(url)
    client = redis.Redis.from_url(url, socket_connect_timeout=CONNECT_TIMEOUT)
    try:
        return migrate(client).summary()
    except (redis.RedisError, OSError) as exc:
        raise ConfigError(f"store migrate failed: {type(exc).__name__}: {exc}") from None
    finally:
        client.close()
