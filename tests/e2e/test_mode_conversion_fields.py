"""An upstream that answers in the other mode than the request asked (a
whole completion to a streamed request, a stream to a whole one) is
converted, and the conversion loses no field the `openai` SDK's types know:
each choice's `logprobs`, `system_fingerprint`, `service_tier`. The usage
comes in a chunk of its own (no choices) only when the request asked with
`stream_options.include_usage`; else it rides on the last choice's chunk, so
a client that reads `chunk.choices[0]` of every chunk (the README's own
example) does not fail. Through real sockets, with the `openai` SDK."""

from __future__ import annotations

from typing import Any

import openai

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

MESSAGES: Any = [{"role": "user", "content": "Say hello."}]
USAGE = {
    "prompt_tokens": 3,
    "completion_tokens": 4,
    "total_tokens": 7,
    "completion_tokens_details": {"reasoning_tokens": 2},
}


def logprobs(*tokens: str) -> dict[str, Any]:
    return {
        "content": [
            {"token": t, "logprob": -0.25, "bytes": list(t.encode()), "top_logprobs": []}
            for t in tokens
        ],
        "refusal": None,
    }


WHOLE = {
    "id": "chatcmpl-w",
    "object": "chat.completion",
    "created": 1,
    "model": "m",
    "system_fingerprint": "fp_44709d6fcb",
    "service_tier": "priority",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello", "reasoning_content": "Greet."},
            "logprobs": logprobs("Hel", "lo"),
            "finish_reason": "stop",
        }
    ],
    "usage": USAGE,
}


def chunk(delta: dict[str, Any], finish: str | None = None, **choice: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-s",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "system_fingerprint": "fp_44709d6fcb",
        "service_tier": "priority",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish, **choice}],
    }


STREAM = [
    chunk({"role": "assistant", "content": "", "reasoning_content": "Greet."}),
    chunk({"content": "Hel"}, logprobs=logprobs("Hel")),
    chunk({"content": "lo"}, logprobs=logprobs("lo")),
    chunk({}, "stop"),
    {"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 1, "model": "m",
     "choices": [], "usage": USAGE},
]  # fmt: skip


def test_a_whole_answer_streamed_keeps_its_fields(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="k", max_retries=0)
        upstream.script(Json(WHOLE))
        chunks = list(
            client.chat.completions.create(model="m", messages=MESSAGES, stream=True, logprobs=True)
        )
        upstream.script(Json(WHOLE))
        asked = list(
            client.chat.completions.create(
                model="m",
                messages=MESSAGES,
                stream=True,
                logprobs=True,
                stream_options={"include_usage": True},
            )
        )
    # not asked for: no chunk without choices, the usage on the last one
    assert all(c.choices for c in chunks)
    (only,) = chunks
    assert only.usage is not None
    assert only.usage.model_dump(exclude_none=True) == USAGE
    # asked for: the usage chunk of OpenAI's spec, after the choices
    assert [len(c.choices) for c in asked] == [1, 0]
    assert asked[0].usage is None
    assert asked[1].usage is not None
    assert asked[1].usage.total_tokens == 7
    for got in (only, asked[0]):
        assert (got.system_fingerprint, got.service_tier) == ("fp_44709d6fcb", "priority")
        choice = got.choices[0]
        assert choice.delta.content == "Hello"
        assert (choice.delta.model_extra or {})["reasoning_content"] == "Greet."
        assert choice.logprobs is not None
        assert choice.logprobs.content is not None
        assert [t.token for t in choice.logprobs.content] == ["Hel", "lo"]


def test_a_stream_answered_whole_keeps_its_fields(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="k", max_retries=0)
        upstream.script(Stream(STREAM))
        reply = client.chat.completions.create(model="m", messages=MESSAGES, logprobs=True)
    assert (reply.system_fingerprint, reply.service_tier) == ("fp_44709d6fcb", "priority")
    (choice,) = reply.choices
    assert choice.message.content == "Hello"
    assert (choice.message.model_extra or {})["reasoning_content"] == "Greet."
    assert choice.logprobs is not None
    assert choice.logprobs.content is not None
    assert [t.token for t in choice.logprobs.content] == ["Hel", "lo"]
    assert choice.logprobs.refusal is None
    assert reply.usage is not None
    assert reply.usage.model_dump(exclude_none=True) == USAGE


def piece(**delta: Any) -> dict[str, Any]:
    return chunk(delta)


def test_a_stream_answered_whole_puts_reasoning_items_together(upstream: FakeUpstream) -> None:
    """OpenRouter streams a `reasoning_details` item in pieces under one
    `index`, LiteLLM a thinking block's text and then its signature: the
    whole message holds each item once, whole, as the upstream's own whole
    answer would (and as the `openai` SDK's stream helper adds them up)."""

    def text(t: str) -> dict[str, Any]:
        return {"type": "reasoning.text", "text": t, "format": "unknown", "index": 0}

    encrypted = {"type": "reasoning.encrypted", "data": "gAAA", "format": "openai", "index": 1}
    openrouter = [
        piece(role="assistant", content="", reasoning="Th", reasoning_details=[text("Th")]),
        piece(content="", reasoning="ink", reasoning_details=[text("ink")]),
        piece(content="", reasoning_details=[encrypted]),
        piece(content="Hello"),
        chunk({}, "stop"),
    ]

    def thinking(t: str, signature: str = "") -> dict[str, Any]:
        return {"type": "thinking", "thinking": t, "signature": signature}

    litellm = [
        piece(role="assistant", reasoning_content="Th", thinking_blocks=[thinking("Th")]),
        piece(reasoning_content="ink", thinking_blocks=[thinking("ink")]),
        piece(thinking_blocks=[thinking("", "EqQBCkgIARAB")]),
        piece(thinking_blocks=[{"type": "redacted_thinking", "data": "EmwKAhgB"}]),
        piece(content="Hello"),
        chunk({}, "stop"),
    ]
    with running_proxy(route_config(upstream)) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="k", max_retries=0)
        upstream.script(Stream(openrouter))
        details = client.chat.completions.create(model="m", messages=MESSAGES)
        upstream.script(Stream(openrouter))
        with client.chat.completions.stream(model="m", messages=MESSAGES) as stream:
            for _ in stream:
                pass
            helper = stream.get_final_completion()
        upstream.script(Stream(litellm))
        blocks = client.chat.completions.create(model="m", messages=MESSAGES)
    message = details.choices[0].message
    assert message.content == "Hello"
    assert (message.model_extra or {})["reasoning_content"] == "Think"
    assert (message.model_extra or {})["reasoning_details"] == [
        text("Think"),
        encrypted,
    ]
    streamed = (helper.choices[0].message.model_extra or {})["reasoning_details"]
    assert [(d["type"], d.get("text"), d["index"]) for d in streamed] == [
        ("reasoning.text", "Think", 0),
        ("reasoning.encrypted", None, 1),
    ]
    message = blocks.choices[0].message
    assert message.content == "Hello"
    assert (message.model_extra or {})["thinking_blocks"] == [
        thinking("Think", "EqQBCkgIARAB"),
        {"type": "redacted_thinking", "data": "EmwKAhgB"},
    ]
