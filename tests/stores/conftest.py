"""Fixtures of the store tests: one real redis-server and one real
three-master Redis Cluster for the session, and `backend`, which runs each
contract test against memory, SQLite, Redis and Redis Cluster."""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import pytest

from proxy.stores.base import ReasoningStore
from proxy.stores.memory import MemoryStore
from proxy.stores.redis import RedisStore
from proxy.stores.sqlite import SQLiteStore
from tests.stores.cluster import LocalCluster

START = 1_800_000_000.0
_prefixes = itertools.count()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@dataclass
class FakeClock:
    now: float = START

    def __call__(self) -> float:
        return self.now


@dataclass
class Backend:
    """Opens stores of one kind with chosen bounds, all on one fake clock.
    `tick` moves that clock (update times, orders); `later` lets time pass for
    expiry too, which on Redis means waiting for real, since Redis expires
    keys on its own clock: tests that expire data there use short TTLs."""

    kind: str
    directory: Path
    redis_url: str | None
    clock: FakeClock = field(default_factory=FakeClock)
    opened: list[ReasoningStore] = field(default_factory=list)

    async def open(self, **bounds: Any) -> ReasoningStore:
        store: ReasoningStore
        if self.kind == "memory":
            store = MemoryStore(clock=self.clock, **bounds)
        elif self.kind == "sqlite":
            path = self.directory / f"store-{len(self.opened)}.db"
            store = SQLiteStore(str(path), clock=self.clock, **bounds)
        else:
            assert self.redis_url is not None
            prefix = f"test{next(_prefixes)}:"
            store = RedisStore(self.redis_url, prefix=prefix, clock=self.clock, **bounds)
        await store.start()
        self.opened.append(store)
        return store

    def tick(self, seconds: float = 1.0) -> None:
        self.clock.now += seconds

    async def later(self, seconds: float) -> None:
        self.tick(seconds)
        if self.kind.startswith("redis"):
            await anyio.sleep(seconds)

    async def close(self) -> None:
        for store in self.opened:
            await store.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[LocalCluster]:
    """Three redis-servers in cluster mode, every slot assigned, for the session."""
    with tempfile.TemporaryDirectory(prefix="rp-cluster-") as directory:
        cluster = LocalCluster(Path(directory))
        try:
            yield cluster.start()
        finally:
            cluster.stop()


@pytest.fixture(params=["memory", "sqlite", "redis", "redis-cluster"])
async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Backend]:
    url = None
    if request.param == "redis":
        url = request.getfixturevalue("redis_server").url
    elif request.param == "redis-cluster":
        url = request.getfixturevalue("redis_cluster").url
    backend = Backend(request.param, tmp_path, url)
    try:
        yield backend
    finally:
        await backend.close()


@pytest.fixture
async def store(backend: Backend) -> ReasoningStore:
    return await backend.open()
