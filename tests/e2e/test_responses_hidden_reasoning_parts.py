"""Reasoning a Responses upstream streams as `reasoning_text` content parts
(gpt-oss, vLLM) stays with the proxy when the settings keep reasoning from
the client: no event of those parts reaches it, `content_part.done` (which
repeats the whole text) included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, ProxyServer, Stream, route_config, running_proxy

SECRET = "The user wants a greeting; I will say hi."
REASONING = {"id": "rs_1", "type": "reasoning", "summary": [], "content": []}
PART = {"type": "reasoning_text", "text": ""}
MESSAGE = {"id": "msg_1", "type": "message", "role": "assistant", "status": "in_progress"}
OPEN_MESSAGE = {**MESSAGE, "content": []}
TEXT = {"type": "output_text", "text": "", "annotations": []}


def _response(status: str, output: list[Any]) -> dict[str, Any]:
    return {
        "id": "resp_up",
        "object": "response",
        "created_at": 1,
        "status": status,
        "model": "gpt-oss-120b",
        "output": output,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def reasoning_text_stream() -> Stream:
    """A reasoning item whose text comes as a reasoning_text part, then an answer."""
    done_reasoning = {**REASONING, "content": [{**PART, "text": SECRET}]}
    done_message = {**MESSAGE, "status": "completed", "content": [{**TEXT, "text": "Hi!"}]}
    at = {"item_id": "rs_1", "output_index": 0, "content_index": 0}
    answer_at = {"item_id": "msg_1", "output_index": 1, "content_index": 0}
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": _response("in_progress", [])},
        {"type": "response.output_item.added", "output_index": 0, "item": REASONING},
        {"type": "response.content_part.added", **at, "part": PART},
        {"type": "response.reasoning_text.delta", **at, "delta": SECRET},
        {"type": "response.reasoning_text.done", **at, "text": SECRET},
        {"type": "response.content_part.done", **at, "part": {**PART, "text": SECRET}},
        {"type": "response.output_item.done", "output_index": 0, "item": done_reasoning},
        {"type": "response.output_item.added", "output_index": 1, "item": OPEN_MESSAGE},
        {"type": "response.content_part.added", **answer_at, "part": TEXT},
        {"type": "response.output_text.delta", **answer_at, "delta": "Hi!", "logprobs": []},
        {"type": "response.output_text.done", **answer_at, "text": "Hi!", "logprobs": []},
        {"type": "response.content_part.done", **answer_at, "part": {**TEXT, "text": "Hi!"}},
        {"type": "response.output_item.done", "output_index": 1, "item": done_message},
        {
            "type": "response.completed",
            "response": _response("completed", [done_reasoning, done_message]),
        },
    ]
    return Stream([{**e, "sequence_number": n} for n, e in enumerate(events)], done=False)


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream, api="responses")) as server:
        yield server


@pytest.mark.parametrize(
    "header",
    [{"X-Reasoning-Include-In-Response": "false"}, {"X-Reasoning-Output": "none"}],
    ids=["include-false", "output-none"],
)
def test_hidden_reasoning_text_parts_send_no_event(
    proxy: ProxyServer, upstream: FakeUpstream, header: dict[str, str]
) -> None:
    upstream.script(reasoning_text_stream())
    client = openai.OpenAI(
        base_url=proxy.url, api_key="sk-hidden", max_retries=0, default_headers=header
    )
    with client, client.responses.stream(model="gpt-oss-120b", input="Hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    assert final.output_text == "Hi!"
    assert not [e.type for e in events if SECRET in e.model_dump_json(warnings=False)]
    kinds = [(e.type, getattr(e, "output_index", None)) for e in events]
    assert ("response.content_part.added", 0) not in kinds
    assert ("response.content_part.done", 0) not in kinds
    # the answer's own parts still go out
    assert ("response.content_part.done", 1) in kinds


def test_shown_reasoning_text_parts_pass_as_they_came(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(reasoning_text_stream())
    client = openai.OpenAI(base_url=proxy.url, api_key="sk-hidden", max_retries=0)
    with client, client.responses.stream(model="gpt-oss-120b", input="Hi") as stream:
        events = list(stream)
    done = [e for e in events if e.type == "response.content_part.done" and e.output_index == 0]
    assert [e.part.model_dump() for e in done] == [{**PART, "text": SECRET}]
