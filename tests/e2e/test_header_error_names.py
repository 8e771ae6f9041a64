"""A header refused for its value (longer than limits.max_header_bytes) is
named as the setting errors name it, through a real server: the proxy's own
headers in their documented spelling (`X-Reasoning-Enabled`, whatever case
the client wrote), another by the name the request carries.

Regression: the 400 `header_too_large` named `x-reasoning-enabled` while an
invalid value of the same header named `X-Reasoning-Enabled`."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from tests.harness import FakeUpstream, ProxyServer, route_config, running_proxy

LIMIT = 1024
LONG = "a" * (LIMIT + 1)
CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    config = route_config(upstream_server, top={"limits": {"max_header_bytes": LIMIT}})
    with running_proxy(config) as server:
        yield server


@pytest.mark.parametrize(
    ("written", "named"),
    [
        ("x-reasoning-enabled", "X-Reasoning-Enabled"),
        ("X-REASONING-EFFORT", "X-Reasoning-Effort"),
        ("x-reasoning-profile", "X-Reasoning-Profile"),
        ("x-conversation-id", "X-Conversation-Id"),
        ("X-Other-Header", "x-other-header"),  # (the server hands names on in lower case)
    ],
)
def test_a_too_long_header_is_named_as_documented(
    upstream: FakeUpstream, proxy: ProxyServer, written: str, named: str
) -> None:
    upstream.reset()
    headers = {written: LONG, "Authorization": "Bearer sk-client"}
    chat = httpx.post(f"{proxy.url}/chat/completions", json=CHAT, headers=headers)
    messages = httpx.post(f"{proxy.url}/messages", json={**CHAT, "max_tokens": 5}, headers=headers)
    passed = httpx.get(f"{proxy.url}/files", headers=headers)
    for r in (chat, passed):
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "header_too_large"
        assert r.json()["error"]["param"] == named
        assert r.json()["error"]["message"] == (
            f"The value of header {named} is longer than limits.max_header_bytes."
        )
    assert messages.status_code == 400, messages.text
    assert messages.json()["error"]["message"] == chat.json()["error"]["message"]
    assert upstream.requests == []


def test_the_setting_error_names_the_header_the_same_way(proxy: ProxyServer) -> None:
    r = httpx.post(
        f"{proxy.url}/chat/completions", json=CHAT, headers={"x-reasoning-enabled": "maybe"}
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "X-Reasoning-Enabled"
