"""Stored response objects in the backends, beyond the shared contract
(tests/stores/test_contract.py): a SQLite file of the first schema gains the
table, and the memory store counts their bytes."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from proxy.history.keys import ConversationKey
from proxy.reasoning.blocks import TextPart, Turn
from proxy.stores.base import TurnRefs
from proxy.stores.memory import MemoryStore
from proxy.stores.sqlite import SCHEMA_VERSION, SQLiteStore

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_a_schema_1_file_gains_the_responses_table(tmp_path: Path) -> None:
    path = str(tmp_path / "old.db")
    store = SQLiteStore(path)
    await store.start()
    key = ConversationKey("t-alice", "c1")
    await store.append(key, Turn(parts=(TextPart("kept"),)), TurnRefs())
    await store.close()
    with closing(sqlite3.connect(path)) as db:  # as the first schema left it
        db.execute("DROP TABLE responses")
        db.execute("PRAGMA user_version = 1")
        db.commit()
    again = SQLiteStore(path)
    await again.start()
    try:
        await again.put_response("t-alice", "resp_1", b"{}")
        assert await again.get_response("t-alice", "resp_1") == b"{}"
        assert await again.turns(key) == [Turn(parts=(TextPart("kept"),))]
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
    finally:
        await again.close()


async def test_the_memory_store_counts_stored_responses_in_its_bytes() -> None:
    store = MemoryStore(max_bytes=64 * 1024)
    empty = (await store.stats()).bytes
    await store.put_response("t-alice", "resp_1", b"x" * 10_000)
    grown = (await store.stats()).bytes
    assert grown - empty >= 10_000
    await store.put_response("t-alice", "resp_1", b"x" * 10)  # replaced, not added
    assert (await store.stats()).bytes < grown
    # over max_bytes, the oldest responses go first
    for n in range(10):
        await store.put_response("t-alice", f"resp_{n}", b"y" * 10_000)
    assert (await store.stats()).bytes <= 64 * 1024
    assert await store.get_response("t-alice", "resp_0") is None
    assert await store.get_response("t-alice", "resp_9") == b"y" * 10_000
    assert await store.delete_response("t-alice", "resp_9") is True
    assert (await store.stats()).extra["responses"] >= 1
