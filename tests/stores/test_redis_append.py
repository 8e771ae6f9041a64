"""An append on one Redis server: one script, one round trip, and the same
data as the three scripts a cluster runs."""

from __future__ import annotations

import asyncio
import hashlib
import re
import uuid
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

import pytest
import redis.asyncio as aioredis

from proxy.history.keys import ConversationKey
from proxy.stores import redis_scripts as scripts
from proxy.stores.base import TurnRefs
from proxy.stores.redis import RedisStore
from tests.stores.conftest import FakeClock
from tests.stores.servers import RedisServer
from tests.stores.test_contract import ALICE, BOB, turn

pytestmark = pytest.mark.anyio

DEADLINE = 10.0  # seconds: correctness deadlines, not speed


class Monitor:
    """A raw MONITOR connection: what clients send the server, one line per
    command (`+<time> [<db> <client address>|lua] "COMMAND" "arg"...`)."""

    def __init__(self, server: RedisServer) -> None:
        self.server = server
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> Monitor:
        self._reader, self._writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        self._writer.write(b"MONITOR\r\n")
        assert await asyncio.wait_for(self._reader.readline(), DEADLINE) == b"+OK\r\n"
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._writer is not None:
            self._writer.close()
            await self._writer.wait_closed()

    async def sent_by_clients(self) -> list[str]:
        """The commands clients sent (not those scripts ran) since the last
        call: a marker is sent after them, and everything up to it is read."""
        assert self._reader is not None
        marker = f"rp-marker-{uuid.uuid4().hex}"
        # a bare connection: a client library would say HELLO first
        reader, writer = await asyncio.open_connection("127.0.0.1", self.server.port)
        writer.write(f"ECHO {marker}\r\n".encode())
        reply = await asyncio.wait_for(reader.readuntil(marker.encode() + b"\r\n"), DEADLINE)
        assert reply.startswith(b"$")
        writer.close()
        await writer.wait_closed()
        sent: list[str] = []
        while True:
            line = (await asyncio.wait_for(self._reader.readline(), DEADLINE)).decode()
            if marker in line:
                return sent
            source, _, command = line.partition("] ")
            if not source.endswith(" lua"):
                sent.append(command.strip())


def names(sent: list[str]) -> list[str]:
    """`EVALSHA` of `"EVALSHA" "<sha>" "6" ...`."""
    return [command.split(" ", 1)[0].strip('"') for command in sent]


def sha(script: str) -> str:
    return hashlib.sha1(script.encode()).hexdigest()


@pytest.fixture
async def raw(redis_server: RedisServer) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(redis_server.url)
    yield client
    await client.aclose()


async def test_an_append_on_one_server_is_one_round_trip(redis_server: RedisServer) -> None:
    store = RedisStore(redis_server.url, prefix=f"trip-{uuid.uuid4().hex[:6]}:")
    await store.start()
    try:
        # the first append loads the script and runs the periodic sweep
        await store.append(ConversationKey(ALICE, "warm"), turn("w"), TurnRefs(("call_w",)))
        async with Monitor(redis_server) as monitor:
            await monitor.sent_by_clients()
            call_refs = TurnRefs(("call_1", "call_2"), "fp-1")
            await store.append(ConversationKey(ALICE, "c1"), turn("1", call="call_1"), call_refs)
            assert names(await monitor.sent_by_clients()) == ["EVALSHA"]
            # another turn of the same conversation, and one of another tenant
            assert await store.append(ConversationKey(ALICE, "c1"), turn("2"), TurnRefs()) == 1
            assert await store.append(ConversationKey(BOB, "c1"), turn("3"), TurnRefs()) == 0
            assert names(await monitor.sent_by_clients()) == ["EVALSHA", "EVALSHA"]
    finally:
        await store.close()


async def test_the_one_script_is_the_combined_one_and_a_cluster_path_takes_three(
    redis_server: RedisServer,
) -> None:
    store = RedisStore(redis_server.url, prefix=f"trip3-{uuid.uuid4().hex[:6]}:")
    await store.start()
    try:
        await store.append(ConversationKey(ALICE, "warm"), turn("w"), TurnRefs())
        store.one_script = False  # the path a cluster takes, one slot per script
        await store.append(ConversationKey(ALICE, "warm"), turn("w"), TurnRefs())
        async with Monitor(redis_server) as monitor:
            await monitor.sent_by_clients()
            await store.append(ConversationKey(ALICE, "c1"), turn("1"), TurnRefs(("call_1",)))
            assert names(await monitor.sent_by_clients()) == ["EVALSHA"] * 3
            store.one_script = True
            await store.append(ConversationKey(ALICE, "c2"), turn("2"), TurnRefs(("call_2",)))
            (sent,) = await monitor.sent_by_clients()
            assert sent.startswith(f'"EVALSHA" "{sha(scripts.APPEND_ALL)}" "6" ')
    finally:
        await store.close()


