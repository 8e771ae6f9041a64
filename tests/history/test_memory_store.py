"""The bounded in-memory store: LRU eviction, byte cap (measured), TTL."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc

from proxy.history.keys import ConversationKey
from proxy.reasoning.blocks import TextPart, ThinkingBlock, Turn
from proxy.stores.base import TurnRefs
from proxy.stores.memory import MemoryStore


def turn(n: int) -> Turn:
    return Turn(
        parts=(
            ThinkingBlock(f"reasoning of conversation {n} " * 4, "reasoning_content"),
            TextPart(f"answer {n}"),
        ),
        finish_reason="stop",
        model="m",
    )


def test_many_conversations_stay_under_the_byte_cap_oldest_evicted_first() -> None:
    cap = 8 * 1024 * 1024
    total = 100_000

    async def fill() -> MemoryStore:
        store = MemoryStore(max_conversations=1_000_000, max_bytes=cap)
        for n in range(total):
            await store.append(
                ConversationKey("t", f"c{n}"), turn(n), TurnRefs((f"call_{n}",), f"fp{n}")
            )
        return store

    gc.collect()
    tracemalloc.start()
    try:
        store = asyncio.run(fill())
        gc.collect()
        measured, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stats = asyncio.run(store.stats())
    assert stats.bytes <= cap
    assert measured <= cap, f"measured {measured} bytes for a cap of {cap}"
    assert 1000 < stats.conversations < total
    assert store.evictions == total - stats.conversations
    kept = asyncio.run(store.conversations(None, limit=total))
    numbers = sorted(int(c.conversation[1:]) for c in kept)
    # exactly the most recent conversations are left
    assert numbers == list(range(total - len(numbers), total))
    assert asyncio.run(store.lookup("t", "t:call_0")) is None
    assert asyncio.run(store.lookup("t", f"t:call_{total - 1}")) is not None


def test_reading_refreshes_the_lru_order() -> None:
    async def run() -> list[str]:
        store = MemoryStore(max_conversations=3)
        for n in range(3):
            await store.append(ConversationKey("t", f"c{n}"), turn(n), TurnRefs())
        await store.turns(ConversationKey("t", "c0"))  # c0 is now the most recent
        await store.append(ConversationKey("t", "c3"), turn(3), TurnRefs())
        return sorted(c.conversation for c in await store.conversations(None))

    assert asyncio.run(run()) == ["c0", "c2", "c3"]


def test_ttl_expires_conversations_and_their_index() -> None:
    now = [1000.0]

    async def run() -> tuple[int, int, bool]:
        store = MemoryStore(ttl_seconds=60, clock=lambda: now[0])
        key = ConversationKey("t", "c")
        await store.append(key, turn(1), TurnRefs(("call_1",), "fp"))
        now[0] += 30
        alive = len(await store.turns(key))
        now[0] += 61
        expired = len(await store.turns(key))
        return alive, expired, await store.lookup("t", "t:call_1") is None

    assert asyncio.run(run()) == (1, 0, True)


def test_max_turns_drops_the_oldest_turns_of_a_conversation() -> None:
    async def run() -> tuple[list[str], int, bool]:
        store = MemoryStore(max_turns=2)
        key = ConversationKey("t", "c")
        last = 0
        for n in range(4):
            last = await store.append(key, turn(n), TurnRefs((f"call_{n}",)))
        turns = await store.turns(key)
        return [t.content for t in turns], last, await store.lookup("t", "t:call_0") is None

    assert asyncio.run(run()) == (["answer 2", "answer 3"], 3, True)


def test_one_huge_conversation_keeps_only_what_fits() -> None:
    async def run() -> tuple[int, int]:
        store = MemoryStore(max_bytes=20_000)
        key = ConversationKey("t", "big")
        for n in range(200):
            await store.append(key, turn(n), TurnRefs())
        stats = await store.stats()
        return stats.bytes, len(await store.turns(key))

    size, kept = asyncio.run(run())
    assert size <= 20_000
    assert 1 <= kept < 200


def test_profiles_and_delete() -> None:
    async def run() -> tuple[object, ...]:
        store = MemoryStore()
        await store.put_profile("p", {"effort": "low"})
        got = await store.get_profile("p")
        listed = await store.list_profiles()
        deleted = await store.delete_profile("p")
        again = await store.delete_profile("p")
        key = ConversationKey("t", "c")
        await store.append(key, turn(1), TurnRefs(("x",)))
        removed = await store.delete(key)
        missing = await store.delete(key)
        return got, listed, deleted, again, removed, missing, await store.lookup("t", "t:x")

    assert asyncio.run(run()) == (
        {"effort": "low"},
        {"p": {"effort": "low"}},
        True,
        False,
        True,
        False,
        None,
    )


def test_dropped_turns_take_their_index_entries_and_bytes_with_them() -> None:
    async def run() -> tuple[int, int, int, int]:
        store = MemoryStore(max_turns=10)
        key = ConversationKey("t", "c")
        for n in range(500):
            await store.append(key, turn(n), TurnRefs((f"call_{n}",), f"fp{n}"))
        one = MemoryStore(max_turns=10)
        for n in range(490, 500):
            await one.append(key, turn(n), TurnRefs((f"call_{n}",), f"fp{n}"))
        stats, fresh = await store.stats(), await one.stats()
        return len(store._index["t"]), stats.bytes, fresh.bytes, stats.turns

    entries, size, fresh_size, turns = asyncio.run(run())
    assert turns == 10
    assert entries == 20  # a tool-call id and a fingerprint per kept turn
    assert size == fresh_size  # the same as a store that only ever held those ten


def test_stored_conversations_cost_the_cyclic_collector_nothing() -> None:
    """A full pass of the collector visits every reference of every tracked
    object: what the store holds adds none, so a pass does not grow with the
    store. With turns kept as tuples in tuple-keyed dicts, the turn dict
    stayed tracked under load and 10,000 conversations made every full pass
    take about 4 ms. The store is frozen with start-up, as `serve` does."""

    async def visited(store: MemoryStore) -> int:
        """What the next full pass visits, after a pass and one more write
        (under load, a write always falls between two passes)."""
        gc.collect()
        await store.append(ConversationKey("t", "other"), turn(0), TurnRefs(("call",), "fp"))
        return sum(len(gc.get_referents(o)) for o in gc.get_objects())

    async def fill(store: MemoryStore, start: int, count: int) -> None:
        for n in range(start, start + count):
            for _ in range(2):  # two turns each, both indexed
                refs = TurnRefs((f"call_{n}_{_}",), f"fp{n}_{_}")
                await store.append(ConversationKey("t", f"c{n}"), turn(n), refs)

    async def main(store: MemoryStore) -> tuple[int, int]:
        await fill(store, 0, 10)
        before = await visited(store)
        await fill(store, 10, 2_000)
        await store.lookup("t", "call_5_1")  # reads do not track anything either
        await store.turns(ConversationKey("t", "c7"))
        after = await visited(store)
        stats = await store.stats()
        assert stats.conversations == 2_011
        assert stats.turns == 4_022
        return before, after

    store = MemoryStore(max_conversations=100_000)
    gc.collect()
    gc.freeze()
    try:
        before, after = asyncio.run(main(store))
    finally:
        gc.unfreeze()
    assert after - before < 500  # was more than 16,000 (4 per turn, 2 per conversation)
