"""The Responses encoder alone (sans-IO): normalized chat SSE in, Responses
events out, checked against the openai SDK's own event and Response models;
the same bytes whole, byte by byte, with trailing data and at any split."""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.doors.responses.encoder import ENDED, ResponsesEncoder
from proxy.doors.responses.objects import Echo
from proxy.doors.responses.request import read_options, translate
from proxy.reasoning.blocks import TextPart, ThinkingBlock, Turn
from proxy.sealing import Sealed

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
}
NAMESPACE = {
    "type": "namespace",
    "name": "crm",
    "description": "The customer database.",
    "tools": [{"type": "function", "name": "find", "parameters": {"type": "object"}}],
}
PATCH = {"type": "custom", "name": "apply_patch", "description": "Edit files."}


def fake_seal(sealed: Sealed) -> str:
    """Stands for the sealer: what goes in, unreadable at a glance (hex)."""
    return "sealed:" + orjson.dumps({"r": sealed.reasoning, "a": sealed.artefacts}).hex()


def encoder(**request: Any) -> ResponsesEncoder:
    body: dict[str, Any] = {"model": "m", "input": "hi", "stream": True, **request}
    hidden = body.pop("hidden", False)
    options = read_options(body)
    names = translate(body, [], lambda _: None).names
    return ResponsesEncoder(
        Echo.of(body, options),
        names,
        fake_seal,
        include_encrypted=options.include_encrypted,
        hidden=hidden,
        response_id="resp_test",
        created_at=1700000000,
    )


def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> bytes:
    body = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "upstream-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        **extra,
    }
    return b"data: " + orjson.dumps(body) + b"\n\n"


USAGE = (
    b'data: {"id":"chatcmpl-1","choices":[],"usage":{"prompt_tokens":11,'
    b'"completion_tokens":7,"total_tokens":18,"completion_tokens_details":'
    b'{"reasoning_tokens":4},"prompt_tokens_details":{"cached_tokens":2}}}\n\n'
)
DONE = b"data: [DONE]\n\n"

REASON_THEN_ANSWER = (
    chunk({"role": "assistant", "reasoning_content": "The user "})
    + chunk({"reasoning_content": "greets me."})
    + b": keep-alive\n\n"
    + chunk({"content": "Hello"})
    + chunk({"content": " there!"})
    + chunk({}, "stop")
    + USAGE
    + DONE
)

TOOL_LOOP = (
    chunk({"reasoning_content": "I need the weather."})
    + chunk(
        {
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_w",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"ci'},
                }
            ]
        }
    )
    + chunk({"tool_calls": [{"index": 0, "function": {"arguments": 'ty": "Paris"}'}}]})
    + chunk(
        {
            "tool_calls": [
                {
                    "index": 1,
                    "id": "call_f",
                    "type": "function",
                    "function": {"name": "crm__find", "arguments": "{}"},
                }
            ]
        }
    )
    + chunk(
        {
            "tool_calls": [
                {
                    "index": 2,
                    "id": "call_p",
                    "type": "function",
                    "function": {"name": "apply_patch", "arguments": '{"input": "*** Begin'},
                }
            ]
        }
    )
    + chunk({"tool_calls": [{"index": 2, "function": {"arguments": ' Patch"}'}}]})
    + chunk({}, "tool_calls")
    + DONE
)


def run(enc: ResponsesEncoder, data: bytes, pieces: list[int] | None = None) -> bytes:
    if pieces is None:
        return enc.feed(data) + enc.flush()
    out, pos = b"", 0
    for size in pieces:
        out += enc.feed(data[pos : pos + size])
        pos += size
    return out + enc.feed(data[pos:]) + enc.flush()


def same_run(raw: bytes) -> bytes:
    """A run's events with `completed_at` (the clock's second) left out, so
    two runs compare equal across a second's turn."""
    return re.sub(rb'"completed_at": ?\d+', b'"completed_at":0', raw)


