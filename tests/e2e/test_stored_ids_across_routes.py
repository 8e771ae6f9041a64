"""Behind route keys, a stored answer's id stays with its maker whichever
keyed route the request selects: a Chat route and a Responses route often
share one upstream account (`gpt-*` to chat, the rest to Responses, one
key), and the route of `GET /v1/chat/completions/{id}` is the default one
(or the one its body's `model` names), so each route checks ids of both
kinds."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, running_proxy
from tests.test_responses_native import BASE, message

ALICE = {"Authorization": "Bearer sk-alice-across-routes"}
BOB = {"Authorization": "Bearer sk-bob-across-routes"}
KEY = "sk-shared-account-0123456789"
RESPONSE = {**BASE, "id": "resp_alice_across", "status": "completed", "output": [message("Hi.")]}
COMPLETION = {
    "id": "chatcmpl-alice-across",
    "object": "chat.completion",
    "model": "gpt-4o",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "alice's answer"},
            "finish_reason": "stop",
        }
    ],
}


def config(upstream: FakeUpstream) -> dict[str, Any]:
    return {
        "routes": [
            {"name": "chat", "models": ["gpt-*"], "upstream": upstream.url, "api_key": KEY},
            {
                "name": "responses",
                "models": ["*"],
                "upstream": upstream.url,
                "api": "responses",
                "api_key": KEY,
            },
        ]
    }


@pytest.mark.parametrize(
    ("method", "path", "model"),
    [
        ("GET", "/responses/resp_alice_across", "gpt-4o"),
        ("DELETE", "/responses/resp_alice_across", "gpt-4o"),
        ("GET", "/responses/resp_alice_across/input_items", "gpt-4o"),
        ("GET", "/chat/completions/chatcmpl-alice-across", None),
        ("GET", "/chat/completions/chatcmpl-alice-across/messages", "o3"),
        ("DELETE", "/chat/completions/chatcmpl-alice-across", None),
    ],
)
def test_another_tenants_stored_answer_is_not_reached_through_the_other_route(
    upstream: FakeUpstream, method: str, path: str, model: str | None
) -> None:
    """Regression: only ids of the selected route's own API were checked, so
    Bob read or deleted Alice's stored completion through the default
    Responses route, and her response with a body naming a chat model."""
    with running_proxy(config(upstream)) as proxy:
        upstream.script(Json(RESPONSE), Json(COMPLETION))
        made = [
            httpx.post(f"{proxy.url}/responses", headers=ALICE, json={"model": "o3", "input": "x"}),
            httpx.post(
                f"{proxy.url}/chat/completions",
                headers=ALICE,
                json={
                    "model": "gpt-4o",
                    "store": True,
                    "messages": [{"role": "user", "content": "x"}],
                },
            ),
        ]
        assert [r.status_code for r in made] == [200, 200], [r.text for r in made]
        sent = len(upstream.requests)
        body = {"json": {"model": model}} if model else {}
        upstream.script(Json(RESPONSE if "resp_" in path else COMPLETION))
        foreign = httpx.request(method, proxy.url + path, headers=BOB, **body)
        assert len(upstream.requests) == sent, "nothing goes upstream"
        own = httpx.request("GET", proxy.url + path, headers=ALICE, **body)
    assert foreign.status_code == 404, foreign.text
    assert foreign.json()["error"]["code"] == "response_not_found"
    assert own.status_code == 200, own.text
    assert upstream.requests[-1].path == "/v1" + path
