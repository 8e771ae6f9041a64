"""A field the client sends as `null` drops nothing, so X-Proxy-Dropped-Fields
does not name it (the SDKs and agents send explicit nulls for unset
options); a field with a value the chat upstream cannot use is still named.
Through real sockets, on the Responses and Messages doors."""

from __future__ import annotations

import httpx

from tests.harness import FakeUpstream, route_config, running_proxy


def test_nulls_are_not_named_as_dropped(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        responses = httpx.post(
            f"{proxy.url}/responses",
            json={"model": "m", "input": "hi", "prompt_cache_key": None, "user": "u-1"},
        )
        messages = httpx.post(
            f"{proxy.url}/messages",
            json={
                "model": "m",
                "max_tokens": 5,
                "messages": [{"role": "user", "content": "hi"}],
                "service_tier": None,
                "container": "c-1",
            },
        )
    assert responses.status_code == messages.status_code == 200
    assert responses.headers["x-proxy-dropped-fields"] == "user"
    assert messages.headers["x-proxy-dropped-fields"] == "container"