def events(raw: bytes) -> list[dict[str, Any]]:
    """The events, each validated by the SDK's ResponseStreamEvent model;
    comments are skipped. The `event:` line must name the event's type."""
    out = []
    for block in raw.split(b"\n\n"):
        if not block or block.startswith(b":"):
            continue
        name, data = block.split(b"\n", 1)
        assert name.startswith(b"event: ")
        assert data.startswith(b"data: ")
        event = EVENTS.validate_json(data[len(b"data: ") :])
        assert event.type == name[len(b"event: ") :].decode()
        out.append(orjson.loads(data[len(b"data: ") :]))
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def kinds(evs: list[dict[str, Any]]) -> list[str]:
    return [e["type"].removeprefix("response.") for e in evs]


def test_reasoning_then_an_answer() -> None:
    enc = encoder(include=["reasoning.encrypted_content"])
    raw = run(enc, REASON_THEN_ANSWER)
    assert b": keep-alive\n\n" in raw  # keep-alives stay keep-alives
    evs = events(raw)
    assert kinds(evs) == [
        "created",
        "in_progress",
        "output_item.added",
        "reasoning_summary_part.added",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.done",
        "reasoning_summary_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    assert [e["delta"] for e in evs if "delta" in e] == [
        "The user ",
        "greets me.",
        "Hello",
        " there!",
    ]
    reasoning = evs[8]["item"]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "The user greets me."}]
    assert reasoning["encrypted_content"] == fake_seal(Sealed("The user greets me."))
    final = Response.model_validate(evs[-1]["response"])
    assert final.status == "completed"
    assert final.output_text == "Hello there!"
    assert final.model == "upstream-model"
    assert final.usage is not None
    assert (final.usage.input_tokens, final.usage.output_tokens) == (11, 7)
    assert final.usage.output_tokens_details.reasoning_tokens == 4
    assert final.usage.input_tokens_details.cached_tokens == 2
    assert [i.id for i in final.output] == ["rs_test_0", "msg_test_1"]
    assert enc.state == ENDED
    assert enc.final == evs[-1]["response"]


def test_without_include_the_client_gets_no_envelope_but_the_stored_response_has_it() -> None:
    enc = encoder()
    evs = events(run(enc, REASON_THEN_ANSWER))
    done = [e["item"] for e in evs if e["type"] == "response.output_item.done"]
    assert "encrypted_content" not in done[0]
    assert "encrypted_content" not in evs[-1]["response"]["output"][0]
    assert enc.final is not None
    assert enc.final["output"][0]["encrypted_content"] == fake_seal(Sealed("The user greets me."))


def test_tool_calls_come_back_as_the_client_offered_them() -> None:
    enc = encoder(tools=[WEATHER, NAMESPACE, PATCH])
    evs = events(run(enc, TOOL_LOOP))
    assert kinds(evs)[8:] == [
        "output_item.added",
        "function_call_arguments.delta",
        "function_call_arguments.delta",
        "output_item.added",
        "function_call_arguments.delta",
        "output_item.added",
        "function_call_arguments.done",
        "output_item.done",
        "function_call_arguments.done",
        "output_item.done",
        "custom_tool_call_input.delta",
        "custom_tool_call_input.done",
        "output_item.done",
        "completed",
    ]
    final = Response.model_validate(evs[-1]["response"])
    weather, find, patch = final.output[1:]
    assert weather.type == "function_call"
    assert (weather.call_id, weather.name, weather.arguments) == (
        "call_w",
        "get_weather",
        '{"city": "Paris"}',
    )
    assert find.type == "function_call"
    assert (find.name, find.namespace, find.call_id) == ("find", "crm", "call_f")
    assert patch.type == "custom_tool_call"
    assert (patch.name, patch.input, patch.call_id) == ("apply_patch", "*** Begin Patch", "call_p")