async def _dump(raw: aioredis.Redis, prefix: str, gens: dict[str, str]) -> dict[str, Any]:
    """Every key under `prefix`: its value and its TTL (in minutes), with the
    prefix and each conversation's random `gen` replaced by stable names."""

    def clean(value: bytes | str) -> str:
        text = value.decode() if isinstance(value, bytes) else value
        for gen, name in gens.items():
            text = text.replace(gen, name)
        return text

    out: dict[str, Any] = {}
    async for key in raw.scan_iter(match=f"{prefix}*"):
        name = clean(key).removeprefix(prefix)
        kind = (await raw.type(key)).decode()
        value: Any
        if kind == "list":
            value = [clean(v) for v in await raw.lrange(key, 0, -1)]
        elif kind == "hash":
            value = {clean(k): clean(v) for k, v in (await raw.hgetall(key)).items()}
            if "appends" in value:  # `<random token>=<turn> ...`: the turns
                value["appends"] = re.sub(r"\S+=", "=", value["appends"])
        elif kind == "zset":
            value = [(clean(m), s) for m, s in await raw.zrange(key, 0, -1, withscores=True)]
        else:
            value = clean(await raw.get(key))
        out[name] = (kind, value, round(await raw.pttl(key) / 60_000))
    return out


async def _both_paths(
    redis_server: RedisServer, name: str, clock: FakeClock, **bounds: int
) -> dict[str, RedisStore]:
    """Two started stores on one server, by key prefix: the one-script path
    and the cluster's path (`one_script` off)."""
    run = uuid.uuid4().hex[:6]
    stores: dict[str, RedisStore] = {}
    for one_script in (True, False):
        prefix = f"{name}-{run}-{int(one_script)}:"
        store = RedisStore(redis_server.url, prefix=prefix, clock=clock, ttl_seconds=600, **bounds)
        store.one_script = one_script
        await store.start()
        stores[prefix] = store
    return stores


class _Appends:
    """Appends through both stores of `_both_paths`: the same results, and
    each store's conversation generations named by first appearance (they
    are random), so the two dumps compare."""

    def __init__(self, stores: dict[str, RedisStore], raw: aioredis.Redis, clock: FakeClock):
        self.stores = stores
        self.raw = raw
        self.clock = clock
        self.gens: dict[str, dict[str, str]] = {prefix: {} for prefix in stores}

    async def __call__(self, tenant: str, conversation: str, text: str, refs: TurnRefs) -> None:
        results = []
        for prefix, store in self.stores.items():
            key = ConversationKey(tenant, conversation)
            results.append(await store.append(key, turn(text, call=text), refs))
            gen = await self.raw.hget(store.keys.conversation(tenant, conversation)[1], "gen")
            assert isinstance(gen, bytes)
            gens = self.gens[prefix]
            gens.setdefault(gen.decode(), f"<gen {len(gens)}>")
        assert results[0] == results[1]
        self.clock.now += 1.5

    async def dumps(self) -> list[dict[str, Any]]:
        return [await _dump(self.raw, prefix, self.gens[prefix]) for prefix in self.stores]


