"""Behind a route key, the endpoints beside /v1/responses (`compact`,
`input_tokens`) continue a stored response only for the tenant that made
it, as /v1/responses does: a compaction of another tenant's chain would
hand over its items (the user's messages come back verbatim)."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.test_responses_native import BASE, message

MADE = {**BASE, "id": "resp_owned", "status": "completed", "output": [message("Hi.")]}
COMPACTED = {
    "id": "cmp_1",
    "object": "response.compaction",
    "created_at": 1700000000,
    "output": [{"type": "message", "role": "user", "content": "my secret plan"}],
    "usage": {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12},
}
COUNTED = {"object": "response.input_tokens", "input_tokens": 9}


@pytest.mark.parametrize(
    ("path", "answer"),
    [("/responses/compact", COMPACTED), ("/responses/input_tokens", COUNTED)],
    ids=["compact", "input_tokens"],
)
def test_another_tenants_previous_response_goes_nowhere(
    upstream: FakeUpstream, path: str, answer: dict[str, object]
) -> None:
    config = route_config(upstream, api="responses", api_key="sk-route-key")
    upstream.script(Json(MADE), Json(answer))
    with running_proxy(config) as proxy:
        made = httpx.post(
            f"{proxy.url}/responses",
            headers={"Authorization": "Bearer sk-maker"},
            json={"model": "gpt-5", "input": "my secret plan"},
            timeout=30,
        )
        assert made.status_code == 200
        body = {"model": "gpt-5", "previous_response_id": "resp_owned", "input": "go on"}
        other = httpx.post(
            f"{proxy.url}{path}",
            headers={"Authorization": "Bearer sk-someone-else"},
            json=body,
            timeout=30,
        )
        own = httpx.post(
            f"{proxy.url}{path}",
            headers={"Authorization": "Bearer sk-maker"},
            json=body,
            timeout=30,
        )
    assert other.status_code == 400
    assert other.json()["error"]["code"] == "previous_response_not_found"
    assert other.json()["error"]["param"] == "previous_response_id"
    assert own.status_code == 200
    assert own.json() == answer
    assert [r.path for r in upstream.requests] == ["/v1/responses", "/v1" + path]