def test_interleaved_reasoning_makes_one_reasoning_item_per_run() -> None:
    data = (
        chunk({"reasoning_content": "first"})
        + chunk({"content": "A"})
        + chunk({"reasoning_content": "second"})
        + chunk({"content": "B"}, "stop")
        + DONE
    )
    enc = encoder(include=["reasoning.encrypted_content"])
    final = Response.model_validate(events(run(enc, data))[-1]["response"])
    assert [i.type for i in final.output] == ["reasoning", "message", "reasoning", "message"]
    assert final.output_text == "AB"
    encrypted = [i.encrypted_content for i in final.output if i.type == "reasoning"]
    assert encrypted == [fake_seal(Sealed("first")), fake_seal(Sealed("second"))]


def test_the_upstreams_own_artefacts_go_into_the_envelope() -> None:
    details = [
        {"type": "reasoning.text", "text": "Thin", "index": 0, "format": "anthropic-claude-v1"},
        {"type": "reasoning.text", "text": "king.", "index": 0},
        {"type": "reasoning.text", "signature": "sig==", "index": 0},
        {"type": "reasoning.encrypted", "data": "opaque==", "index": 1},
    ]
    data = (
        chunk({"reasoning_content": "Thin", "reasoning_details": details[:1]})
        + chunk({"reasoning_content": "king.", "reasoning_details": details[1:2]})
        + chunk({"reasoning_details": details[2:]})
        + chunk({"content": "Done."}, "stop")
        + DONE
    )
    enc = encoder(include=["reasoning.encrypted_content"])
    events(run(enc, data))
    assert enc.final is not None
    merged = [
        {
            "type": "reasoning.text",
            "text": "Thinking.",
            "index": 0,
            "format": "anthropic-claude-v1",
            "signature": "sig==",
        },
        {"type": "reasoning.encrypted", "data": "opaque==", "index": 1},
    ]
    envelope = Sealed("Thinking.", {"reasoning_details": merged})
    assert enc.final["output"][0]["encrypted_content"] == fake_seal(envelope)


def test_hidden_reasoning_comes_from_the_turn_with_an_empty_summary() -> None:
    enc = encoder(include=["reasoning.encrypted_content"], hidden=True)
    turn = Turn(parts=(ThinkingBlock("kept from the client", "reasoning_content"),))
    enc.turn = lambda: turn
    data = chunk({"content": "Answer."}, "stop") + DONE
    evs = events(run(enc, data))
    reasoning = evs[-1]["response"]["output"][0]
    assert reasoning["summary"] == []
    assert reasoning["encrypted_content"] == fake_seal(Sealed("kept from the client"))
    assert "reasoning_summary_text.delta" not in kinds(evs)
    assert b"kept from the client" not in orjson.dumps(evs)  # only inside the envelope


def test_hidden_reasoning_without_include_makes_no_item() -> None:
    enc = encoder(hidden=True)
    enc.turn = lambda: Turn(parts=(ThinkingBlock("secret", "reasoning_content"),))
    evs = events(run(enc, chunk({"content": "Answer."}, "stop") + DONE))
    assert [i["type"] for i in evs[-1]["response"]["output"]] == ["message"]


def test_a_length_finish_is_incomplete() -> None:
    evs = events(run(encoder(), chunk({"content": "Half an ans"}, "length") + DONE))
    assert evs[-1]["type"] == "response.incomplete"
    response = Response.model_validate(evs[-1]["response"])
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"


def test_an_error_event_fails_the_response_with_what_was_done() -> None:
    error = (
        b'data: {"error": {"message": "The upstream closed the stream.", '
        b'"code": "upstream_closed"}}\n\n'
    )
    evs = events(run(encoder(), chunk({"content": "Par"}) + error))
    assert evs[-1]["type"] == "response.failed"
    response = Response.model_validate(evs[-1]["response"])
    assert response.status == "failed"
    assert response.error is not None
    assert response.error.code == "server_error"
    assert "upstream_closed" in response.error.message
    # what was open stays open: no done events after the failure
    assert kinds(evs)[-2] == "output_text.delta"


