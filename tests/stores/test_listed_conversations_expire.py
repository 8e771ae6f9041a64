"""GET /v1/conversations leaves out a conversation whose `ttl_seconds` have
run out, on every store, also one that was read after its last write (the
memory store's reads move it up its LRU order, past live ones), as
GET /v1/conversations/{id} answers 404 for it. The proxy runs as its
command line starts it, in front of the fake upstream."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess, RedisServer, store_url
from tests.stores.test_listed_turns_kept import _config

TTL = 4  # seconds
KEY = {"Authorization": "Bearer sk-listed-expiry"}


def _write(proxy: ProxyProcess, conversation: str) -> None:
    response = httpx.post(
        f"{proxy.url}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
        headers={**KEY, "X-Conversation-Id": conversation},
        timeout=10,
    )
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_an_expired_conversation_read_since_its_last_write_is_not_listed(
    tmp_path: Path, upstream: FakeUpstream, redis_server: RedisServer, kind: str
) -> None:
    url = store_url(kind, tmp_path, redis_server)
    suffix = f"{kind}-{time.time_ns()}"
    old, new = f"old-{suffix}", f"new-{suffix}"
    config = _config(tmp_path, upstream, {"url": url, "ttl_seconds": TTL})
    with ProxyProcess(["--config", str(config)], log=tmp_path / "proxy.log") as proxy:
        start = time.monotonic()
        _write(proxy, old)
        time.sleep(TTL / 2)
        _write(proxy, new)  # expires TTL / 2 after `old`
        read = httpx.get(f"{proxy.url}/conversations/{old}", headers=KEY, timeout=10)
        assert read.status_code == 200  # read, not written: its expiry stays
        time.sleep(max(0.0, start + TTL + 0.8 - time.monotonic()))
        listed = httpx.get(f"{proxy.url}/conversations", headers=KEY, timeout=10).json()
        gone = httpx.get(f"{proxy.url}/conversations/{old}", headers=KEY, timeout=10)
        assert gone.status_code == 404
        assert [c["id"] for c in listed["data"]] == [new]