async def test_one_script_and_three_scripts_leave_the_same_data(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    clock = FakeClock()
    stores = await _both_paths(redis_server, "same", clock, max_turns=3)
    both = _Appends(stores, raw, clock)

    try:
        for i in range(5):  # past max_turns: the oldest turns and their index entries go
            await both(ALICE, "c1", f"a{i}", TurnRefs((f"call_a{i}", "call_shared"), f"fp-{i}"))
        await both(BOB, "c1", "b0", TurnRefs(("call_shared",), "fp-0"))
        await both(ALICE, "c2", "c0", TurnRefs(("call_shared",)))  # takes the entry over
        # c1 expires (its refs live on): a new c1 unindexes what the old one wrote
        for store in stores.values():
            await raw.delete(*store.keys.conversation(ALICE, "c1")[:2])
        await both(ALICE, "c1", "new", TurnRefs(("call_new",)))
        await both(ALICE, "c1", "new2", TurnRefs(("call_new", "call_a4")))

        one, three = await both.dumps()
        assert one == three
        # the dump sees the data: both tenants' index and recency, every conversation
        assert sorted(one) == sorted(
            [f"{{{t}}}:{name}" for t in (ALICE, BOB) for name in ("index", "recent")]
            + [
                f"{{{t}:{c}}}:{name}"
                for t, c in [(ALICE, "c1"), (ALICE, "c2"), (BOB, "c1")]
                for name in ("turns", "conv", "refs")
            ]
            + ["recent"]
        )
        for store in stores.values():
            assert await store.lookup(ALICE, "t:call_new") == turn("new2", call="new2")
            assert await store.lookup(ALICE, "t:call_shared") == turn("c0", call="c0")
            assert await store.lookup(ALICE, "t:call_a0") is None
    finally:
        for store in stores.values():
            await store.close()


async def test_a_delete_and_a_stored_response_on_one_server_are_one_round_trip(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    store = RedisStore(
        redis_server.url, prefix=f"trip-d-{uuid.uuid4().hex[:6]}:", max_conversations=2
    )
    await store.start()
    try:
        # load every script first (redis-py sends SCRIPT LOAD on a miss)
        await store.append(ConversationKey(ALICE, "c1"), turn("1"), TurnRefs(("call_1",)))
        await store.append(ConversationKey(ALICE, "c2"), turn("2"), TurnRefs())
        await store.delete(ConversationKey(ALICE, "c2"))
        await store.put_response(ALICE, "resp_0", b'{"id": "resp_0"}')
        await store.put_response(ALICE, "resp_1", b'{"id": "resp_1"}')
        async with Monitor(redis_server) as monitor:
            await monitor.sent_by_clients()
            await store.put_response(BOB, "resp_2", b'{"id": "resp_2"}')  # evicts resp_0
            (sent,) = await monitor.sent_by_clients()
            assert sent.startswith(f'"EVALSHA" "{sha(scripts.PUT_RESPONSE_ALL)}" "2" ')
            assert store.evictions == 1
            assert await raw.exists(store.keys.response(ALICE, "resp_0")) == 0
            assert await raw.get(store.keys.response(BOB, "resp_2")) == b'{"id": "resp_2"}'
            await monitor.sent_by_clients()

            assert await store.delete(ConversationKey(ALICE, "c1")) is True
            (sent,) = await monitor.sent_by_clients()
            assert sent.startswith(f'"EVALSHA" "{sha(scripts.DROP_ALL)}" "6" ')
            assert await store.delete(ConversationKey(ALICE, "c1")) is False
            assert names(await monitor.sent_by_clients()) == ["EVALSHA"]
            assert await store.lookup(ALICE, "t:call_1") is None
            assert await store.conversations(ALICE) == []
            await monitor.sent_by_clients()

            # the path a cluster takes: the record, its listing, the evicted record
            store.one_script = False
            await store.put_response(BOB, "resp_3", b'{"id": "resp_3"}')  # loads its scripts
            await store.append(ConversationKey(ALICE, "c3"), turn("3"), TurnRefs())
            await store.delete(ConversationKey(ALICE, "c3"))
            await store.append(ConversationKey(ALICE, "c4"), turn("4"), TurnRefs())
            await monitor.sent_by_clients()
            await store.put_response(BOB, "resp_4", b'{"id": "resp_4"}')  # evicts resp_2
            assert names(await monitor.sent_by_clients()) == ["SET", "EVALSHA", "DEL"]
            assert await raw.exists(store.keys.response(BOB, "resp_2")) == 0
            await monitor.sent_by_clients()
            assert await store.delete(ConversationKey(ALICE, "c4")) is True
            assert names(await monitor.sent_by_clients()) == ["EVALSHA"] * 3
    finally:
        await store.close()


async def test_one_script_and_the_cluster_path_leave_the_same_data_for_responses_and_deletes(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    clock = FakeClock()
    stores = await _both_paths(redis_server, "same-d", clock, max_conversations=3)
    append = _Appends(stores, raw, clock)

    async def put(tenant: str, response_id: str) -> None:
        body = f'{{"id": "{response_id}", "tenant": "{tenant}"}}'.encode()
        for store in stores.values():
            await store.put_response(tenant, response_id, body)
        assert len({store.evictions for store in stores.values()}) == 1
        clock.now += 1.5

    async def delete(tenant: str, conversation: str) -> bool:
        results = [await s.delete(ConversationKey(tenant, conversation)) for s in stores.values()]
        assert results[0] == results[1]
        clock.now += 1.5
        return results[0]

    try:
        await append(ALICE, "c1", "a0", TurnRefs(("call_a0", "call_shared"), "fp-0"))
        await append(ALICE, "c1", "a1", TurnRefs(("call_a1",)))
        await append(ALICE, "c2", "c0", TurnRefs(("call_shared",)))  # takes the entry over
        await append(BOB, "c1", "b0", TurnRefs(("call_b0",), "fp-0"))
        for i in range(6):  # past max_conversations: the oldest responses go, keys and all
            await put(ALICE if i % 2 else BOB, f"resp_{i}")
        await put(ALICE, "resp_1")  # written again: newest now
        await put(BOB, "resp_6")
        assert await delete(ALICE, "c1") is True  # its entries, but not c2's
        assert await delete(ALICE, "c1") is False
        assert await delete(ALICE, "missing") is False
        await append(ALICE, "c1", "new", TurnRefs(("call_new",)))  # a new c1
        assert await delete(BOB, "c1") is True  # the tenant's last conversation
        clock.now += 700  # past the TTL: listed responses expire from the set
        await put(BOB, "resp_7")

        one, cluster = await append.dumps()
        assert one == cluster
        # the dump sees the data: what is left, and what is not
        assert {store.evictions for store in stores.values()} == {5}
        # resp_0, 2, 3 and 4 evicted, keys and all; resp_1, 5 and 6 expired
        # from the set (their keys expire on their own TTL)
        assert sorted(name for name in one if name.endswith(":response")) == [
            f"{{{t}:{i}}}:response"
            for t, i in [(ALICE, "resp_1"), (ALICE, "resp_5"), (BOB, "resp_6"), (BOB, "resp_7")]
        ]
        assert one[f"{{{ALICE}:resp_5}}:response"] == (
            "string",
            f'{{"id": "resp_5", "tenant": "{ALICE}"}}',
            10,
        )
        assert one["responses"][1] == [(f"{BOB}\x1fresp_7", clock.now - 1.5)]
        assert one[f"{{{ALICE}}}:index"][1] == {
            "t:call_shared": "c2\x1f<gen 1>\x1f0",
            "t:call_new": "c1\x1f<gen 3>\x1f0",
        }
        assert [m for m, _ in one["recent"][1]] == [f"{ALICE}\x1fc2", f"{ALICE}\x1fc1"]
        assert f"{{{BOB}:c1}}:conv" not in one
    finally:
        for store in stores.values():
            await store.close()


async def test_an_append_sent_again_after_it_ran_is_stored_once(
    redis_server: RedisServer, raw: aioredis.Redis
) -> None:
    """A client that sends a script again after a timeout, when the first
    send had run (a stalled server runs both when it wakes), appends once:
    on one server and on the cluster's path, also past the appends the
    conversation remembers."""
    clock = FakeClock()
    stores = await _both_paths(redis_server, "again", clock, max_turns=20)
    sent_twice: list[str] = []

    def twice(store: RedisStore) -> None:
        run = store._run

        async def run_twice(script: str, keys: list[str], args: Any) -> Any:
            first = await run(script, keys, args)
            again = await run(script, keys, args)
            if script in ("APPEND", "APPEND_ALL"):
                sent_twice.append(script)
                assert again[0] == first[0]  # the same turn index
            return first

        store._run = run_twice  # type: ignore[method-assign]

    try:
        for store in stores.values():
            twice(store)
            key = ConversationKey(ALICE, "c1")
            indexes = [
                await store.append(key, turn(f"t{i}", call=f"t{i}"), TurnRefs((f"call_t{i}",)))
                for i in range(12)  # more appends than the conversation remembers
            ]
            assert indexes == list(range(12))
            turns_key, conv_key = store.keys.conversation(ALICE, "c1")[:2]
            assert await raw.llen(turns_key) == 12
            assert int(await raw.hget(conv_key, "n")) == 12
            appends = (await raw.hget(conv_key, "appends")).decode().split(" ")
            assert [a.split("=")[1] for a in appends] == [str(i) for i in range(4, 12)]
            for i in (0, 11):
                assert await store.lookup(ALICE, f"t:call_t{i}") == turn(f"t{i}", call=f"t{i}")
        assert sorted(set(sent_twice)) == ["APPEND", "APPEND_ALL"]
    finally:
        for store in stores.values():
            await store.close()
