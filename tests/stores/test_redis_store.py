"""What only the Redis store has: key layout and TTLs, sweeps of expired
conversations, and a server that dies and comes back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis
from redis.cluster import RedisCluster

from proxy.history.keys import ConversationKey
from proxy.stores.base import ReasoningStore, StoreFailure, TurnRefs
from proxy.stores.redis import RedisStore
from proxy.stores.redis_keys import parse_cluster_url
from tests.harness import free_port
from tests.stores.conftest import START, Backend, FakeClock
from tests.stores.servers import RedisServer
from tests.stores.test_contract import ALICE, turn

pytestmark = pytest.mark.anyio


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def test_every_history_key_is_namespaced_and_expires(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    store = RedisStore(redis_server.url, prefix="ttl-check:", ttl_seconds=600)
    await store.start()
    try:
        key = ConversationKey(ALICE, "c1")
        await store.append(key, turn("1", call="call_1"), TurnRefs(("call_1",), "fp-1"))
        await store.put_profile("deep", {"effort": "high"})
        found = await raw.keys("ttl-check:*")
        names = sorted(k.decode() if isinstance(k, bytes) else k for k in found)
        assert names == [
            "ttl-check:profiles",
            "ttl-check:recent",
            "ttl-check:{t-alice:c1}:conv",
            "ttl-check:{t-alice:c1}:refs",
            "ttl-check:{t-alice:c1}:turns",
            "ttl-check:{t-alice}:index",
            "ttl-check:{t-alice}:recent",
        ]
        ttls = {name: await raw.pttl(name) for name in names}
        assert ttls.pop("ttl-check:profiles") == -1  # settings, not history
        assert 1_200_000 - 5_000 < ttls.pop("ttl-check:{t-alice:c1}:refs") <= 1_200_000
        assert all(600_000 - 5_000 < ttl <= 600_000 for ttl in ttls.values()), ttls

        # a write refreshes the TTL of what it touches
        await raw.pexpire("ttl-check:{t-alice:c1}:turns", 1_000)
        await store.append(key, turn("2"), TurnRefs())
        assert await raw.pttl("ttl-check:{t-alice:c1}:turns") > 590_000
        assert await raw.lrange("ttl-check:{t-alice:c1}:turns", 0, -1) != []
    finally:
        await store.close()


async def test_an_index_entry_of_an_expired_conversation_never_matches_its_successor(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    store = RedisStore(redis_server.url, prefix="gen:")
    await store.start()
    try:
        key = ConversationKey(ALICE, "c1")
        await store.append(key, turn("old", call="call_old"), TurnRefs(("call_old",)))
        # the conversation expires and so does its record of what it indexed,
        # while the tenant's index lives on (the tenant kept writing elsewhere)
        await raw.delete("gen:{t-alice:c1}:turns", "gen:{t-alice:c1}:conv", "gen:{t-alice:c1}:refs")
        assert await store.append(key, turn("new"), TurnRefs()) == 0
        assert await raw.hget("gen:{t-alice}:index", "t:call_old") is not None
        assert await store.lookup(ALICE, "t:call_old") is None
    finally:
        await store.close()


async def test_a_sweep_clears_what_points_at_expired_conversations(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    clock = FakeClock()
    store = RedisStore(redis_server.url, prefix="sweep:", ttl_seconds=30, clock=clock)
    await store.start()
    try:
        await store.append(
            ConversationKey(ALICE, "gone"), turn("x", call="call_x"), TurnRefs(("call_x",))
        )
        clock.now += 31
        # what Redis would have done by then; the index lives on (Alice kept writing)
        await raw.delete("sweep:{t-alice:gone}:turns", "sweep:{t-alice:gone}:conv")
        await store.append(ConversationKey(ALICE, "live"), turn("y"), TurnRefs())
        assert await raw.hgetall("sweep:{t-alice}:index") == {}
        assert await raw.zrange("sweep:recent", 0, -1) == [b"t-alice\x1flive"]
        assert await raw.zrange("sweep:{t-alice}:recent", 0, -1) == [b"live"]
        assert await raw.exists("sweep:{t-alice:gone}:refs") == 0
    finally:
        await store.close()


async def test_a_dead_server_fails_fast_as_store_failure_and_recovers(tmp_path: Path) -> None:
    server = RedisServer(tmp_path).start()
    store = RedisStore(server.url, prefix="dead:")
    await store.start()
    key = ConversationKey(ALICE, "c1")
    try:
        await store.append(key, turn("before"), TurnRefs())
        server.kill()
        with pytest.raises(StoreFailure):
            await store.append(key, turn("lost"), TurnRefs())
        with pytest.raises(StoreFailure):
            await store.ping()
        with pytest.raises(StoreFailure):
            await store.turns(key)
        server.start()  # same port, empty (no persistence)
        assert await store.ping() is True
        assert await store.append(key, turn("after"), TurnRefs()) == 0
        assert await store.turns(key) == [turn("after")]
    finally:
        await store.close()
        server.stop()


async def test_a_server_that_is_down_at_start_is_reported_and_used_once_up(
    tmp_path: Path,
) -> None:
    server = RedisServer(tmp_path)
    store = RedisStore(server.url, prefix="late:")
    try:
        with pytest.raises(StoreFailure):
            await store.start()
        server.start()
        assert await store.ping() is True
        assert await store.append(ConversationKey(ALICE, "c1"), turn("x"), TurnRefs()) == 0
    finally:
        await store.close()
        server.stop()


async def test_calls_before_start_fail_as_store_failure() -> None:
    store = RedisStore(f"redis://127.0.0.1:{free_port()}/0")
    with pytest.raises(StoreFailure):
        await store.turns(ConversationKey(ALICE, "c1"))


# -- listing past conversations gone from under the recency sets -------------------------
# Regression: the listing read `limit` members of a recency set, then their
# hashes, and dropped the ones gone since (expired, dropped by another
# replica, evicted by maxmemory). It returned fewer than there were, so the
# API's `has_more` (it asks for one more than it shows) said False too soon.


def vanish(backend: Backend, store: ReasoningStore, *conversations: str) -> None:
    """Delete conversations' keys behind the store's back, as Redis expiry
    or eviction does, leaving their recency entries (the sweep's job)."""
    assert isinstance(store, RedisStore)
    assert backend.redis_url is not None
    raw: redis.Redis | RedisCluster
    if store.cluster:
        raw = RedisCluster.from_url(parse_cluster_url(backend.redis_url).first_node_url)
    else:
        raw = redis.Redis.from_url(backend.redis_url)
    with raw:
        for conversation in conversations:
            for name in store.keys.conversation(ALICE, conversation)[:2]:
                assert raw.delete(name) == 1


redis_kinds = pytest.mark.parametrize("backend", ["redis", "redis-cluster"], indirect=True)


@redis_kinds
async def test_the_listing_reads_on_past_conversations_gone_from_under_it(
    backend: Backend,
) -> None:
    store = await backend.open()
    for n in range(7):
        await store.append(ConversationKey(ALICE, f"c{n}"), turn(f"{n}"), TurnRefs())
        backend.tick()
    vanish(backend, store, "c6", "c5", "c4", "c1")  # the newest three, and one between

    async def listed(tenant: str | None, limit: int) -> list[str]:
        return [c.conversation for c in await store.conversations(tenant, limit)]

    assert await listed(ALICE, 3) == ["c3", "c2", "c0"]
    assert await listed(ALICE, 4) == ["c3", "c2", "c0"]
    assert await listed(ALICE, 1) == ["c3"]
    assert await listed(None, 2) == ["c3", "c2"]
    (newest,) = await store.conversations(ALICE, 1)
    assert (newest.turns, newest.updated, newest.model) == (1, START + 3, "m1")


@redis_kinds
async def test_the_listing_reads_on_past_gone_conversations_written_at_one_time(
    backend: Backend,
) -> None:
    """Members of one score come in reverse name order; a page that ends
    among them goes on after the ones read, none twice."""
    store = await backend.open()
    for n in range(6):
        await store.append(ConversationKey(ALICE, f"c{n}"), turn(f"{n}"), TurnRefs())
    vanish(backend, store, "c5", "c4", "c2")
    for limit in (1, 2, 3):
        listed = [c.conversation for c in await store.conversations(ALICE, limit)]
        assert listed == ["c3", "c1", "c0"][:limit]
    assert [c.conversation for c in await store.conversations(ALICE, 10)] == ["c3", "c1", "c0"]


@redis_kinds
async def test_the_listing_reads_on_past_many_gone_conversations(backend: Backend) -> None:
    store = await backend.open()
    names = [f"c{n:02}" for n in range(45)]
    for name in names:
        await store.append(ConversationKey(ALICE, name), turn(name), TurnRefs())
        backend.tick()
    vanish(backend, store, *names[2:])  # all but the two oldest
    assert [c.conversation for c in await store.conversations(ALICE, 1)] == ["c01"]
    assert [c.conversation for c in await store.conversations(ALICE, 3)] == ["c01", "c00"]
