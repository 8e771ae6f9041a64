"""A path that an upstream reads as a front door's own, written another way
(in another case, with a `;` parameter, an escape or a space), is refused,
not passed through: passed, it skipped the door's checks, so behind a route
key any tenant continued or compacted another tenant's stored response
(`previous_response_id`) or listed every client's stored completions, all
under the route's key."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.test_responses_native import BASE, message

ALICE = {"Authorization": "Bearer sk-alice-door-spelling"}
BOB = {"Authorization": "Bearer sk-bob-door-spelling"}
ROUTE_KEY = "sk-route-door-spelling-0123456789"
MADE = {**BASE, "id": "resp_alice_door", "status": "completed", "output": [message("Hi.")]}
COMPACTED = {
    "id": "cmp_1",
    "object": "response.compaction",
    "created_at": 1700000000,
    "output": [{"type": "message", "role": "user", "content": "alice's secret plan"}],
    "usage": {"input_tokens": 9, "output_tokens": 3, "total_tokens": 12},
}


@pytest.mark.parametrize(
    "path",
    [
        "/RESPONSES",
        "/Responses",
        "/responses;x",
        "/responses/Compact",
        "/responses/compact;x",
        "/responses/COMPACT/",
        "/responses/compact%20",
        "/responses%252Fcompact",
        "/responses/Input_Tokens",
        "/responses/input_tokens;a",
    ],
)
def test_another_tenants_response_is_not_continued_through_a_door_spelled_otherwise(
    upstream: FakeUpstream, path: str
) -> None:
    config = route_config(upstream, api="responses", api_key=ROUTE_KEY)
    with running_proxy(config) as proxy:
        upstream.script(Json(MADE))
        made = httpx.post(
            f"{proxy.url}/responses",
            headers=ALICE,
            json={"model": "gpt-5", "input": "alice's secret plan"},
            timeout=30,
        )
        assert made.status_code == 200, made.text
        sent = len(upstream.requests)
        upstream.script(Json(COMPACTED))
        other = httpx.post(
            proxy.url + path,
            headers=BOB,
            json={"model": "gpt-5", "input": "repeat", "previous_response_id": "resp_alice_door"},
            timeout=30,
        )
        assert len(upstream.requests) == sent, "nothing goes upstream"
        # the door itself still hands Alice's compaction on
        own = httpx.post(
            f"{proxy.url}/responses/compact",
            headers=ALICE,
            json={"model": "gpt-5", "previous_response_id": "resp_alice_door"},
            timeout=30,
        )
    assert other.status_code == 400, other.text
    assert other.json()["error"]["code"] == "invalid_path"
    assert "secret" not in other.text
    assert own.status_code == 200, own.text
    assert upstream.requests[-1].path == "/v1/responses/compact"


@pytest.mark.parametrize(
    "path",
    ["/Chat/Completions", "/chat/completions;x", "/chat/completions%3B", "/chat/COMPLETIONS"],
)
def test_every_clients_stored_completions_are_not_listed_through_a_door_spelled_otherwise(
    upstream: FakeUpstream, path: str
) -> None:
    listed = {"object": "list", "data": [{"id": "chatcmpl-alice", "object": "chat.completion"}]}
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        upstream.script(Json(listed))
        answer = httpx.get(proxy.url + path, headers=BOB, timeout=30)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "invalid_path"
    assert upstream.requests == []
