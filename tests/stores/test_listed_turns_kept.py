"""GET /v1/conversations reports as `turns` the turns the store keeps, the
ones GET /v1/conversations/{id} returns, on every store: after
`max_turns_per_conversation` dropped the oldest, and (on the memory store)
after `max_bytes` did. The proxy runs as its command line starts it, in
front of the fake upstream."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream
from tests.stores.servers import ProxyProcess, RedisServer, store_url

ADMIN = "admin-token-listed-turns"
REQUESTS = 5


def _config(directory: Path, upstream: FakeUpstream, store: dict[str, Any]) -> Path:
    lines = ["routes:", "  - name: default", '    models: ["*"]', f"    upstream: {upstream.url}"]
    lines.append("store:")
    lines += [f"  {name}: {value}" for name, value in store.items()]
    path = directory / "proxy.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _listed_and_kept(proxy: ProxyProcess, key: str, conversation: str) -> list[int]:
    """The conversation's `turns` in the caller's list, in the admin's list,
    and the turns its own GET returns."""
    caller = {"Authorization": f"Bearer {key}"}
    admin = {"Authorization": f"Bearer {ADMIN}"}
    mine = httpx.get(f"{proxy.url}/conversations", headers=caller, timeout=10).json()["data"]
    everyone = httpx.get(f"{proxy.url}/conversations?limit=1000", headers=admin, timeout=10)
    stored = httpx.get(f"{proxy.url}/conversations/{conversation}", headers=caller, timeout=10)
    assert stored.status_code == 200, stored.text
    (listed,) = [c["turns"] for c in mine if c["id"] == conversation]
    (listed_to_admin,) = [c["turns"] for c in everyone.json()["data"] if c["id"] == conversation]
    return [listed, listed_to_admin, len(stored.json()["turns"])]


def _converse(proxy: ProxyProcess, key: str, conversation: str) -> None:
    for i in range(REQUESTS):
        response = httpx.post(
            f"{proxy.url}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]},
            headers={"Authorization": f"Bearer {key}", "X-Conversation-Id": conversation},
            timeout=10,
        )
        assert response.status_code == 200, response.text


@pytest.mark.parametrize("kind", ["memory", "sqlite", "redis"])
def test_the_list_counts_the_turns_kept_after_max_turns_dropped_the_oldest(
    tmp_path: Path, upstream: FakeUpstream, redis_server: RedisServer, kind: str
) -> None:
    url = store_url(kind, tmp_path, redis_server)
    config = _config(tmp_path, upstream, {"url": url, "max_turns_per_conversation": 2})
    key, conversation = f"sk-listed-{uuid.uuid4().hex}", f"kept-{uuid.uuid4().hex[:8]}"
    env = {"REASONING_PROXY_ADMIN_TOKEN": ADMIN}
    with ProxyProcess(["--config", str(config)], log=tmp_path / "proxy.log", env=env) as proxy:
        _converse(proxy, key, conversation)
        assert _listed_and_kept(proxy, key, conversation) == [2, 2, 2]


def test_the_list_counts_the_turns_kept_after_max_bytes_dropped_the_oldest(
    tmp_path: Path, upstream: FakeUpstream
) -> None:
    # a few KB: room for the conversation and about two of its turns
    config = _config(tmp_path, upstream, {"url": "memory://", "max_bytes": 2048})
    key, conversation = "sk-listed-bytes", "kept-by-bytes"
    env = {"REASONING_PROXY_ADMIN_TOKEN": ADMIN}
    with ProxyProcess(["--config", str(config)], log=tmp_path / "proxy.log", env=env) as proxy:
        _converse(proxy, key, conversation)
        listed, listed_to_admin, kept = _listed_and_kept(proxy, key, conversation)
        assert 1 <= kept < REQUESTS  # the oldest went for the bytes
        assert listed == listed_to_admin == kept
