"""The SQLite store: history that survives restarts, on one host.

URL: `sqlite:///relative/path.db` (relative to the working directory) or
`sqlite:////absolute/path.db`, the usual database-URL convention;
`sqlite:///:memory:` keeps everything in the process (tests). The parent
directory must exist and be writable; `check_sqlite` says so at start-up,
before the server listens.

The database runs in WAL mode (readers never wait for the writer, and several
worker processes on one host can share the file) with `synchronous=NORMAL`: a
crash of the proxy loses nothing, a power cut may lose the last turns. The
stdlib `sqlite3` module blocks, so every call runs on one dedicated thread
that owns the connection; calls are queued there in order, never on the event
loop. Each write is one `BEGIN IMMEDIATE` transaction, so concurrent writers
(other workers) queue on the lock for up to `busy_timeout` instead of failing
half-way. Every sqlite3 or OS error (read-only file, disk full, locked,
unopenable path) is raised as StoreFailure; a connection that could not be
opened is tried again on the next call. A file deleted or replaced (renamed
over) while open is noticed on the next call: the connection would go on
writing to a file no later start can find, so the path is opened again
(made anew when missing), and a warning says so.

Tables: `conversations` (one row per conversation key: how many turns were
ever appended, last update, model), `turns` (the serialized records),
`turn_index` (the tenant-wide index: `t:<tool_call_id>` / `f:<fingerprint>`
-> conversation and turn), `profiles`, `responses` (the Responses API's
stored response objects, per tenant), `deployment` (the tenant secret of a
deployment that configures none, written once). Turns and index rows belong to their
conversation (`ON DELETE CASCADE`), so dropping a conversation drops both.
Schema 2 added `responses`; a schema 1 file gains the table when opened
(when it is read-only then, its history is served as it is, and the upgrade
is tried again before each write).

Bounds honoured: `ttl_seconds` (a conversation not written for that long is
invisible at once and deleted by a sweep on a later write),
`max_turns_per_conversation` (the oldest turns go first, with their index
rows), `max_conversations` (the least recently *written* conversations go
first; unlike the memory store, reads do not refresh the order, since that
would turn every read into a write). Stored responses expire after
`ttl_seconds` too, and at most `max_conversations` of them are kept (the
least recently written go first). `max_bytes` is not honoured: it bounds
the memory store's RAM; the file is bounded by the other three.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson

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

T = TypeVar("T")

log = logging.getLogger("proxy")

SCHEMA_VERSION = 2
# Milliseconds a write waits for another process's lock before failing; below
# the runtime's per-call timeout, so a stuck writer shows up as StoreFailure.
BUSY_TIMEOUT_MS = 2000
# Bytes the readiness probe writes (and deletes): about a small turn's pages.
PROBE_BYTES = 4096
# Expired conversations are deleted by a sweep at most this often (seconds).
SWEEP_INTERVAL = 60.0
REOPENED_WARNING = (
    "the SQLite store %s is no longer the file the proxy opened (deleted, or replaced by "
    "another): opening it again, made anew if it is missing; what only the old file held "
    "is gone"
)

SCHEMA = """
CREATE TABLE IF NOT EXISTS conversations (
    tenant TEXT NOT NULL,
    conversation TEXT NOT NULL,
    appended INTEGER NOT NULL,      -- turns ever appended = next turn index
    updated REAL NOT NULL,          -- time of the last append
    model TEXT,
    PRIMARY KEY (tenant, conversation)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS conversations_by_update ON conversations (updated);
CREATE INDEX IF NOT EXISTS conversations_by_tenant ON conversations (tenant, updated);
CREATE TABLE IF NOT EXISTS turns (
    tenant TEXT NOT NULL,
    conversation TEXT NOT NULL,
    idx INTEGER NOT NULL,
    record BLOB NOT NULL,
    PRIMARY KEY (tenant, conversation, idx),
    FOREIGN KEY (tenant, conversation) REFERENCES conversations ON DELETE CASCADE
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS turn_index (
    tenant TEXT NOT NULL,
    key TEXT NOT NULL,
    conversation TEXT NOT NULL,
    turn INTEGER NOT NULL,
    PRIMARY KEY (tenant, key),
    FOREIGN KEY (tenant, conversation) REFERENCES conversations ON DELETE CASCADE
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS turn_index_by_turn ON turn_index (tenant, conversation, turn);
CREATE TABLE IF NOT EXISTS profiles (
    name TEXT PRIMARY KEY,
    body BLOB NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS responses (
    tenant TEXT NOT NULL,
    id TEXT NOT NULL,
    record BLOB NOT NULL,
    updated REAL NOT NULL,
    PRIMARY KEY (tenant, id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS responses_by_update ON responses (updated);
"""
# created by the first start without a configured secret (not in SCHEMA: a
# file of schema 2 gains it without an upgrade, and older versions ignore it)
DEPLOYMENT = (
    "CREATE TABLE IF NOT EXISTS deployment (name TEXT PRIMARY KEY, value BLOB NOT NULL)"
    " WITHOUT ROWID"
)


def sqlite_path(url: str) -> str:
    """The file path of a `sqlite:///...` URL (three slashes: relative, four:
    absolute)."""
    parts = urlsplit(url)
    # `sqlite:/data.db` and `sqlite:data.db` have no `//`: urlsplit reads
    # them as `sqlite:///data.db` would be, a relative path, which is not
    # what the single slash of the first one seems to say
    slashes = url[len(parts.scheme) + 1 :].startswith("//")
    if (
        parts.scheme.lower() != "sqlite"
        or not slashes
        or parts.netloc
        or parts.query
        or parts.fragment
    ):
        raise ConfigError(
            "a SQLite store URL is sqlite:///relative/path.db or sqlite:////absolute/path.db"
        )
    path = parts.path[1:] if parts.path.startswith("/") else parts.path
    if not path or path.endswith("/"):
        raise ConfigError("the SQLite store URL names no file: use sqlite:///path/to/file.db")
    return path


def check_sqlite(path: str) -> None:
    """Raise ConfigError when the store cannot work at `path`: its directory
    is missing, the file is missing and cannot be made there, the path is
    not a file, or the file is not a SQLite database this version can use.
    A database that can be read but not written (a read-only file) passes:
    the proxy serves the history it holds and reports not ready, as when
    the file turns read-only later. A file SQLite cannot open because its
    directory is read-only (it makes the WAL's -wal and -shm files there,
    even to read) is refused with the directory named. Nothing is created or changed: a missing
    file is made by the store when it starts."""
    if path == ":memory:":
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise ConfigError(f"the SQLite store's directory {directory} does not exist")
    if not os.path.exists(path):
        if not os.access(directory, os.W_OK | os.X_OK):
            raise ConfigError(
                f"the SQLite store's directory {directory} is not writable, "
                f"so {os.path.basename(path)} cannot be created there"
            )
        return
    if not os.path.isfile(path):
        raise ConfigError(f"the SQLite store {path} is not a file")
    try:
        db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000)
        try:
            db.execute("PRAGMA schema_version").fetchone()  # reads the header and schema
            (version,) = db.execute("PRAGMA user_version").fetchone()
            lacking = _lacking_columns(db)
        finally:
            db.close()
    except sqlite3.Error as exc:
        name = getattr(exc, "sqlite_errorname", "")
        if name in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            return  # another process holds it now: busy, not broken
        if name == "SQLITE_NOTADB":
            raise ConfigError(f"the SQLite store {path} is not a SQLite database") from None
        if name == "SQLITE_READONLY_DIRECTORY" or not os.access(directory, os.W_OK | os.X_OK):
            # in WAL mode, even a reader makes the -wal and -shm files beside the file
            base = os.path.basename(path)
            raise ConfigError(
                f"the SQLite store's directory {directory} is not writable: SQLite makes"
                f" {base}-wal and {base}-shm there to open {base} (WAL mode), even to"
                " read it; let the proxy's user write to the directory"
            ) from None
        raise ConfigError(f"the SQLite store {path} cannot be used: {exc}") from None
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"the SQLite store {path} was written by a newer version (schema {version})"
        )
    if lacking:
        # its tables would be kept as they are, and every write to them fail
        raise ConfigError(
            f"the SQLite store {path} has tables of this store's names without their"
            f" columns ({', '.join(lacking)}): another program's database, or one"
            " changed by hand"
        )


def _lacking_columns(db: sqlite3.Connection) -> list[str]:
    """`table.column` for each column of the schema that a table of the same
    name in `db` lacks (a table that is not there is made when the store
    opens the file, so it lacks nothing)."""
    lacking = []
    for table, columns in _schema_columns().items():
        found = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        if found:
            lacking += [f"{table}.{c}" for c in columns if c not in found]
    return lacking


@functools.cache
def _schema_columns() -> dict[str, tuple[str, ...]]:
    """Each table of the schema, and its columns in order."""
    db = sqlite3.connect(":memory:")
    try:
        db.executescript(SCHEMA + ";" + DEPLOYMENT)
        tables = [r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        return {t: tuple(r[1] for r in db.execute(f"PRAGMA table_info({t})")) for t in tables}
    finally:
        db.close()


def _identity(path: str) -> tuple[int, int] | None:
    """The device and inode of the file at `path`, None when there is none."""
    try:
        found = os.stat(path)
    except OSError:
        return None
    return (found.st_dev, found.st_ino)


def _read_only(exc: BaseException) -> bool:
    """SQLite refused a write to a file it may only read."""
    return str(getattr(exc, "sqlite_errorname", "")).startswith("SQLITE_READONLY")


@contextlib.contextmanager
def _failures(what: str) -> Iterator[None]:
    """The one place sqlite3 and OS errors become StoreFailure. ValueError
    covers records that no longer decode (a damaged file)."""
    try:
        yield
    except (sqlite3.Error, OSError, ValueError) as exc:
        raise StoreFailure(f"sqlite store {what} failed: {exc}") from exc


class SQLiteStore:
    name = "sqlite"

    def __init__(
        self,
        path: str,
        *,
        max_conversations: int = 10_000,
        ttl_seconds: float = 7 * 24 * 3600,
        max_turns: int = 1000,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self._max_conversations = max_conversations
        self._ttl = ttl_seconds
        self._max_turns = max_turns
        self._busy_timeout_ms = busy_timeout_ms
        self._clock = clock
        self._conn: sqlite3.Connection | None = None  # used on the store thread only
        self._file: tuple[int, int] | None = None  # what the path named when _conn opened
        self._thread: ThreadPoolExecutor | None = None
        self._upgrade_pending = False  # an older schema opened read-only
        self._next_sweep = 0.0
        self.evictions = 0

    # -- lifecycle ---------------------------------------------------------------

    async def start(self) -> None:
        await self._call("open", self._connection)

    async def close(self) -> None:
        if self._thread is None:
            return
        try:
            await self._call("close", self._disconnect)
        finally:
            # the close job was the last one queued, so nothing is left to wait for
            self._thread.shutdown(wait=False)
            self._thread = None

    async def ping(self) -> bool:
        """True when the database takes writes: a row is written and deleted
        in one committed transaction, so a read-only file, a lock held by
        another process and a full disk all report as down. (The commit
        writes the pages it touched to the WAL although nothing changed; a
        write rolled back writes nothing, and passed on a full disk.) The
        row's name is no profile's (names are never empty), and no reader
        sees it."""

        def probe(db: sqlite3.Connection) -> bool:
            db.execute("INSERT OR REPLACE INTO profiles VALUES ('', zeroblob(?))", (PROBE_BYTES,))
            db.execute("DELETE FROM profiles WHERE name = ''")
            return True

        return await self._write("ping", probe)

    # -- turns -------------------------------------------------------------------

    async def append(self, key: ConversationKey, turn: Turn, refs: TurnRefs) -> int:
        record = encode_turn(turn)
        now = self._clock()

        def write(db: sqlite3.Connection) -> int:
            cutoff = now - self._ttl
            if now >= self._next_sweep:
                db.execute("DELETE FROM conversations WHERE updated < ?", (cutoff,))
                self._next_sweep = now + min(self._ttl, SWEEP_INTERVAL)
            # an expired conversation not swept yet starts again from scratch
            db.execute(
                "DELETE FROM conversations WHERE tenant = ? AND conversation = ? AND updated < ?",
                (key.tenant, key.conversation, cutoff),
            )
            (appended,) = db.execute(
                "INSERT INTO conversations VALUES (?, ?, 1, ?, ?) "
                "ON CONFLICT DO UPDATE SET appended = appended + 1, updated = excluded.updated, "
                "model = coalesce(excluded.model, model) RETURNING appended",
                (key.tenant, key.conversation, now, turn.model),
            ).fetchone()
            index = int(appended) - 1
            db.execute(
                "INSERT INTO turns VALUES (?, ?, ?, ?)",
                (key.tenant, key.conversation, index, record),
            )
            db.executemany(
                "INSERT INTO turn_index VALUES (?, ?, ?, ?) ON CONFLICT DO UPDATE SET "
                "conversation = excluded.conversation, turn = excluded.turn",
                [(key.tenant, k, key.conversation, index) for k in refs.index_keys()],
            )
            oldest_kept = index + 1 - self._max_turns
            if oldest_kept > 0:
                where = "WHERE tenant = ? AND conversation = ? AND"
                args = (key.tenant, key.conversation, oldest_kept)
                db.execute(f"DELETE FROM turns {where} idx < ?", args)
                db.execute(f"DELETE FROM turn_index {where} turn < ?", args)
            if index == 0:
                self._evict(db, key)
            return index

        return await self._write("append", write)

    def _evict(self, db: sqlite3.Connection, keep: ConversationKey) -> None:
        """Over `max_conversations`: the least recently written go first."""
        (count,) = db.execute("SELECT count(*) FROM conversations").fetchone()
        excess = int(count) - self._max_conversations
        if excess <= 0:
            return
        db.execute(
            "DELETE FROM conversations WHERE (tenant, conversation) IN ("
            "SELECT tenant, conversation FROM conversations "
            "WHERE NOT (tenant = ? AND conversation = ?) ORDER BY updated LIMIT ?)",
            (keep.tenant, keep.conversation, excess),
        )
        self.evictions += excess

    async def turns(self, key: ConversationKey) -> list[Turn]:
        cutoff = self._clock() - self._ttl

        def read(db: sqlite3.Connection) -> list[bytes]:
            rows = db.execute(
                "SELECT t.record FROM turns t JOIN conversations c "
                "ON c.tenant = t.tenant AND c.conversation = t.conversation "
                "WHERE t.tenant = ? AND t.conversation = ? AND c.updated >= ? ORDER BY t.idx",
                (key.tenant, key.conversation, cutoff),
            ).fetchall()
            return [r[0] for r in rows]

        records = await self._run("read", read)
        with _failures("decode"):
            return decode_turns(records)

    async def lookup(self, tenant: str, index_key: str) -> Turn | None:
        cutoff = self._clock() - self._ttl

        def read(db: sqlite3.Connection) -> bytes | None:
            row = db.execute(
                "SELECT t.record FROM turn_index i "
                "JOIN conversations c ON c.tenant = i.tenant AND c.conversation = i.conversation "
                "JOIN turns t ON t.tenant = i.tenant AND t.conversation = i.conversation "
                "AND t.idx = i.turn "
                "WHERE i.tenant = ? AND i.key = ? AND c.updated >= ?",
                (tenant, index_key, cutoff),
            ).fetchone()
            return None if row is None else bytes(row[0])

        record = await self._run("lookup", read)
        if record is None:
            return None
        with _failures("decode"):
            return decode_turn(record)

    async def delete(self, key: ConversationKey) -> bool:
        cutoff = self._clock() - self._ttl

        def write(db: sqlite3.Connection) -> bool:
            cursor = db.execute(
                "DELETE FROM conversations WHERE tenant = ? AND conversation = ? "
                "RETURNING updated >= ?",
                (key.tenant, key.conversation, cutoff),
            )
            row = cursor.fetchone()
            return row is not None and bool(row[0])  # an expired one was already gone

        return await self._write("delete", write)

    async def conversations(self, tenant: str | None, limit: int = 100) -> list[ConversationInfo]:
        cutoff = self._clock() - self._ttl

        def read(db: sqlite3.Connection) -> list[ConversationInfo]:
            # the turns kept (older ones dropped by max_turns_per_conversation)
            # are what GET /v1/conversations/{id} returns; `appended` counts
            # every turn ever stored
            kept = (
                "(SELECT count(*) FROM turns t WHERE t.tenant = c.tenant"
                " AND t.conversation = c.conversation)"
            )
            columns = f"SELECT tenant, conversation, {kept}, updated, model FROM conversations c"
            args: tuple[Any, ...]
            if tenant is None:
                sql, args = f"{columns} WHERE updated >= ?", (cutoff,)
            else:
                sql, args = f"{columns} WHERE tenant = ? AND updated >= ?", (tenant, cutoff)
            rows = db.execute(f"{sql} ORDER BY updated DESC LIMIT ?", (*args, limit))
            return [ConversationInfo(t, c, int(n), float(u), m) for t, c, n, u, m in rows]

        return await self._run("list", read)

    # -- profiles ----------------------------------------------------------------

    async def get_profile(self, name: str) -> dict[str, Any] | None:
        def read(db: sqlite3.Connection) -> bytes | None:
            row = db.execute("SELECT body FROM profiles WHERE name = ?", (name,)).fetchone()
            return None if row is None else bytes(row[0])

        body = await self._run("profile read", read)
        if body is None:
            return None
        with _failures("decode"):
            value: dict[str, Any] = orjson.loads(body)
        return value

    async def put_profile(self, name: str, values: dict[str, Any]) -> None:
        body = orjson.dumps(values)

        def write(db: sqlite3.Connection) -> None:
            db.execute("INSERT OR REPLACE INTO profiles VALUES (?, ?)", (name, body))

        await self._write("profile write", write)

    async def delete_profile(self, name: str) -> bool:
        def write(db: sqlite3.Connection) -> bool:
            return db.execute("DELETE FROM profiles WHERE name = ?", (name,)).rowcount > 0

        return await self._write("profile delete", write)

    async def list_profiles(self) -> dict[str, dict[str, Any]]:
        def read(db: sqlite3.Connection) -> list[tuple[str, bytes]]:
            rows = db.execute("SELECT name, body FROM profiles")
            return [(str(n), bytes(b)) for n, b in rows]

        rows = await self._run("profile list", read)
        with _failures("decode"):
            return {name: orjson.loads(body) for name, body in rows}

    # -- the tenant secret ------------------------------------------------------------

    async def tenant_secret(self, drawn: bytes) -> bytes:
        def read(db: sqlite3.Connection) -> bytes | None:
            try:
                row = db.execute(
                    "SELECT value FROM deployment WHERE name = 'tenant_secret'"
                ).fetchone()
            except sqlite3.OperationalError:  # no such table: never written
                return None
            return None if row is None else bytes(row[0])

        def write(db: sqlite3.Connection) -> bytes | None:
            db.execute(DEPLOYMENT)
            db.execute("INSERT OR IGNORE INTO deployment VALUES ('tenant_secret', ?)", (drawn,))
            return read(db)

        try:
            kept = await self._write("secret write", write)
        except StoreFailure:
            # a read-only file: the secret it holds serves its history
            kept = await self._run("secret read", read)
            if kept is None:
                raise
        if kept is None:  # pragma: no cover - written in the same transaction
            raise StoreFailure("the sqlite store did not keep the tenant secret")
        return kept

    # -- stored responses ----------------------------------------------------------

    async def put_response(self, tenant: str, response_id: str, record: bytes) -> None:
        now = self._clock()

        def write(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM responses WHERE updated < ?", (now - self._ttl,))
            db.execute(
                "INSERT OR REPLACE INTO responses VALUES (?, ?, ?, ?)",
                (tenant, response_id, bytes(record), now),
            )
            (count,) = db.execute("SELECT count(*) FROM responses").fetchone()
            excess = int(count) - self._max_conversations
            if excess > 0:
                db.execute(
                    "DELETE FROM responses WHERE (tenant, id) IN (SELECT tenant, id FROM "
                    "responses WHERE NOT (tenant = ? AND id = ?) ORDER BY updated LIMIT ?)",
                    (tenant, response_id, excess),
                )
                self.evictions += excess

        await self._write("response write", write)

    async def get_response(self, tenant: str, response_id: str) -> bytes | None:
        cutoff = self._clock() - self._ttl

        def read(db: sqlite3.Connection) -> bytes | None:
            row = db.execute(
                "SELECT record FROM responses WHERE tenant = ? AND id = ? AND updated >= ?",
                (tenant, response_id, cutoff),
            ).fetchone()
            return None if row is None else bytes(row[0])

        return await self._run("response read", read)

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        cutoff = self._clock() - self._ttl

        def write(db: sqlite3.Connection) -> bool:
            row = db.execute(
                "DELETE FROM responses WHERE tenant = ? AND id = ? RETURNING updated >= ?",
                (tenant, response_id, cutoff),
            ).fetchone()
            return row is not None and bool(row[0])

        return await self._write("response delete", write)

    async def stats(self) -> StoreStats:
        cutoff = self._clock() - self._ttl

        def read(db: sqlite3.Connection) -> StoreStats:
            (conversations,) = db.execute(
                "SELECT count(*) FROM conversations WHERE updated >= ?", (cutoff,)
            ).fetchone()
            (turns,) = db.execute(
                "SELECT count(*) FROM turns t JOIN conversations c "
                "ON c.tenant = t.tenant AND c.conversation = t.conversation "
                "WHERE c.updated >= ?",
                (cutoff,),
            ).fetchone()
            (pages,) = db.execute("PRAGMA page_count").fetchone()
            (free,) = db.execute("PRAGMA freelist_count").fetchone()
            (page_size,) = db.execute("PRAGMA page_size").fetchone()
            used = (int(pages) - int(free)) * int(page_size)
            extra = {"evictions": self.evictions, "path": self.path}
            return StoreStats(int(conversations), int(turns), used, extra)

        return await self._run("stats", read)

    # -- the store thread ----------------------------------------------------------

    async def _call(self, what: str, fn: Callable[[], T]) -> T:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sqlite-store")
        loop = asyncio.get_running_loop()
        with _failures(what):
            return await loop.run_in_executor(self._thread, fn)

    async def _run(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` on the store thread (autocommit: one statement
        is one transaction)."""
        return await self._call(what, lambda: fn(self._connection()))

    async def _write(self, what: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn(connection)` in one write transaction on the store thread."""

        def transaction(reopened: bool = False) -> T:
            db = self._connection()
            try:
                if self._upgrade_pending:
                    self._upgrade(db)
                db.execute("BEGIN IMMEDIATE")
                result = fn(db)
                db.execute("COMMIT")
            except BaseException as exc:
                if db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        db.execute("ROLLBACK")
                if not _read_only(exc):
                    raise
                # SQLite opened the file read-only and stays so, even once
                # the file is writable: open it again, and try once more
                # (nothing was written)
                self._disconnect()
                if reopened:
                    raise
                return transaction(reopened=True)
            return result

        return await self._call(what, transaction)

    def _connection(self) -> sqlite3.Connection:
        """The thread's connection, opened (and the schema created) on first
        use, and again when the path no longer names the file it opened."""
        if self._conn is not None:
            if self._file is None or _identity(self.path) == self._file:
                return self._conn
            log.warning(REOPENED_WARNING, self.path)
            self._disconnect()
        # isolation_level=None: transactions are explicit (BEGIN IMMEDIATE)
        db = sqlite3.connect(self.path, isolation_level=None, timeout=self._busy_timeout_ms / 1000)
        try:
            db.execute("PRAGMA foreign_keys = ON")
            (version,) = db.execute("PRAGMA user_version").fetchone()
            if version > SCHEMA_VERSION:
                raise sqlite3.DatabaseError(
                    f"{self.path} was written by a newer version (schema {version})"
                )
            if version < SCHEMA_VERSION:
                try:
                    self._upgrade(db)
                except sqlite3.Error as exc:
                    if not _read_only(exc):
                        raise
                    # a read-only file of an older schema: serve the history
                    # it holds; the upgrade is tried again before each write
                    self._upgrade_pending = True
            db.execute("PRAGMA synchronous = NORMAL")
        except BaseException:
            db.close()
            raise
        self._conn = db
        self._file = None if self.path == ":memory:" else _identity(self.path)
        return db

    def _upgrade(self, db: sqlite3.Connection) -> None:
        """Create the schema, or bring an older one up to SCHEMA_VERSION
        (every change so far adds tables: CREATE ... IF NOT EXISTS)."""
        try:
            db.execute("PRAGMA journal_mode = WAL")  # persistent: set once, when created
            # one script, one transaction (executescript commits what is pending first)
            db.executescript(
                f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA user_version = {SCHEMA_VERSION}; COMMIT;"
            )
        except BaseException:
            if db.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    db.execute("ROLLBACK")
            raise
        self._upgrade_pending = False

    def _disconnect(self) -> None:
        if self._conn is not None:
            conn, self._conn = self._conn, None
            conn.close()
