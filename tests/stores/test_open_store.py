"""open_store: the store URL picks the backend, and a bad URL is a config
error at start-up, before any request."""

from __future__ import annotations

import pytest

from proxy.config import StoreModel
from proxy.errors import ConfigError
from proxy.stores import open_store, store_kind
from proxy.stores.memory import MemoryStore
from proxy.stores.redis import RedisStore
from proxy.stores.sqlite import SQLiteStore

BOUNDS = {"max_conversations": 5, "ttl_seconds": 60, "max_turns_per_conversation": 3}


def test_each_url_scheme_opens_its_backend() -> None:
    assert isinstance(open_store(StoreModel(url="memory://", **BOUNDS)), MemoryStore)
    sqlite = open_store(StoreModel(url="sqlite:////tmp/x.db", **BOUNDS))
    assert isinstance(sqlite, SQLiteStore)
    assert sqlite.path == "/tmp/x.db"
    redis = open_store(StoreModel(url="redis://localhost:6379/2", **BOUNDS))
    assert isinstance(redis, RedisStore)
    assert redis.url == "redis://localhost:6379/2"
    assert isinstance(open_store(StoreModel(url="rediss://localhost:6380/0", **BOUNDS)), RedisStore)
    cluster = open_store(StoreModel(url="redis+cluster://h1:7000,[::1]:7001", **BOUNDS))
    assert isinstance(cluster, RedisStore)
    assert cluster.cluster is True
    assert isinstance(open_store(StoreModel(url="rediss+cluster://h:7000", **BOUNDS)), RedisStore)


def test_store_kind() -> None:
    urls = ("", "memory://", "sqlite:///a.db", "redis://h:1/0", "rediss://h", "redis+cluster://h:1")
    kinds = ["memory", "memory", "sqlite", "redis", "redis", "redis"]
    assert [store_kind(u) for u in urls] == kinds


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("postgres://localhost/db", "unknown store URL scheme"),
        ("sqlite://host/history.db", "sqlite:///relative/path.db"),
        ("sqlite:///", "names no file"),
        ("redis://localhost:port/0", "invalid Redis store URL"),
        ("redis+cluster://h:7000,h:port", "lists host:port pairs"),
        ("redis+cluster://h:7000/2", "a cluster has only database 0"),
        ("redis+cluster://h:7000?no_such_option=1", "unknown option 'no_such_option'"),
    ],
)
def test_a_bad_url_is_a_config_error(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        open_store(StoreModel(url=url))
