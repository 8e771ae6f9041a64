"""Chat upstreams that end an answer with a finish_reason of their own get
Anthropic's stop_reason for it, streamed or not: Hugging Face TGI's
`stop_sequence` (one of the request's `stop` strings matched) is
`stop_sequence`, the sequence named when the request has one alone (TGI
does not say which); Mistral's `model_length` (the answer was cut at the
model's context window) is `model_context_window_exceeded`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import sdk_client

ASK = [{"role": "user", "content": "Count to ten."}]
TEXT = "1, 2, 3, 4, "


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "c", "object": "chat.completion.chunk", "model": "up", "choices": [choice]}


def _answer(finish: str, streamed: bool) -> Json | Stream:
    if streamed:
        return Stream([_chunk({"role": "assistant", "content": TEXT}), _chunk({}, finish)])
    message = {"role": "assistant", "content": TEXT}
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return Json({"id": "c", "object": "chat.completion", "model": "up", "choices": [choice]})


@pytest.mark.parametrize("streamed", [False, True], ids=["whole", "streamed"])
@pytest.mark.parametrize(
    ("finish", "stops", "reason", "named"),
    [
        ("stop_sequence", ["5"], "stop_sequence", "5"),
        ("stop_sequence", ["5", "five"], "stop_sequence", None),
        ("model_length", [], "model_context_window_exceeded", None),
    ],
    ids=["tgi-one-stop", "tgi-two-stops", "mistral-model-length"],
)
def test_another_servers_finish_reason_is_anthropics_stop_reason(
    upstream: FakeUpstream,
    streamed: bool,
    finish: str,
    stops: list[str],
    reason: str,
    named: str | None,
) -> None:
    upstream.script(_answer(finish, streamed))
    with running_proxy(route_config(upstream)) as proxy:
        sdk = sdk_client(proxy.base, "sk-client")
        asked: dict[str, Any] = {"model": "m", "max_tokens": 50, "messages": ASK}
        if stops:
            asked["stop_sequences"] = stops
        if streamed:
            with sdk.messages.stream(**asked) as stream:
                message = stream.get_final_message()
        else:
            message = sdk.messages.create(**asked)
    assert upstream.chat_requests()[0].json.get("stop") == (stops or None)
    assert message.content[0].text == TEXT  # type: ignore[union-attr]
    assert message.stop_reason == reason
    assert message.stop_sequence == named
