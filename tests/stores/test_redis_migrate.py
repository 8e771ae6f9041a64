"""`reasoning-proxy store migrate`: a Redis store written by the version
before the hash-tagged key scheme (with that version's scripts, on a real
redis-server) is moved to the current names, and the current store reads
it all: turns, index lookups, listings, stored responses, TTLs, and what
a later append or delete does with it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from proxy.history.keys import ConversationKey
from proxy.stores.base import TurnRefs
from proxy.stores.redis import RedisStore
from tests.stores.conftest import START
from tests.stores.legacy_redis import append_old, put_response_old
from tests.stores.servers import RedisServer
from tests.stores.test_contract import ALICE, BOB, turn

pytestmark = pytest.mark.anyio


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


def _migrate(url: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "proxy", "store", "migrate", "--store", url]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def _names(r: redis.Redis, pattern: str) -> list[str]:
    return sorted(k.decode() for k in r.keys(pattern))


async def test_an_old_store_is_migrated_and_read_by_the_current_one(server: RedisServer) -> None:
    raw = redis.Redis.from_url(server.url)
    turns = [turn(f"t{i}", call=f"call_{i}") for i in range(3)]
    for i, t in enumerate(turns):  # the oldest turn is trimmed (max 2), with its index entry
        refs = TurnRefs((f"call_{i}",), "fp-1" if i == 1 else None)
        append_old(raw, ALICE, "c1", t, refs, now=START + i, max_turns=2)
    append_old(raw, BOB, "b1", turn("bob's"), TurnRefs((), "fp-b"), now=START + 5, gen="b0b")
    # a conversation that expired, leaving its refs (they live twice as long)
    append_old(raw, ALICE, "gone", turn("x"), TurnRefs(("call_x",)), now=START - 700, gen="dead")
    raw.delete("rp:turns:t-alice:gone", "rp:conv:t-alice:gone")
    put_response_old(raw, ALICE, "resp_1", b'{"id": "resp_1"}', now=START + 6)
    raw.pexpire("rp:turns:t-alice:c1", 300_000)

    done = _migrate(server.url)
    assert done.returncode == 0, done.stderr
    assert "moved 2 conversation(s), 2 tenant index(es), 2 tenant recency set(s)" in done.stdout
    assert "1 stored response(s)" in done.stdout
    assert "1 stale refs list(s) dropped" in done.stdout
    for old in ("turns", "conv", "refs", "index", "recent", "resp"):
        assert _names(raw, f"rp:{old}:*") == []
    assert 290_000 < raw.pttl("rp:{t-alice:c1}:turns") <= 300_000  # TTLs move with the keys
    assert raw.lrange("rp:{t-alice:c1}:refs", 0, -1) == [
        b"1\x1f0123456789abcdef\x1ft:call_1",
        b"1\x1f0123456789abcdef\x1ff:fp-1",
        b"2\x1f0123456789abcdef\x1ft:call_2",
    ]

    store = RedisStore(server.url, ttl_seconds=600, max_turns=2, clock=lambda: START + 10)
    await store.start()
    try:
        c1 = ConversationKey(ALICE, "c1")
        assert await store.turns(c1) == turns[1:]
        assert await store.lookup(ALICE, "t:call_0") is None
        assert await store.lookup(ALICE, "t:call_1") == turns[1]
        assert await store.lookup(ALICE, "f:fp-1") == turns[1]
        assert await store.lookup(ALICE, "t:call_2") == turns[2]
        assert await store.lookup(BOB, "f:fp-b") == turn("bob's")
        assert await store.lookup(ALICE, "t:call_x") is None
        listed = [(c.tenant, c.conversation, c.turns) for c in await store.conversations(None)]
        assert listed == [(BOB, "b1", 1), (ALICE, "c1", 2)]  # the turns kept
        assert await store.get_response(ALICE, "resp_1") == b'{"id": "resp_1"}'
        assert (await store.stats()).conversations == 2

        # the conversation goes on where it was, and trims through the rewritten refs
        assert await store.append(c1, turn("t3"), TurnRefs(("call_3",))) == 3
        assert await store.lookup(ALICE, "t:call_1") is None
        assert await store.lookup(ALICE, "t:call_3") == turn("t3")
        # a delete unindexes what the old version indexed
        assert await store.delete(c1) is True
        assert await store.lookup(ALICE, "t:call_2") is None
        assert raw.hkeys("rp:{t-alice}:index") == []
    finally:
        await store.close()

    again = _migrate(server.url)
    assert again.returncode == 0, again.stderr
    assert "moved 0 conversation(s)" in again.stdout
    raw.close()


def test_migrate_refuses_urls_it_cannot_work_on() -> None:
    cluster = _migrate("redis+cluster://127.0.0.1:7000")
    assert cluster.returncode == 2
    assert "nothing to migrate on a cluster" in cluster.stderr
    sqlite = _migrate("sqlite:///x.db")
    assert sqlite.returncode == 2
    assert "needs --store redis://" in sqlite.stderr
