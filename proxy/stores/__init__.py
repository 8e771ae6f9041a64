"""Stores of turns and profiles, chosen by URL: `memory://` (default),
`sqlite:///relative.db` or `sqlite:////absolute.db`, `redis://host:port/db`."""

from __future__ import annotations

from urllib.parse import urlsplit

from proxy.config import StoreModel
from proxy.errors import ConfigError
from proxy.stores.base import ReasoningStore
from proxy.stores.memory import MemoryStore


def store_kind(url: str) -> str:
    scheme = urlsplit(url).scheme.lower()
    if scheme in ("", "memory"):
        return "memory"
    if scheme in ("sqlite", "redis", "rediss"):
        return "redis" if scheme.startswith("redis") else "sqlite"
    raise ConfigError(
        f"unknown store URL scheme {scheme!r}: use memory://, sqlite:///path.db or redis://host:port/db"
    )


def open_store(options: StoreModel) -> ReasoningStore:
    """A store for the configured URL (not started: call `start()`)."""
    kind = store_kind(options.url)
    if kind == "memory":
        return MemoryStore(
            max_conversations=options.max_conversations,
            max_bytes=options.max_bytes,
            ttl_seconds=options.ttl_seconds,
            max_turns=options.max_turns_per_conversation,
        )
    raise ConfigError(f"the {kind} store is not available in this build")
