"""A route whose upstream is the proxy itself (a configuration mistake):
the request that comes back on the proxy's own upstream connection is
refused with 508 `loop_detected`, so the loop ends at its first turn,
through each front door, instead of filling every upstream slot and
answering 503 `upstream_busy` after the queue timeout."""

from __future__ import annotations

import logging
from typing import Any

import anthropic
import httpx
import pytest

from tests.harness import free_port, running_proxy

KEY = {"Authorization": "Bearer sk-client"}
LOOP_TEXT = "points back at the proxy"


@pytest.fixture
def looped(caplog: pytest.LogCaptureFixture) -> Any:
    caplog.set_level(logging.WARNING, logger="proxy")
    port = free_port()
    config = {"routes": [{"name": "self", "upstream": f"http://127.0.0.1:{port}/v1"}]}
    with running_proxy(config, port=port) as proxy:
        yield proxy
        assert proxy.runtime.upstream.in_flight == 0  # nothing left waiting


def test_chat_and_pass_through_end_at_the_first_turn(
    looped: Any, caplog: pytest.LogCaptureFixture
) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    chat = httpx.post(f"{looped.url}/chat/completions", json=body, headers=KEY, timeout=30)
    stream = httpx.post(
        f"{looped.url}/chat/completions", json={**body, "stream": True}, headers=KEY, timeout=30
    )
    models = httpx.get(f"{looped.url}/models", headers=KEY, timeout=30)
    for r in (chat, stream, models):
        assert r.status_code == 508, r.text
        error = r.json()["error"]
        assert error["code"] == "loop_detected"
        assert LOOP_TEXT in error["message"]
    warnings = [r for r in caplog.records if "own upstream connections" in r.getMessage()]
    assert len(warnings) == 3  # one per turned-back request, none for the outer ones


def test_the_messages_door_says_it_in_its_own_shape(looped: Any) -> None:
    client = anthropic.Anthropic(base_url=looped.base, api_key="sk-client", max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 508
    assert LOOP_TEXT in str(caught.value.body)
