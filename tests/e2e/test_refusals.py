"""A Chat upstream's refusal (the `refusal` field OpenAI models fill instead
of `content` when they decline, e.g. under structured outputs) reaches the
Responses and Messages doors, streamed and whole, through the real server;
on every door the refusal is the stored turn's content (the conversation
API and the inspector's live feed show it, and a later request that sends
the refused turn back finds it)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import openai
import pytest

from tests.harness import (
    FakeUpstream,
    Json,
    ProxyServer,
    Stream,
    route_config,
    running_proxy,
)
from tests.messages_wire import sdk_client
from tests.ui.test_events import _watch

REFUSAL = "I can't help with that."
KEY = "sk-client"
THOUGHT = "This asks for something I must decline."
DOORS = ["chat", "responses", "messages"]


def refusal_chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-r",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def refusal_answer(stream: bool, reasoning: str | None = None) -> Stream | Json:
    if stream:
        first: dict[str, Any] = {"role": "assistant", "content": None, "refusal": ""}
        if reasoning is not None:
            first["reasoning_content"] = reasoning
        return Stream(
            [
                refusal_chunk(first),
                refusal_chunk({"refusal": "I can't "}),
                refusal_chunk({"refusal": "help with that."}),
                refusal_chunk({}, "stop"),
            ]
        )
    message = {"role": "assistant", "content": None, "refusal": REFUSAL}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    return Json(
        {
            "id": "chatcmpl-r",
            "object": "chat.completion",
            "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        }
    )


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_is_a_refusal_part_on_the_responses_door(
    upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(refusal_answer(stream))
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key="sk-client", max_retries=0) as sdk,
    ):
        if stream:
            with sdk.responses.stream(model="m", input="Do it") as events:
                kinds = [event.type for event in events]
                response = events.get_final_response()
            assert kinds.count("response.refusal.delta") == 2
            assert "response.refusal.done" in kinds
        else:
            response = sdk.responses.create(model="m", input="Do it")
    (item,) = response.output
    assert item.type == "message"
    (part,) = item.content
    assert (part.type, getattr(part, "refusal", None)) == ("refusal", REFUSAL)
    assert response.status == "completed"


@pytest.mark.parametrize("stream", [False, True])
def test_a_refusal_is_text_with_stop_reason_refusal_on_the_messages_door(
    upstream: FakeUpstream, stream: bool
) -> None:
    upstream.script(refusal_answer(stream))
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk_client(proxy.base, "sk-client")
        request: Any = {
            "model": "m",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "Do it"}],
        }
        if stream:
            with client.messages.stream(**request) as events:
                message = events.get_final_message()
        else:
            message = client.messages.create(**request)
    assert [(b.type, getattr(b, "text", None)) for b in message.content] == [("text", REFUSAL)]
    assert message.stop_reason == "refusal"


def ask(proxy: ProxyServer, door: str, stream: bool, conversation: str) -> None:
    """One request through `door` with its own SDK, the answer read to its end."""
    headers = {"X-Conversation-Id": conversation}
    if door == "messages":
        client = sdk_client(proxy.base, KEY)
        request: Any = {
            "model": "m",
            "max_tokens": 100,
            "messages": [{"role": "user", "content": "Do it"}],
            "extra_headers": headers,
        }
        if stream:
            with client.messages.stream(**request) as events:
                events.get_final_message()
        else:
            client.messages.create(**request)
        return
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as sdk:
        if door == "responses":
            if stream:
                with sdk.responses.stream(model="m", input="Do it", extra_headers=headers) as ev:
                    ev.get_final_response()
            else:
                sdk.responses.create(model="m", input="Do it", extra_headers=headers)
            return
        messages: Any = [{"role": "user", "content": "Do it"}]
        if stream:
            with sdk.chat.completions.create(
                model="m", messages=messages, stream=True, extra_headers=headers
            ) as chunks:
                for _ in chunks:
                    pass
        else:
            sdk.chat.completions.create(model="m", messages=messages, extra_headers=headers)


def stored_turns(proxy: ProxyServer, conversation: str) -> list[Any]:
    response = httpx.get(
        f"{proxy.url}/conversations/{conversation}", headers={"Authorization": f"Bearer {KEY}"}
    )
    assert response.status_code == 200, response.text
    turns: list[Any] = response.json()["turns"]
    return turns


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("door", DOORS)
def test_a_refusal_is_the_stored_turns_content(
    upstream: FakeUpstream, door: str, stream: bool
) -> None:
    upstream.script(refusal_answer(stream, reasoning=THOUGHT))
    conversation = f"refused-{door}-{stream}"
    with running_proxy(route_config(upstream)) as proxy:
        ask(proxy, door, stream, conversation)
        (turn,) = stored_turns(proxy, conversation)
    assert turn["content"] == REFUSAL
    assert [b["thought"] for b in turn["blocks"]] == [THOUGHT]
    assert turn["complete"] is True


def test_a_refused_turn_sent_back_finds_its_reasoning_in_the_store(
    upstream: FakeUpstream,
) -> None:
    """A chat client that appends the message it got (content null, the
    refusal in `refusal`), and a Responses client that keeps the message
    item but not the reasoning item: both get the refused turn's reasoning
    re-injected, found by the refusal's text."""
    config = route_config(upstream, reasoning={"include_in_context": True})
    with (
        running_proxy(config) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as sdk,
    ):
        upstream.script(refusal_answer(False, reasoning=THOUGHT))
        first = sdk.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "Do it"}]
        )
        refused: Any = first.choices[0].message.model_dump(exclude_none=True)
        refused.pop("reasoning_content", None)  # what most clients drop
        assert refused == {"role": "assistant", "refusal": REFUSAL}
        sdk.chat.completions.create(
            model="m",
            messages=[
                {"role": "user", "content": "Do it"},
                refused,
                {"role": "user", "content": "Why not?"},
            ],
        )
        assert upstream.chat_requests()[1].json["messages"][1]["reasoning_content"] == THOUGHT

        upstream.script(refusal_answer(True, reasoning=THOUGHT))
        with sdk.responses.stream(model="m", input="Do it") as events:
            response = events.get_final_response()
        message = next(item for item in response.output if item.type == "message")
        sdk.responses.create(
            model="m",
            input=[
                {"role": "user", "content": "Do it"},
                message.model_dump(exclude_none=True),  # type: ignore[list-item]
                {"role": "user", "content": "Why not?"},
            ],
        )
        sent = upstream.chat_requests()[3].json["messages"][1]
        assert (sent["content"], sent["reasoning_content"]) == (REFUSAL, THOUGHT)
        # previous_response_id sends the refusal back as the assistant's text too
        sdk.responses.create(model="m", previous_response_id=response.id, input="Why not?")
        sent = upstream.chat_requests()[4].json["messages"][1]
        assert sent["content"] == REFUSAL


def test_the_live_feed_shows_a_streamed_refusal(upstream: FakeUpstream) -> None:
    seen: list[dict[str, Any]] = []
    with running_proxy(route_config(upstream)) as proxy:

        async def scenario() -> None:
            ready = asyncio.Event()
            task = asyncio.ensure_future(_watch(proxy.base, KEY, seen, ready))
            try:
                await asyncio.wait_for(ready.wait(), 5)
                upstream.script(refusal_answer(True, reasoning=THOUGHT))
                await asyncio.to_thread(ask, proxy, "chat", True, "refused-live")
                deadline = time.monotonic() + 5
                while not any(e["type"] == "turn_end" for e in seen):
                    assert time.monotonic() < deadline, seen
                    await asyncio.sleep(0.02)
            finally:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)

        asyncio.run(scenario())
    # the feed batches what arrives together: pieces of one kind may come as one or several
    deltas: list[tuple[str, str]] = []
    for e in seen:
        if e["type"] != "delta":
            continue
        if deltas and deltas[-1][0] == e["kind"]:
            deltas[-1] = (e["kind"], deltas[-1][1] + e["text"])
        else:
            deltas.append((e["kind"], e["text"]))
    assert deltas == [("reasoning", THOUGHT), ("content", REFUSAL)]
