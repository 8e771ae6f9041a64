"""A conversations API path whose id cannot be a conversation id is a 400
that names the path's `id`, not the X-Conversation-Id header the client
never sent; for every caller alike, so it tells nothing about other tenants."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, route_config, running_proxy


@pytest.mark.parametrize("method", ["GET", "DELETE"])
@pytest.mark.parametrize("conversation", ["a%20b", "%E2%98%83", "x" * 129])
def test_an_id_that_cannot_be_one_names_the_path(
    upstream: FakeUpstream, method: str, conversation: str
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        for headers in ({}, {"Authorization": "Bearer sk-some-tenant"}):
            r = httpx.request(method, f"{proxy.url}/conversations/{conversation}", headers=headers)
            assert r.status_code == 400
            error = r.json()["error"]
            assert error["code"] == "invalid_conversation_id"
            assert error["param"] == "id"
            assert error["message"].startswith("id must be 1-128 characters")
            assert "X-Conversation-Id" not in error["message"]
