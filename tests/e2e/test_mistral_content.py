"""Mistral's reasoning models answer with `content` as a list of thinking
and text chunks (streamed and whole). Through each front door and its SDK
(real sockets) the answer is the text, the reasoning is reasoning, and the
turn is stored with both."""

from __future__ import annotations

from typing import Any

import httpx
import openai

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.messages_wire import sdk_client

KEY = "sk-test-alice"
THINKING = {"type": "thinking", "thinking": [{"type": "text", "text": "Two and two."}]}
TEXT = {"type": "text", "text": "It is 4."}
USER: Any = [{"role": "user", "content": "2+2?"}]


def stream() -> Stream:
    return Stream(
        [
            chunk({"role": "assistant", "content": [THINKING]}),
            chunk({"content": [TEXT]}),
            chunk({}, "stop"),
        ]
    )


def whole() -> Json:
    message = {"role": "assistant", "content": [THINKING, TEXT]}
    choice = {"index": 0, "message": message, "finish_reason": "stop"}
    return Json({"id": "c", "object": "chat.completion", "model": "m", "choices": [choice]})


def test_every_door_separates_mistrals_chunks(upstream: FakeUpstream) -> None:
    upstream.script(*[stream(), whole()] * 4)
    with running_proxy(route_config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        with client.chat.completions.stream(model="m", messages=USER) as s:
            streamed = s.get_final_completion().choices[0].message
        created = client.chat.completions.create(model="m", messages=USER).choices[0].message
        for message in (streamed, created):
            assert message.content == "It is 4."
            assert getattr(message, "reasoning_content", None) == "Two and two."
        anthropic = sdk_client(proxy.base, KEY)
        with anthropic.messages.stream(model="m", max_tokens=50, messages=USER) as m:
            answers = [m.get_final_message()]
        answers.append(anthropic.messages.create(model="m", max_tokens=50, messages=USER))
        for answer in answers:
            blocks = [
                (b.type, getattr(b, "thinking", "") or getattr(b, "text", ""))
                for b in answer.content
            ]
            assert blocks == [("thinking", "Two and two."), ("text", "It is 4.")]
        with client.responses.stream(model="m", input="2+2?") as r:
            responses = [r.get_final_response()]
        responses.append(client.responses.create(model="m", input="2+2?"))
        for response in responses:
            assert response.output_text == "It is 4."
            assert [i.type for i in response.output] == ["reasoning", "message"]
        client.close()
        headers = {"authorization": f"Bearer {KEY}", "x-conversation-id": "mistral-1"}
        for body in ({"stream": True}, {}):
            httpx.post(
                f"{proxy.url}/chat/completions",
                headers=headers,
                json={"model": "m", "messages": USER, **body},
                timeout=10,
            ).raise_for_status()
        stored = httpx.get(f"{proxy.url}/conversations/mistral-1", headers=headers).json()
    assert len(stored["turns"]) == 2
    for turn in stored["turns"]:
        assert turn["content"] == "It is 4."
        assert [b["thought"] for b in turn["blocks"]] == ["Two and two."]
