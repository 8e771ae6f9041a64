"""A chat request still waiting for its upstream's response head when the
shutdown grace period ends (the real process, SIGTERM): the client gets the
503 `server_shutting_down` with `Retry-After` (the SDKs retry it, on a
replica still serving), and no turn is stored, since no answer had begun:
as when a client leaves before its answer starts. The process exits 0."""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.test_shutdown import KEY, Serve, assert_clean, proxy_config
from tests.harness import FakeUpstream, Hang
from tests.stores.servers import wait_until


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], Serve]]:
    """Start `python -m proxy serve` with a config; each is stopped at the end."""
    started: list[Serve] = []

    def start(config: dict[str, Any]) -> Serve:
        started.append(Serve(tmp_path, config))
        return started[-1].start()

    yield start
    for proxy in started:
        proxy.stop()


@pytest.mark.parametrize("stream", [True, False])
def test_a_request_without_an_upstream_head_at_the_cut_gets_a_503_and_stores_nothing(
    tmp_path: Path, upstream: FakeUpstream, serve: Any, stream: bool
) -> None:
    upstream.script(Hang())  # the request arrives; no head ever comes back
    proxy = serve(proxy_config(upstream, tmp_path, grace=1))
    body = {"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]}
    with ThreadPoolExecutor(1) as pool:
        chat = pool.submit(
            httpx.post,
            proxy.base + "/v1/chat/completions",
            json=body,
            headers={**KEY, "X-Conversation-Id": "no-head"},
            timeout=60,
        )
        wait_until(lambda: len(upstream.requests) == 1, 15, "the chat request upstream")
        proxy.signal(signal.SIGTERM)
        answer = chat.result(30)
    assert answer.status_code == 503
    assert answer.headers["retry-after"] == "1"
    assert answer.json()["error"]["code"] == "server_shutting_down"
    assert proxy.wait(30) == 0
    assert_clean(proxy.output())
    wait_until(lambda: upstream.disconnects == 1, 15, "the upstream request to be closed")
    again = serve(proxy_config(upstream, tmp_path))
    stored = httpx.get(f"{again.base}/v1/conversations/no-head", headers=KEY, timeout=10)
    assert stored.status_code == 404
