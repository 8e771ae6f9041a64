"""A request body that is not UTF-8 (a client that encoded its JSON as
latin-1, whatever its Content-Type says) is a 400 that says so and where,
on every door, in the door's own error shape, with nothing sent upstream."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, route_config, running_proxy

BODY = '{"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "Café"}]}'
LATIN1 = BODY.encode("latin-1")
AT = LATIN1.index(b"\xe9")
HEADERS = {
    "Authorization": "Bearer sk-utf8",
    "Content-Type": "application/json; charset=latin-1",
}


@pytest.mark.parametrize("path", ["/chat/completions", "/responses", "/messages"])
def test_a_latin1_body_is_named_not_utf8(upstream: FakeUpstream, path: str) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        response = httpx.post(f"{proxy.url}{path}", content=LATIN1, headers=HEADERS, timeout=10)
    assert response.status_code == 400, response.text
    body = response.json()
    if path == "/messages":
        assert body["type"] == "error"
        assert body["error"]["type"] == "invalid_request_error"
        message = body["error"]["message"]
    else:
        assert body["error"]["code"] == "invalid_json"
        message = body["error"]["message"]
    assert f"not UTF-8 (an invalid byte at offset {AT})" in message
    assert "Caf" not in message  # never a piece of the body
    assert upstream.requests == []