def test_items_open_at_a_failure_stay_in_the_response_incomplete() -> None:
    """What the client was sent stays: the reasoning item that ended, the
    message as it stood (incomplete), the call whose arguments were cut."""
    error = b'data: {"error": {"message": "Gone.", "code": "upstream_closed"}}\n\n'
    call = {"index": 0, "id": "call_1", "function": {"name": "get_weather", "arguments": "{"}}
    for data, kinds_left in [
        (chunk({"reasoning_content": "Hm."}) + chunk({"content": "Par"}), ["reasoning", "message"]),
        (chunk({"reasoning_content": "Hm."}), ["reasoning"]),
        (chunk({"tool_calls": [call]}), ["function_call"]),
    ]:
        enc = encoder(tools=[WEATHER])
        evs = events(run(enc, data + error))
        response = Response.model_validate(evs[-1]["response"])
        assert [i.type for i in response.output] == kinds_left
        assert response.output[-1].status == "incomplete"
        assert enc.final is not None
        assert enc.final["output"][-1]["status"] == "incomplete"
    assert response.output[0].arguments == "{"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "data",
    [
        USAGE + DONE,
        chunk({"role": "assistant"}) + DONE,
        chunk({"role": "assistant"}) + USAGE + DONE,
    ],
)
def test_a_done_after_no_answer_fails(data: bytes) -> None:
    evs = events(run(encoder(), data))
    assert kinds(evs) == ["created", "in_progress", "failed"]
    assert evs[-1]["response"]["error"]["message"].endswith("(upstream_empty_response)")


def test_a_rate_limit_error_keeps_its_code() -> None:
    error = (
        b'event: error\ndata: {"error": {"message": "Slow down.", '
        b'"code": "rate_limit_exceeded"}}\n\n'
    )
    evs = events(run(encoder(), error))
    assert kinds(evs) == ["created", "in_progress", "failed"]
    assert evs[-1]["response"]["error"]["code"] == "rate_limit_exceeded"


def test_an_error_beside_a_choice_ended_by_it_fails_the_response() -> None:
    """OpenRouter's mid-stream failure: the error at the top, the choice's
    finish_reason "error"; what the chunk carried still goes out first."""
    error = chunk({"content": "lo"}, "error", error={"code": "server_error", "message": "Gone."})
    evs = events(run(encoder(), chunk({"content": "Hel"}) + error + DONE))
    assert kinds(evs)[-3:] == ["output_text.delta", "output_text.delta", "failed"]
    assert evs[-1]["response"]["error"]["code"] == "server_error"
    assert evs[-1]["response"]["error"]["message"].startswith("Gone.")


REFUSED = (
    chunk({"role": "assistant", "content": "Let me see. "})
    + chunk({"content": None, "refusal": "I can't "})
    + chunk({"refusal": "help with that."})
    + chunk({}, "stop")
    + DONE
)


def test_a_refusal_is_a_message_with_a_refusal_part() -> None:
    evs = events(run(encoder(), REFUSED))
    assert kinds(evs) == [
        "created",
        "in_progress",
        "output_item.added",
        "content_part.added",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",
        "content_part.added",
        "refusal.delta",
        "refusal.delta",
        "refusal.done",
        "content_part.done",
        "output_item.done",
        "completed",
    ]
    response = Response.model_validate(evs[-1]["response"])
    assert [item.model_dump()["content"] for item in response.output] == [
        [{"type": "output_text", "text": "Let me see. ", "annotations": [], "logprobs": []}],
        [{"type": "refusal", "refusal": "I can't help with that."}],
    ]


def test_a_stream_that_ends_without_done_fails() -> None:
    evs = events(run(encoder(), chunk({"content": "Par"})))
    assert evs[-1]["type"] == "response.failed"


def test_input_after_the_end_is_ignored() -> None:
    enc = encoder()
    out = enc.feed(REASON_THEN_ANSWER)
    assert enc.feed(chunk({"content": "more"}) + DONE) == b""
    assert enc.flush() == b""
    assert events(out)[-1]["type"] == "response.completed"


# -- splits -----------------------------------------------------------------------------


