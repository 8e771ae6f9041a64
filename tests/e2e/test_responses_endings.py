"""How a Responses stream from a chat upstream ends when the answer is
not whole, end to end (the real server, a fake chat upstream, the openai
SDK): a stream that brings no answer at all fails, as the whole answer
does, and a failed Response keeps the items the client was sent, in the
event and in the store."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.responses import Response

from tests.casefiles import WEATHER_RESPONSES_TOOL, chunk
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy

KEY = "sk-test-endings"
USAGE = {
    "id": "c",
    "object": "chat.completion.chunk",
    "created": 1,
    "model": "m",
    "choices": [],
    "usage": {"prompt_tokens": 1, "completion_tokens": 0, "total_tokens": 1},
}


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream, timeouts={"idle": 0.5, "connect": 2})) as server:
        yield server


@pytest.fixture
def sdk(proxy: ProxyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client:
        yield client


def streamed(sdk: openai.OpenAI, **body: Any) -> list[Any]:
    """Every event of a streamed request, as the SDK reads them."""
    with sdk.responses.create(model="m", input="Hi", stream=True, **body) as events:
        return list(events)


# -- no answer at all ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "chunks",
    [[USAGE], [chunk({"role": "assistant"})], [chunk({"role": "assistant"}), USAGE]],
    ids=["a usage chunk alone", "a role alone", "a role and usage"],
)
def test_a_stream_with_no_answer_fails_as_an_empty_answer(
    sdk: openai.OpenAI, upstream: FakeUpstream, chunks: list[Any]
) -> None:
    """It used to be `response.completed` with no output: a silent empty
    answer, where the same answer whole is a failed Response."""
    upstream.script(Stream(chunks))
    events = streamed(sdk)
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.failed",
    ]
    failed = events[-1].response
    assert failed.status == "failed"
    assert failed.output == []
    assert failed.error is not None
    assert failed.error.code == "server_error"
    assert failed.error.message.endswith("(upstream_empty_response)")
    assert sdk.responses.retrieve(failed.id).status == "failed"


def test_a_whole_answer_with_no_content_and_no_finish_fails_alike(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    body = {
        "id": "x",
        "object": "chat.completion",
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant"}, "finish_reason": None}],
    }
    upstream.script(Json(body))
    response = sdk.responses.create(model="m", input="Hi")
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.message.endswith("(upstream_empty_response)")


def test_an_empty_answer_the_upstream_finished_is_still_completed(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    """finish_reason "stop" with no text: the model answered nothing, and
    said so; that is an answer (empty), not a failure."""
    upstream.script(Stream([chunk({"role": "assistant", "content": ""}), chunk({}, "stop")]))
    assert streamed(sdk)[-1].type == "response.completed"


# -- a failure keeps what was sent ----------------------------------------------------------


REASONED = [
    chunk({"role": "assistant", "reasoning_content": "Think first."}),
    chunk({"content": "Hel"}),
    chunk({"content": "lo"}),
    chunk({}, "stop"),
]


@pytest.mark.parametrize(
    "stream",
    [Stream(REASONED, cut_after=3, done=False), Stream(REASONED, hang_after=3)],
    ids=["cut", "idle timeout"],
)
def test_a_failed_stream_keeps_the_items_it_sent(
    sdk: openai.OpenAI, upstream: FakeUpstream, stream: Stream
) -> None:
    """The reasoning item ended; the message was open: it stays, as it
    stood, `incomplete`. The stored Response is the same."""
    upstream.script(stream)
    events = streamed(sdk)
    assert events[-1].type == "response.failed"
    assert events[-2].type == "response.output_text.delta"  # no done events for what was open
    failed: Response = events[-1].response
    assert [(i.type, i.status) for i in failed.output] == [  # type: ignore[union-attr]
        ("reasoning", None),
        ("message", "incomplete"),
    ]
    assert failed.output[0].summary[0].text == "Think first."  # type: ignore[union-attr]
    assert failed.output_text == "Hello"
    stored = sdk.responses.retrieve(failed.id)
    assert stored.status == "failed"
    assert stored.output == failed.output


def test_a_call_open_when_the_stream_fails_stays_incomplete(
    sdk: openai.OpenAI, upstream: FakeUpstream
) -> None:
    call = {
        "index": 0,
        "id": "call_paris",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": '},
    }
    upstream.script(
        Stream(
            [chunk({"role": "assistant", "tool_calls": [call]}), chunk({}, "tool_calls")],
            cut_after=1,
            done=False,
        )
    )
    tool: Any = WEATHER_RESPONSES_TOOL
    failed = streamed(sdk, tools=[tool])[-1].response
    (item,) = failed.output
    assert (item.type, item.status, item.call_id) == ("function_call", "incomplete", "call_paris")
    assert item.arguments == '{"city": '
    assert sdk.responses.retrieve(failed.id).output == failed.output
