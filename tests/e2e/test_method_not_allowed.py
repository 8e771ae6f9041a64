"""A 405 says which methods its path takes (`Allow`, RFC 9110), on the
front doors, the pass-through and the API routers, through real sockets."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, route_config, running_proxy


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/v1/chat/completions", "POST"),
        ("PUT", "/v1/messages", "POST"),
        ("GET", "/v1/responses", "POST"),
        ("GET", "/v1/responses/input_tokens", "POST"),
        ("TRACE", "/v1/models", "GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS"),
        ("POST", "/healthz", "GET, HEAD"),
    ],
)
def test_a_405_names_the_allowed_methods(
    upstream: FakeUpstream, method: str, path: str, allow: str
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        answer = httpx.request(method, proxy.base + path)
    assert answer.status_code == 405
    error = answer.json()
    if path.startswith("/v1/messages"):  # the Messages door's own shape
        assert (error["type"], error["error"]["type"]) == ("error", "invalid_request_error")
    else:
        assert error["error"]["code"] == "method_not_allowed"
    assert set(answer.headers["allow"].split(", ")) == set(allow.split(", "))
    assert upstream.requests == []
