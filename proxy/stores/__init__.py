"""Stores of turns and profiles, chosen by URL: `memory://` (default),
`sqlite:///relative.db` or `sqlite:////absolute.db`, `redis://host:port/db`
(or `rediss://`), `redis+cluster://host:port[,host:port...]` (or
`rediss+cluster://`). Each backend's module says which bounds it honours."""

from __future__ import annotations

from urllib.parse import urlsplit

from proxy.config import StoreModel
from proxy.errors import ConfigError
from proxy.stores.base import ReasoningStore
from proxy.stores.memory import MemoryStore


def store_kind(url: str) -> str:
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError as exc:  # an unbalanced [ in the host
        raise ConfigError(f"invalid store URL: {exc}") from None
    if scheme in ("", "memory"):
        return "memory"
    if scheme == "sqlite":
        return "sqlite"
    if scheme in ("redis", "rediss", "redis+cluster", "rediss+cluster"):
        return "redis"
    raise ConfigError(
        f"unknown store URL scheme {scheme!r}: use memory://, sqlite:///path.db, "
        "redis://host:port/db or redis+cluster://host:port"
    )


def check_store(url: str) -> None:
    """Raise ConfigError, before the server starts, when a store cannot work
    as configured: an unknown scheme, a malformed URL, a SQLite path whose
    directory is missing or whose file is not a database. A store that is
    only down now (Redis not up yet) passes: the proxy starts, and /readyz
    says 503 until the store answers. A Redis that answers in the other
    mode than its URL says (a cluster node behind redis://, a standalone
    server behind redis+cluster://) is refused. Nothing is created or changed."""
    kind = store_kind(url)
    if kind == "sqlite":
        from proxy.stores.sqlite import check_sqlite, sqlite_path

        check_sqlite(sqlite_path(url))
    elif kind == "redis":
        from proxy.stores.redis import check_cluster_mode, check_redis_url

        check_redis_url(url)
        check_cluster_mode(url)


def open_store(options: StoreModel) -> ReasoningStore:
    """A store for the configured URL (not started: call `start()`). The
    backends are imported here, not at the top, so a memory-only proxy never
    loads the sqlite3 or redis modules."""
    kind = store_kind(options.url)
    conversations = options.max_conversations
    ttl = options.ttl_seconds
    turns = options.max_turns_per_conversation
    if kind == "sqlite":
        from proxy.stores.sqlite import SQLiteStore, sqlite_path

        return SQLiteStore(
            sqlite_path(options.url),
            max_conversations=conversations,
            ttl_seconds=ttl,
            max_turns=turns,
        )
    if kind == "redis":
        from proxy.stores.redis import RedisStore

        return RedisStore(
            options.url, max_conversations=conversations, ttl_seconds=ttl, max_turns=turns
        )
    return MemoryStore(
        max_conversations=conversations,
        max_bytes=options.max_bytes,
        ttl_seconds=ttl,
        max_turns=turns,
    )