@pytest.mark.parametrize("data", [REASON_THEN_ANSWER, TOOL_LOOP, REFUSED])
def test_byte_by_byte_and_with_trailing_data_give_the_same_events(data: bytes) -> None:
    whole = same_run(run(encoder(tools=[WEATHER, NAMESPACE, PATCH]), data))
    split = run(encoder(tools=[WEATHER, NAMESPACE, PATCH]), data, [1] * len(data))
    assert same_run(split) == whole
    trailing = run(encoder(tools=[WEATHER, NAMESPACE, PATCH]), data + chunk({"content": "late"}))
    assert same_run(trailing) == whole


@given(st.lists(st.integers(min_value=0, max_value=40), max_size=60))
def test_any_split_gives_the_same_events(pieces: list[int]) -> None:
    data = REASON_THEN_ANSWER + b""
    assert same_run(run(encoder(), data, pieces)) == same_run(run(encoder(), data))
    tools = [WEATHER, NAMESPACE, PATCH]
    assert same_run(run(encoder(tools=tools), TOOL_LOOP, pieces)) == same_run(
        run(encoder(tools=tools), TOOL_LOOP)
    )


# -- whole responses --------------------------------------------------------------------


def completion(message: dict[str, Any], finish: str = "stop") -> bytes:
    return orjson.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "upstream-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
        }
    )


def test_a_whole_completion_is_one_response_object() -> None:
    enc = encoder(tools=[WEATHER], include=["reasoning.encrypted_content"])
    message = {
        "role": "assistant",
        "reasoning_content": "Look it up.",
        "content": "Checking.",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'},
            }
        ],
    }
    body = enc.whole(200, completion(message, "tool_calls"))
    response = Response.model_validate_json(body)
    assert response.status == "completed"
    assert [i.type for i in response.output] == ["reasoning", "message", "function_call"]
    assert response.output_text == "Checking."
    assert response.output[0].encrypted_content == fake_seal(Sealed("Look it up."))  # type: ignore[union-attr]
    assert response.output[2].call_id == "call_1"  # type: ignore[union-attr]
    assert enc.final == orjson.loads(body)


def test_a_whole_error_body_passes_as_it_is() -> None:
    error = b'{"error": {"message": "bad", "type": "invalid_request_error", "code": null}}'
    assert encoder().whole(400, error) == error


def test_a_whole_answer_without_a_message_is_a_failed_response() -> None:
    response = Response.model_validate_json(encoder().whole(200, b'{"choices": []}'))
    assert response.status == "failed"


def test_the_turns_token_estimate_fills_unreported_reasoning_tokens() -> None:
    enc = encoder()
    enc.turn = lambda: Turn(parts=(ThinkingBlock("x" * 40, "reasoning", tokens=2), TextPart("A")))
    response = Response.model_validate_json(enc.whole(200, completion({"content": "A"})))
    assert response.usage is not None
    assert response.usage.output_tokens_details.reasoning_tokens == 2


def test_the_envelope_takes_the_upstreams_artefacts_as_the_normalizer_merged_them() -> None:
    block = {"type": "thinking", "thinking": "Plan it.", "signature": "sig-A=="}
    turn = Turn(
        parts=(
            ThinkingBlock("Plan it.", "thinking_blocks", signature="sig-A==", encrypted=(block,)),
            TextPart("Done."),
        )
    )
    enc = encoder(include=["reasoning.encrypted_content"])
    enc.turn = lambda: turn
    data = (
        chunk({"reasoning_content": "Plan", "thinking_blocks": [{"type": "thinking"}]})
        + chunk({"reasoning_content": " it."})
        + chunk({"content": "Done."}, "stop")
        + DONE
    )
    evs = events(run(enc, data))
    reasoning = evs[-1]["response"]["output"][0]
    assert reasoning["summary"][0]["text"] == "Plan it."
    expected = Sealed("Plan it.", {"thinking_blocks": [block]})
    assert reasoning["encrypted_content"] == fake_seal(expected)
