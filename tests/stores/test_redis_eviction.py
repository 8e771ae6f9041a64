"""`max_conversations` on Redis, on one server and on a cluster: the count
runs at most `slack` over the limit, then one sweep takes it back down to
the limit; the least recently written go first, and nothing of them is left
(keys, index entries, places in the recency sets)."""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
import redis
from redis.cluster import RedisCluster

from proxy.history.keys import ConversationKey
from proxy.stores.base import TurnRefs
from proxy.stores.redis import SEP, SWEEP_BATCH, RedisStore, eviction_slack
from tests.stores.conftest import FakeClock
from tests.stores.test_contract import ALICE, BOB, turn

pytestmark = pytest.mark.anyio

Raw = redis.Redis | RedisCluster


@pytest.fixture(params=["redis", "redis-cluster"])
def url(request: pytest.FixtureRequest) -> str:
    if request.param == "redis":
        return str(request.getfixturevalue("redis_server").url)
    return str(request.getfixturevalue("redis_cluster").url)


@pytest.fixture
def raw(url: str) -> Iterator[Raw]:
    """A plain client to look at what the store left (every master of a cluster)."""
    parts = urlsplit(url.split(",")[0].replace("+cluster", ""))
    host, port = parts.hostname or "127.0.0.1", parts.port or 6379
    client: Raw
    if "+cluster" in url:
        client = RedisCluster(host=host, port=port)
    else:
        client = redis.Redis(host=host, port=port)
    yield client
    client.close()


def test_the_slack_is_one_percent_at_least_one_at_most_a_batch() -> None:
    assert [eviction_slack(n) for n in (1, 2, 199, 200, 10_000)] == [1, 1, 1, 2, 100]
    assert eviction_slack(10**9) == SWEEP_BATCH


async def test_the_count_runs_at_most_slack_over_and_each_sweep_takes_it_back_to_the_limit(
    url: str, raw: Raw
) -> None:
    limit = 200
    clock = FakeClock()
    prefix = f"evict-{uuid.uuid4().hex[:6]}:"
    store = RedisStore(url, prefix=prefix, max_conversations=limit, clock=clock)
    slack = store.slack
    assert slack == 2
    await store.start()
    # what the store must hold: conversation -> last write, in write order
    model: dict[tuple[str, str], float] = {}
    evicted: set[tuple[str, str]] = set()
    counts: list[int] = []
    try:
        for i in range(320):
            # every seventh write goes back to the first conversation, which
            # so stays among the most recently written and is never evicted
            tenant, conversation = (ALICE, "c0") if i % 7 == 6 else ((ALICE, BOB)[i % 2], f"c{i}")
            call = f"call_{conversation}_{i}"
            key = ConversationKey(tenant, conversation)
            await store.append(key, turn(call, call=call), TurnRefs((call,), f"fp-{i}"))
            model.pop((tenant, conversation), None)
            model[(tenant, conversation)] = clock.now
            if len(model) > limit + slack:
                for gone in list(model)[: len(model) - limit]:
                    del model[gone]
                    evicted.add(gone)
            counts.append(int(raw.zcard(f"{prefix}recent")))
            assert counts[-1] == len(model), i
            clock.now += 0.01  # well within the sweep interval: only the count sweeps

        assert max(counts) == limit + slack
        sweeps = [now for before, now in itertools.pairwise(counts) if now < before]
        assert sweeps == [limit] * len(sweeps)
        assert len(sweeps) > 10
        assert store.evictions == len(evicted) > limit // 4
        assert (ALICE, "c0") not in evicted

        listed = [(c.tenant, c.conversation) for c in await store.conversations(None, 1000)]
        assert listed == list(reversed(model))
        for tenant, conversation in model:
            assert await store.turns(ConversationKey(tenant, conversation)) != []

        # nothing of an evicted conversation is left
        keys = {k.decode() for k in raw.scan_iter(match=f"{prefix}*")}
        for tenant, conversation in evicted:
            assert not keys & set(store.keys.conversation(tenant, conversation))
        for tenant in (ALICE, BOB):
            index, recent = store.keys.tenant(tenant)
            pointed_at = {v.decode().split(SEP)[0] for v in raw.hvals(index)}
            listed_here = {m.decode() for m in raw.zrange(recent, 0, -1)}
            survivors = {c for t, c in model if t == tenant}
            assert pointed_at == survivors
            assert listed_here == survivors
        everyone = {m.decode() for m in raw.zrange(f"{prefix}recent", 0, -1)}
        assert everyone == {f"{t}{SEP}{c}" for t, c in model}
        for i in range(320):
            if i % 7 != 6 and ((ALICE, BOB)[i % 2], f"c{i}") in evicted:
                tenant = (ALICE, BOB)[i % 2]
                assert await store.lookup(tenant, f"t:call_c{i}_{i}") is None
                assert await store.lookup(tenant, f"f:fp-{i}") is None
    finally:
        await store.close()


async def test_concurrent_appends_overshoot_by_at_most_those_in_flight_and_leave_no_orphans(
    url: str, raw: Raw
) -> None:
    limit, burst = 20, 16
    prefix = f"burst-{uuid.uuid4().hex[:6]}:"
    store = RedisStore(url, prefix=prefix, max_conversations=limit)
    await store.start()
    try:
        written = 0
        for _ in range(8):
            names = [f"c{written + i}" for i in range(burst)]
            written += burst
            await asyncio.gather(
                *(
                    store.append(ConversationKey(ALICE, n), turn(n, call=n), TurnRefs((n,)))
                    for n in names
                )
            )
            assert int(raw.zcard(f"{prefix}recent")) <= limit + store.slack + burst
        await store.append(ConversationKey(ALICE, "last"), turn("last"), TurnRefs(("last",)))
        members = {m.decode() for m in raw.zrange(f"{prefix}recent", 0, -1)}
        assert len(members) <= limit + store.slack
        # what is listed is what is stored, and the index names nothing else
        stored = {
            k.decode().removeprefix(f"{prefix}{{{ALICE}:").removesuffix("}:conv")
            for k in raw.scan_iter(match=f"{prefix}{{{ALICE}:*}}:conv")
        }
        assert stored == {m.split(SEP, 1)[1] for m in members}
        index, recent = store.keys.tenant(ALICE)
        assert {m.decode() for m in raw.zrange(recent, 0, -1)} == stored
        assert {v.decode().split(SEP)[0] for v in raw.hvals(index)} == stored
        assert store.evictions == written + 1 - len(members)
    finally:
        await store.close()
