"""A route whose upstream is the proxy itself (a configuration mistake):
the request that comes back on the proxy's own upstream connection is
refused with 508 `loop_detected`, so the loop ends at its first turn,
through each front door, instead of filling every upstream slot and
answering 503 `upstream_busy` after the queue timeout."""

from __future__ import annotations

import logging
import socket
from typing import Any

import anthropic
import httpx
import pytest

from tests.harness import FakeUpstream, free_port, route_config, running_proxy

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
    with client, pytest.raises(anthropic.APIStatusError) as caught:
        client.messages.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 508
    assert LOOP_TEXT in str(caught.value.body)


def _health_from(sock: socket.socket, proxy: Any) -> bytes:
    """GET /healthz on a bound socket: the response's status line."""
    sock.settimeout(10)
    sock.connect(("127.0.0.1", proxy.port))
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: proxy\r\nConnection: close\r\n\r\n")
    with sock.makefile("rb") as answer:
        return answer.readline()


def test_a_client_that_shares_a_local_port_with_an_upstream_connection_is_served(
    upstream: FakeUpstream,
) -> None:
    """The kernel may give a client's connection to the proxy the same local
    port as one of the proxy's upstream connections (to another address): the
    loop check compares both ends, so only a request arriving at the far end
    of one of those connections is refused."""
    with running_proxy(route_config(upstream)) as proxy:
        own = proxy.runtime.upstream.own_connections
        for far, status in ((upstream.port, b"200"), (proxy.port, b"508")):
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))  # the port the kernel gives
                ends = (sock.getsockname(), ("127.0.0.1", far))
                own[ends] = 1  # an upstream connection from that port, to `far`
                try:
                    assert _health_from(sock, proxy).startswith(b"HTTP/1.1 " + status)
                finally:
                    own.pop(ends)
