"""The tenant secret a Redis store keeps (`rp:secret`, for a deployment that
sets no REASONING_PROXY_SECRET), on a real redis-server with real `serve`
processes. After Redis lost its data (FLUSHALL,
a restart without persistence) a running replica never wrote the secret
back, so a replica started later drew a new one and one client key was two
tenants. Now a running process writes its secret back, and one that finds
another secret kept there is not ready (and says why) until they agree."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from proxy.config import MAX_TTL_SECONDS
from proxy.history.keys import ConversationKey
from proxy.runtime import RANDOM_SECRET_WARNING, SECRET_AGREES_NOTE, SECRET_CONFLICT_ERROR
from proxy.stores.base import TurnRefs
from proxy.stores.redis import RedisStore
from tests.harness import FakeUpstream, closed_port
from tests.stores.servers import ProxyProcess, RedisServer, wait_until
from tests.stores.test_contract import ALICE, turn

KEY = {"Authorization": "Bearer sk-client-a"}
NO_SECRET = {"REASONING_PROXY_SECRET": ""}  # unset: the store keeps one


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def upstream() -> Iterator[FakeUpstream]:
    fake = FakeUpstream().start()
    try:
        yield fake
    finally:
        fake.stop()


def config_file(tmp_path: Path, store: str, upstream: str) -> Path:
    path = tmp_path / f"config-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(
        f'store: {{url: "{store}"}}\nroutes: [{{name: a, models: ["*"], upstream: "{upstream}"}}]\n'
    )
    return path


def replica(tmp_path: Path, config: Path, name: str) -> ProxyProcess:
    return ProxyProcess(["--config", str(config)], log=tmp_path / f"{name}.log", env=NO_SECRET)


def chat(base: str, conversation: str) -> None:
    answer = httpx.post(
        f"{base}/v1/chat/completions",
        headers={**KEY, "X-Conversation-Id": conversation},
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        timeout=10,
    )
    assert answer.status_code == 200, answer.text


def listed(base: str) -> set[str]:
    answer = httpx.get(f"{base}/v1/conversations", headers=KEY, timeout=10)
    assert answer.status_code == 200, answer.text
    return {c["id"] for c in answer.json()["data"]}


def ready(base: str) -> httpx.Response:
    return httpx.get(f"{base}/readyz", timeout=10)


def test_a_flushed_redis_gets_the_secret_back_so_a_later_replica_agrees(
    tmp_path: Path, server: RedisServer, upstream: FakeUpstream
) -> None:
    client = redis.Redis.from_url(server.url)
    config = config_file(tmp_path, server.url, upstream.url)
    with replica(tmp_path, config, "first") as first:
        kept = client.get("rp:secret")
        assert kept
        client.flushall()  # Redis lost its data
        wait_until(lambda: client.get("rp:secret") == kept, what="the secret written back")
        chat(first.base, "after-the-flush")
        with replica(tmp_path, config, "second") as second:
            # the same key is the same tenant on both replicas
            assert listed(second.base) == listed(first.base) == {"after-the-flush"}
            assert ready(second.base).status_code == 200
        assert ready(first.base).status_code == 200
    client.close()


def test_a_replica_whose_secret_the_store_no_longer_keeps_is_not_ready(
    tmp_path: Path, server: RedisServer, upstream: FakeUpstream
) -> None:
    client = redis.Redis.from_url(server.url)
    config = config_file(tmp_path, server.url, upstream.url)
    log = tmp_path / "first.log"
    with replica(tmp_path, config, "first") as first:
        ours = client.get("rp:secret")
        assert ready(first.base).status_code == 200
        # Redis lost its data and another replica kept a secret it drew
        client.set("rp:secret", os.urandom(32))
        wait_until(lambda: ready(first.base).status_code == 503, what="/readyz to fail")
        body = ready(first.base).json()
        assert body["status"] == "degraded"
        assert body["store"] == "ok"
        assert body["secret"] == "conflict"
        assert SECRET_CONFLICT_ERROR % "redis" in log.read_text()
        # it keeps its own secret (its clients stay the tenants they were)
        # and does not overwrite the store's
        assert client.get("rp:secret") != ours
        # once the store holds this process's secret again, it is ready again
        client.set("rp:secret", ours)
        wait_until(lambda: ready(first.base).status_code == 200, what="/readyz to recover")
        assert SECRET_AGREES_NOTE % "redis" in log.read_text()
        assert log.read_text().count(SECRET_CONFLICT_ERROR % "redis") == 1
    client.close()


def test_the_warning_for_an_unreachable_store_reads_whole_in_the_log(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    """The log redactor took "secret: until" for a named value and printed
    "...tenant secret: [REDACTED] it does, requests use..."."""
    log = tmp_path / "proxy.log"
    with closed_port() as port:
        config = config_file(tmp_path, f"redis://127.0.0.1:{port}/0", upstream.url)
        with replica(tmp_path, config, "proxy"):
            wait_until(lambda: "REASONING_PROXY_SECRET is not set" in log.read_text())
    text = log.read_text()
    assert RANDOM_SECRET_WARNING in text
    assert "[REDACTED]" not in text


@pytest.mark.anyio
async def test_the_longest_ttl_the_config_takes_works_on_redis(redis_server: RedisServer) -> None:
    """ttl_seconds is at most ten years (config validation; past Redis's
    range every append failed halfway, leaving keys without a TTL): an
    append with that TTL works, and every key it writes expires."""
    store = RedisStore(redis_server.url, prefix="ttl-max:", ttl_seconds=MAX_TTL_SECONDS)
    await store.start()
    try:
        key = ConversationKey(ALICE, "c1")
        await store.append(key, turn("1", call="call_1"), TurnRefs(("call_1",), "fp-1"))
        assert len(await store.turns(key)) == 1
    finally:
        await store.close()
    client = redis.Redis.from_url(redis_server.url)
    names = client.keys("ttl-max:*")
    assert len(names) == 6  # the conversation's three, the tenant's two, rp:recent
    for name in names:
        assert client.pttl(name) > (MAX_TTL_SECONDS - 60) * 1000, name
    client.close()
