"""What only the SQLite store has: URLs, the file surviving a restart, WAL,
several processes on one file, and sqlite errors turned into StoreFailure."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import pytest

from proxy.errors import ConfigError
from proxy.history.keys import ConversationKey
from proxy.stores.base import StoreFailure, TurnRefs
from proxy.stores.sqlite import SCHEMA_VERSION, SQLiteStore, sqlite_path
from tests.stores.conftest import FakeClock
from tests.stores.test_contract import ALICE, turn

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("url", "path"),
    [
        ("sqlite:///history.db", "history.db"),
        ("sqlite:///data/history.db", "data/history.db"),
        ("sqlite:////var/lib/proxy/history.db", "/var/lib/proxy/history.db"),
        ("SQLITE:///history.db", "history.db"),
        ("sqlite:///:memory:", ":memory:"),
    ],
)
def test_sqlite_urls_follow_the_database_url_convention(url: str, path: str) -> None:
    assert sqlite_path(url) == path


@pytest.mark.parametrize(
    "url", ["sqlite://host/history.db", "sqlite:///", "sqlite:///data/", "sqlite:///x.db?mode=ro"]
)
def test_malformed_sqlite_urls_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        sqlite_path(url)


async def test_history_and_profiles_survive_a_restart(tmp_path: Path) -> None:
    path = str(tmp_path / "history.db")
    key = ConversationKey(ALICE, "c1")
    first = SQLiteStore(path)
    await first.start()
    await first.append(key, turn("one", call="call_1"), TurnRefs(("call_1",), "fp-1"))
    await first.put_profile("deep", {"effort": "high"})
    await first.close()

    again = SQLiteStore(path)
    await again.start()
    try:
        assert await again.turns(key) == [turn("one", call="call_1")]
        assert await again.lookup(ALICE, "t:call_1") == turn("one", call="call_1")
        assert await again.get_profile("deep") == {"effort": "high"}
        assert await again.append(key, turn("two"), TurnRefs()) == 1
    finally:
        await again.close()


async def test_the_file_is_in_wal_mode_and_shared_by_two_processes_stores(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "shared.db")
    one, two = SQLiteStore(path), SQLiteStore(path)  # as two workers would open it
    await one.start()
    await two.start()
    try:
        with closing(sqlite3.connect(path)) as db:
            assert db.execute("PRAGMA journal_mode").fetchone() == ("wal",)
            assert db.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)
        key = ConversationKey(ALICE, "c1")
        assert await one.append(key, turn("by one"), TurnRefs(("call_1",))) == 0
        assert await two.append(key, turn("by two"), TurnRefs()) == 1
        assert await one.turns(key) == [turn("by one"), turn("by two")]
        assert await two.lookup(ALICE, "t:call_1") == turn("by one")
    finally:
        await one.close()
        await two.close()


async def test_expired_conversations_are_deleted_from_the_file(tmp_path: Path) -> None:
    path = str(tmp_path / "ttl.db")
    clock = FakeClock()
    store = SQLiteStore(path, ttl_seconds=100, clock=clock)
    await store.start()
    try:
        await store.append(ConversationKey(ALICE, "old"), turn("x"), TurnRefs(("call_x",)))
        clock.now += 101
        await store.append(ConversationKey(ALICE, "new"), turn("y"), TurnRefs())
        with closing(sqlite3.connect(path)) as db:
            rows = {
                table: db.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                for table in ("conversations", "turns", "turn_index")
            }
        assert rows == {"conversations": 1, "turns": 1, "turn_index": 0}
    finally:
        await store.close()


async def test_a_locked_database_is_a_store_failure_and_reads_go_on(tmp_path: Path) -> None:
    path = str(tmp_path / "locked.db")
    store = SQLiteStore(path, busy_timeout_ms=50)
    await store.start()
    key = ConversationKey(ALICE, "c1")
    await store.append(key, turn("one"), TurnRefs())
    other = sqlite3.connect(path, isolation_level=None)
    try:
        other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
        with pytest.raises(StoreFailure, match="locked"):
            await store.append(key, turn("two"), TurnRefs())
        assert await store.turns(key) == [turn("one")]  # WAL: readers do not wait
        other.execute("ROLLBACK")
        assert await store.append(key, turn("two"), TurnRefs()) == 1
    finally:
        other.close()
        await store.close()


async def test_an_unopenable_path_fails_at_start_and_is_retried_later(tmp_path: Path) -> None:
    directory = tmp_path / "not-yet"
    store = SQLiteStore(str(directory / "history.db"))
    try:
        with pytest.raises(StoreFailure, match="unable to open"):
            await store.start()
        with pytest.raises(StoreFailure):
            await store.ping()
        directory.mkdir()
        assert await store.ping() is True
        assert await store.append(ConversationKey(ALICE, "c1"), turn("x"), TurnRefs()) == 0
    finally:
        await store.close()


async def test_a_damaged_record_is_a_store_failure(tmp_path: Path) -> None:
    path = str(tmp_path / "damaged.db")
    store = SQLiteStore(path)
    await store.start()
    key = ConversationKey(ALICE, "c1")
    try:
        await store.append(key, turn("x"), TurnRefs(("call_x",)))
        with closing(sqlite3.connect(path, isolation_level=None)) as db:
            db.execute("UPDATE turns SET record = x'7b6e6f'")  # '{no'
        with pytest.raises(StoreFailure):
            await store.turns(key)
        with pytest.raises(StoreFailure):
            await store.lookup(ALICE, "t:call_x")
    finally:
        await store.close()


async def test_a_file_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "newer.db")
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    store = SQLiteStore(path)
    try:
        with pytest.raises(StoreFailure, match="newer version"):
            await store.start()
    finally:
        await store.close()
