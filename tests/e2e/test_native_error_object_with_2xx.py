"""A Responses or Messages upstream (`api: responses`, `api: messages`) that
answers with a 2xx whose body is an error object (OpenAI's `{"error":
{...}}`, Anthropic's `{"type": "error", ...}`, as gateways do) gets that
error's status, in the door's shape, with the upstream's headers; no turn is
stored and the upstream error is counted, as on a chat route. (It went to
the client as a 200 and was stored as a complete, empty turn.)"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.harness import FakeUpstream, Json, running_proxy

KEY = {"Authorization": "Bearer sk-native-2xx", "anthropic-version": "2023-06-01"}
OPENAI_ERROR = {
    "error": {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}
}
ANTHROPIC_ERROR = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
RESPONSE = {
    "id": "resp_up1",
    "object": "response",
    "status": "completed",
    "model": "m",
    "output": [
        {
            "id": "msg_up1",
            "type": "message",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hello", "annotations": []}],
        }
    ],
}
MESSAGE = {
    "id": "msg_up1",
    "type": "message",
    "role": "assistant",
    "model": "m",
    "content": [{"type": "text", "text": "hello"}],
    "stop_reason": "end_turn",
    "usage": {"input_tokens": 1, "output_tokens": 1},
}
# door -> (path, model, request body)
DOORS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "responses": ("/v1/responses", "native-responses", {"input": "hi"}),
    "messages": (
        "/v1/messages",
        "native-messages",
        {"max_tokens": 16, "messages": [{"role": "user", "content": "hi"}]},
    ),
}


@pytest.fixture(scope="module")
def proxy_base(upstream_server: FakeUpstream) -> Iterator[str]:
    routes = [
        {
            "name": f"native-{api}",
            "models": [f"native-{api}"],
            "upstream": upstream_server.url,
            "api": api,
        }
        for api in ("responses", "messages")
    ]
    with running_proxy({"routes": routes}) as proxy:
        yield proxy.base


def post(base: str, door: str, conversation: str, streamed: bool) -> httpx.Response:
    path, model, body = DOORS[door]
    headers = {**KEY, "X-Conversation-Id": conversation}
    return httpx.post(
        base + path,
        json={"model": model, "stream": streamed, **body},
        headers=headers,
        timeout=20,
    )


def turns(base: str, conversation: str) -> list[Any]:
    r = httpx.get(f"{base}/v1/conversations/{conversation}", headers=KEY, timeout=10)
    return r.json()["turns"] if r.status_code == 200 else []


def status_errors(base: str, route: str) -> float:
    name = f'reasoning_proxy_upstream_errors_total{{kind="status",route="{route}"}}'
    for line in httpx.get(base + "/metrics", timeout=10).text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


@pytest.mark.parametrize("streamed", [False, True])
@pytest.mark.parametrize(
    ("door", "error", "status"),
    [
        ("responses", OPENAI_ERROR, 429),
        ("responses", ANTHROPIC_ERROR, 503),
        ("messages", ANTHROPIC_ERROR, 503),
        ("messages", OPENAI_ERROR, 429),
    ],
)
def test_an_error_object_with_a_200_gets_its_status(
    upstream: FakeUpstream,
    proxy_base: str,
    door: str,
    error: dict[str, Any],
    status: int,
    streamed: bool,
) -> None:
    route = DOORS[door][1]
    before = status_errors(proxy_base, route)
    upstream.script(Json(error, headers={"X-Request-Id": "req_up1", "Retry-After": "7"}))
    conversation = f"error-2xx-{door}-{status}-{streamed}"
    r = post(proxy_base, door, conversation, streamed)
    assert r.status_code == status, r.text
    assert r.headers["x-request-id"] == "req_up1"
    assert r.headers["retry-after"] == "7"
    data = r.json()
    if door == "messages":
        assert data["type"] == "error"
        assert data["error"]["message"] in ("Overloaded", "Rate limit reached")
    else:
        assert data["error"]["message"] in ("Overloaded", "Rate limit reached")
    assert turns(proxy_base, conversation) == []
    assert status_errors(proxy_base, route) == before + 1


@pytest.mark.parametrize(("door", "answer"), [("responses", RESPONSE), ("messages", MESSAGE)])
def test_an_answer_with_a_200_is_still_the_answer(
    upstream: FakeUpstream, proxy_base: str, door: str, answer: dict[str, Any]
) -> None:
    upstream.script(Json(answer))
    conversation = f"answer-2xx-{door}"
    r = post(proxy_base, door, conversation, False)
    assert r.status_code == 200, r.text
    [turn] = turns(proxy_base, conversation)
    assert turn["complete"] is True
    assert turn["content"] == "hello"


def test_a_failed_response_object_is_not_taken_for_an_error_object(
    upstream: FakeUpstream, proxy_base: str
) -> None:
    failed = {**RESPONSE, "status": "failed", "error": {"code": "server_error", "message": "x"}}
    upstream.script(Json(failed))
    r = post(proxy_base, "responses", "failed-response-2xx", False)
    assert r.status_code == 200, r.text
    assert r.json()["status"] == "failed"
