"""Behind a route key, a stored answer's id stays with its maker however the
path spells the endpoint's name: servers that route without case (ASP.NET,
as Azure's) read `/v1/Chat/Completions/{id}` and `/v1/RESPONSES/{id}` as
the stored answer itself."""

from __future__ import annotations

import httpx
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

ALICE = {"Authorization": "Bearer sk-alice-any-case"}
BOB = {"Authorization": "Bearer sk-bob-any-case"}
ROUTE_KEY = "sk-route-any-case-0123456789"


def test_another_tenants_stored_completion_is_not_reached_in_another_case(
    upstream: FakeUpstream,
) -> None:
    """Regression: the path was compared with `chat/completions` as written,
    so any tenant read, changed or deleted another's stored completion as
    `/v1/Chat/Completions/{id}`: it went upstream under the route's key."""
    stored = {
        "id": "chatcmpl-cased-1",
        "object": "chat.completion",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "ok"},
                "finish_reason": "stop",
            }
        ],
    }
    with running_proxy(route_config(upstream, api_key=ROUTE_KEY)) as proxy:
        upstream.script(Json(stored))
        made = httpx.post(
            f"{proxy.url}/chat/completions",
            headers=ALICE,
            json={"model": "m", "store": True, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert made.status_code == 200, made.text
        sent = len(upstream.requests)
        foreign = [
            httpx.get(f"{proxy.url}/Chat/Completions/chatcmpl-cased-1", headers=BOB),
            httpx.get(f"{proxy.url}/CHAT/completions/chatcmpl-cased-1/messages", headers=BOB),
            httpx.post(
                f"{proxy.url}/chat/COMPLETIONS/chatcmpl-cased-1",
                headers=BOB,
                json={"metadata": {"x": "y"}},
            ),
            httpx.delete(f"{proxy.url}/Chat//Completions/chatcmpl-cased-1", headers=BOB),
        ]
        assert len(upstream.requests) == sent
        upstream.script(Json(stored))
        own = httpx.get(f"{proxy.url}/Chat/Completions/chatcmpl-cased-1", headers=ALICE)
    assert [r.status_code for r in foreign] == [404] * 4
    assert {r.json()["error"]["code"] for r in foreign} == {"response_not_found"}
    assert own.status_code == 200
    assert upstream.requests[-1].path.endswith("/Chat/Completions/chatcmpl-cased-1")


@pytest.mark.parametrize("path", ["/Responses/resp_cased_1", "/RESPONSES/resp_cased_1/input_items"])
def test_another_tenants_stored_response_is_not_reached_in_another_case(
    upstream: FakeUpstream, path: str
) -> None:
    made = {
        "id": "resp_cased_1",
        "object": "response",
        "status": "completed",
        "model": "m",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "ok", "annotations": []}],
            }
        ],
    }
    config = route_config(upstream, api="responses", api_key=ROUTE_KEY)
    with running_proxy(config) as proxy:
        upstream.script(Json(made))
        first = httpx.post(
            f"{proxy.url}/responses", headers=ALICE, json={"model": "m", "input": "hi"}
        )
        assert first.status_code == 200, first.text
        sent = len(upstream.requests)
        foreign = httpx.get(f"{proxy.url}{path}", headers=BOB)
        assert len(upstream.requests) == sent
        upstream.script(Json(made if "input_items" not in path else {"data": []}))
        own = httpx.get(f"{proxy.url}{path}", headers=ALICE)
    assert foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "response_not_found"
    assert own.status_code == 200
