"""A message of more than one output_text part from a Responses upstream
(a route with `api: responses`): each part keeps its own text and annotations,
streamed and whole, with tagged reasoning split off as before. The real
server, a fake Responses upstream, the openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy
from tests.test_responses_native import BASE, event

KEY = "sk-test-native-parts"


def cite(url: str) -> dict[str, Any]:
    return {"type": "url_citation", "url": url, "title": url, "start_index": 0, "end_index": 1}


def part(text: str, url: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [cite(url)], "logprobs": []}


def item(texts: list[str], status: str = "completed") -> dict[str, Any]:
    content = [part(t, f"https://example.com/{n}") for n, t in enumerate(texts)]
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def two_parts(texts: list[str]) -> bytes:
    out = event("response.created", response={**BASE, "status": "in_progress", "output": []})
    empty = {**item([], "in_progress"), "content": []}
    out += event("response.output_item.added", output_index=0, item=empty)
    for n, text in enumerate(texts):
        at = {"item_id": "msg_1", "output_index": 0, "content_index": n}
        out += event("response.content_part.added", **at, part={**part("", ""), "annotations": []})
        for piece in (text[:4], text[4:]):
            out += event("response.output_text.delta", **at, delta=piece, logprobs=[])
        out += event("response.output_text.done", **at, text=text, logprobs=[])
        out += event(
            "response.content_part.done", **at, part=part(text, f"https://example.com/{n}")
        )
    whole = item(texts)
    out += event("response.output_item.done", output_index=0, item=whole)
    return out + event(
        "response.completed", response={**BASE, "status": "completed", "output": [whole]}
    )


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream, api="responses")) as server:
        yield server


def sdk(proxy: ProxyServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)


def shown(message: Any) -> list[tuple[str, list[str]]]:
    return [(p.text, [a.url for a in p.annotations]) for p in message.content]


URLS = ["https://example.com/0", "https://example.com/1"]


def test_a_streamed_message_keeps_each_parts_text(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(Stream([two_parts(["Paris is ", "the capital."])], done=False))
    with sdk(proxy) as client, client.responses.stream(model="gpt-x", input="Hi") as stream:
        ends = [
            (e.type, e.content_index, e.text if e.type.endswith("text.done") else e.part.text)
            for e in stream
            if e.type in ("response.output_text.done", "response.content_part.done")
        ]
        final = stream.get_final_response()
    assert ends == [
        ("response.output_text.done", 0, "Paris is "),
        ("response.content_part.done", 0, "Paris is "),
        ("response.output_text.done", 1, "the capital."),
        ("response.content_part.done", 1, "the capital."),
    ]
    assert shown(final.output[0]) == [("Paris is ", URLS[:1]), ("the capital.", URLS[1:])]
    assert final.output_text == "Paris is the capital."


def test_a_streamed_message_splits_tagged_reasoning_from_its_first_part(
    proxy: ProxyServer, upstream: FakeUpstream
) -> None:
    upstream.script(Stream([two_parts(["<think>Recall.</think>Paris is ", "the capital."])]))
    with sdk(proxy) as client, client.responses.stream(model="gpt-x", input="Hi") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    reasoning, message = final.output
    assert reasoning.type == "reasoning"
    assert reasoning.summary[0].text == "Recall."
    assert shown(message) == [("Paris is ", URLS[:1]), ("the capital.", URLS[1:])]


def test_a_whole_message_keeps_each_parts_text(proxy: ProxyServer, upstream: FakeUpstream) -> None:
    texts = ["<think>Recall.</think>Paris is ", "the capital."]
    upstream.script(Json({**BASE, "status": "completed", "output": [item(texts)]}))
    with sdk(proxy) as client:
        response = client.responses.create(model="gpt-x", input="Hi")
    reasoning, message = response.output
    assert reasoning.type == "reasoning"
    assert reasoning.summary[0].text == "Recall."
    assert shown(message) == [("Paris is ", URLS[:1]), ("the capital.", URLS[1:])]


def ending_in_a_tag_start(with_text_done: bool) -> bytes:
    """A message whose text ends in `<` (held back as a possible tag start
    until the part ends), with or without `output_text.done`."""
    text = "Use a < b, or x <"
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    out = event("response.created", response={**BASE, "status": "in_progress", "output": []})
    empty = {**item([], "in_progress"), "content": []}
    out += event("response.output_item.added", output_index=0, item=empty)
    out += event("response.content_part.added", **at, part={**part("", ""), "annotations": []})
    out += event("response.output_text.delta", **at, delta=text, logprobs=[])
    if with_text_done:
        out += event("response.output_text.done", **at, text=text, logprobs=[])
    out += event("response.content_part.done", **at, part=part(text, URLS[0]))
    whole = item([text])
    out += event("response.output_item.done", output_index=0, item=whole)
    return out + event(
        "response.completed", response={**BASE, "status": "completed", "output": [whole]}
    )


@pytest.mark.parametrize("with_text_done", [True, False], ids=["text-done", "no-text-done"])
def test_text_held_to_the_end_of_a_part_goes_out_as_its_last_delta(
    proxy: ProxyServer, upstream: FakeUpstream, with_text_done: bool
) -> None:
    upstream.script(Stream([ending_in_a_tag_start(with_text_done)], done=False))
    with sdk(proxy) as client, client.responses.stream(model="gpt-x", input="Hi") as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert deltas == "Use a < b, or x <"
    assert kinds.count("response.output_item.done") == 1
    assert kinds.count("response.output_text.done") == (1 if with_text_done else 0)
    delta_at = max(i for i, k in enumerate(kinds) if k == "response.output_text.delta")
    assert delta_at < kinds.index("response.content_part.done")
    assert final.output_text == "Use a < b, or x <"
