"""What a Responses upstream sends, normalized (sans-IO): tagged reasoning in
output_text split into a reasoning item before the message, indexes shifted,
sequence numbers counted afresh; every event checked against the openai SDK's
models; whole, byte by byte and at any split."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from proxy.doors.responses.native import DONE, FAILED, NativeResponses, native_request
from proxy.reasoning.blocks import TextPart, ThinkingBlock, ToolCall
from proxy.reasoning.normalizer import StreamFailure
from proxy.reasoning.tags import DEFAULT_TAG_SET
from proxy.settings import ReasoningSettings

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
BASE: dict[str, Any] = {
    "id": "resp_up",
    "object": "response",
    "created_at": 1700000000,
    "model": "qwen3",
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
}


def message(text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "output_text", "text": text, "annotations": []}] if text else []
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def event(kind: str, **fields: Any) -> bytes:
    body = {"type": kind, "sequence_number": 99, **fields}
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(body) + b"\n\n"


def upstream_stream(pieces: list[str], call: bool = False) -> bytes:
    text = "".join(pieces)
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    out = event("response.created", response={**BASE, "status": "in_progress", "output": []})
    out += event("response.output_item.added", output_index=0, item=message("", "in_progress"))
    part = {"type": "output_text", "text": "", "annotations": []}
    out += event("response.content_part.added", **at, part=part)
    for piece in pieces:
        out += event("response.output_text.delta", **at, delta=piece, logprobs=[])
    out += event("response.output_text.done", **at, text=text, logprobs=[])
    out += event("response.content_part.done", **at, part={**part, "text": text})
    out += event("response.output_item.done", output_index=0, item=message(text))
    output = [message(text)]
    if call:
        fc = {
            "id": "fc_1",
            "type": "function_call",
            "call_id": "call_1",
            "name": "get_weather",
            "arguments": "",
            "status": "in_progress",
        }
        out += event("response.output_item.added", output_index=1, item=fc)
        out += event(
            "response.function_call_arguments.delta", item_id="fc_1", output_index=1, delta="{}"
        )
        done = {**fc, "arguments": "{}", "status": "completed"}
        out += event("response.output_item.done", output_index=1, item=done)
        output.append(done)
    usage = {
        "input_tokens": 5,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": 9,
        "output_tokens_details": {"reasoning_tokens": 4},
        "total_tokens": 14,
    }
    final = {**BASE, "status": "completed", "output": output, "usage": usage}
    return out + event("response.completed", response=final)


TAGGED = upstream_stream(["<think>I sh", "ould greet.</think>He", "llo!"], call=True)


def run(reader: NativeResponses, data: bytes, pieces: list[int] | None = None) -> bytes:
    if pieces is None:
        return reader.feed(data) + reader.finish()
    out, pos = b"", 0
    for size in pieces:
        out += reader.feed(data[pos : pos + size])
        pos += size
    return out + reader.feed(data[pos:]) + reader.finish()


def events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for block in raw.split(b"\n\n"):
        if not block:
            continue
        name, data = block.split(b"\n", 1)
        parsed = EVENTS.validate_json(data.removeprefix(b"data: "))
        assert name == b"event: " + parsed.type.encode()
        out.append(orjson.loads(data.removeprefix(b"data: ")))
    assert [e["sequence_number"] for e in out] == list(range(len(out)))
    return out


def test_tagged_reasoning_becomes_a_reasoning_item_before_the_message() -> None:
    reader = NativeResponses(DEFAULT_TAG_SET)
    evs = events(run(reader, TAGGED))
    kinds = [e["type"].removeprefix("response.") for e in evs]
    assert kinds == [
        "created",
        "output_item.added",  # the split-off reasoning, at 0
        "reasoning_summary_part.added",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.delta",
        "reasoning_summary_text.done",
        "reasoning_summary_part.done",
        "output_item.done",
        "output_item.added",  # the message, now at 1
        "content_part.added",
        "output_text.delta",
        "output_text.delta",
        "output_text.done",
        "content_part.done",
        "output_item.done",
        "output_item.added",  # the call, at 2
        "function_call_arguments.delta",
        "output_item.done",
        "completed",
    ]
    assert [e["output_index"] for e in evs if "output_index" in e] == [0] * 7 + [1] * 7 + [2] * 3
    assert "".join(e["delta"] for e in evs if e["type"].endswith("output_text.delta")) == "Hello!"
    final = Response.model_validate(evs[-1]["response"])
    assert [i.type for i in final.output] == ["reasoning", "message", "function_call"]
    assert final.output_text == "Hello!"
    assert final.output[0].summary[0].text == "I should greet."  # type: ignore[union-attr]
    assert reader.state == DONE
    turn = reader.turn()
    assert turn.parts == (
        ThinkingBlock("I should greet.", "think_tag"),
        TextPart("Hello!"),
        ToolCall("call_1", "get_weather", "{}"),
    )
    assert turn.finish_reason == "tool_calls"
    assert turn.usage is not None
    assert turn.usage["completion_tokens_details"] == {"reasoning_tokens": 4}


def test_an_untagged_stream_passes_with_fresh_sequence_numbers() -> None:
    data = upstream_stream(["Hel", "lo"])
    evs = events(run(NativeResponses(DEFAULT_TAG_SET), data))
    upstream = [orjson.loads(b.split(b"data: ", 1)[1]) for b in data.split(b"\n\n") if b]
    assert [e["type"] for e in evs] == [e["type"] for e in upstream]
    assert evs[-1]["response"]["output"] == [message("Hello")]


def test_hidden_reasoning_sends_no_text() -> None:
    reader = NativeResponses(DEFAULT_TAG_SET, hidden=True)
    raw = run(reader, TAGGED)
    assert b"greet" not in raw
    evs = events(raw)
    assert evs[-1]["response"]["output"][0]["summary"] == []
    assert reader.turn().parts[0] == ThinkingBlock("I should greet.", "think_tag")


def test_a_stream_that_ends_early_fails() -> None:
    cut = TAGGED[: TAGGED.index(b"event: response.output_text.done")]
    reader = NativeResponses(DEFAULT_TAG_SET)
    evs = events(run(reader, cut))
    assert evs[-1]["type"] == "response.failed"
    assert Response.model_validate(evs[-1]["response"]).status == "failed"
    assert reader.state == FAILED
    assert reader.turn().complete is False


NOT_JSON = b"event: response.output_text.delta\ndata: {not json\n\n"


def test_an_event_that_is_not_json_fails_the_stream() -> None:
    # it went out as a bare `data: {not json` (its event line dropped), and the
    # stream went on to response.completed
    at = TAGGED.index(b"event: response.output_text.done")
    reader = NativeResponses(DEFAULT_TAG_SET)
    evs = events(run(reader, TAGGED[:at] + NOT_JSON + TAGGED[at:]))
    assert evs[-1]["type"] == "response.failed"
    assert "not JSON" in evs[-1]["response"]["error"]["message"]
    assert Response.model_validate(evs[-1]["response"]).status == "failed"
    assert reader.state == FAILED
    turn = reader.turn()
    assert turn.complete is False
    assert turn.parts[0] == ThinkingBlock("I should greet.", "think_tag")


def test_a_line_over_the_bound_fails_the_stream() -> None:
    # the decoder's SSELineTooLong escaped the reader (a broken connection, no turn)
    long_delta = event("response.output_text.delta", item_id="msg_1", delta="x" * 1500)
    at = TAGGED.index(b"event: response.output_text.done")
    for data in (TAGGED[:at] + long_delta, TAGGED[:at] + long_delta[:-2]):  # fed, flushed
        reader = NativeResponses(DEFAULT_TAG_SET, max_line_bytes=1024)
        evs = events(run(reader, data, [at]))
        assert evs[-1]["type"] == "response.failed"
        assert "1024 bytes" in evs[-1]["response"]["error"]["message"]
        assert reader.state == FAILED
        assert reader.turn().complete is False


def test_the_proxys_own_failures_name_their_code() -> None:
    # the README promises the proxy's code in response.failed's message, as
    # the chat-upstream path words it; it was the bare message
    at = TAGGED.index(b"event: response.output_text.done")
    cut = NativeResponses(DEFAULT_TAG_SET)
    cut_out = run(cut, TAGGED[:at])
    idle = NativeResponses(DEFAULT_TAG_SET)
    idle_out = idle.feed(TAGGED[:at]) + idle.abort(
        StreamFailure("upstream_timeout", "Nothing came.", "timeout_error")
    )
    bad = NativeResponses(DEFAULT_TAG_SET)
    bad_out = run(bad, TAGGED[:at] + NOT_JSON)
    errors = [events(out)[-1]["response"]["error"] for out in (cut_out, idle_out, bad_out)]
    assert errors == [
        {
            "code": "server_error",
            "message": "The upstream closed the stream before the response ended. "
            "(upstream_closed)",
        },
        {"code": "server_error", "message": "Nothing came. (upstream_timeout)"},
        {
            "code": "server_error",
            "message": "The upstream sent an event that is not JSON. (malformed_upstream_event)",
        },
    ]


@given(st.lists(st.integers(min_value=0, max_value=60), max_size=80))
def test_any_split_gives_the_same_events(pieces: list[int]) -> None:
    assert run(NativeResponses(DEFAULT_TAG_SET), TAGGED, pieces) == run(
        NativeResponses(DEFAULT_TAG_SET), TAGGED
    )


def test_byte_by_byte_and_trailing_data() -> None:
    whole = run(NativeResponses(DEFAULT_TAG_SET), TAGGED)
    assert run(NativeResponses(DEFAULT_TAG_SET), TAGGED, [1] * len(TAGGED)) == whole
    late = event("response.output_text.delta", item_id="msg_1", output_index=0, delta="x")
    assert run(NativeResponses(DEFAULT_TAG_SET), TAGGED + late) == whole


def test_a_whole_response_is_split_too() -> None:
    reader = NativeResponses(DEFAULT_TAG_SET)
    upstream = {**BASE, "status": "completed", "output": [message("<think>Plan.</think>Done.")]}
    response = Response.model_validate(reader.whole(upstream))
    assert [i.type for i in response.output] == ["reasoning", "message"]
    assert response.output_text == "Done."
    assert reader.turn().parts == (ThinkingBlock("Plan.", "think_tag"), TextPart("Done."))


def test_the_upstreams_own_reasoning_is_kept_for_the_store() -> None:
    reader = NativeResponses(DEFAULT_TAG_SET, hidden=True)
    own = {
        "id": "rs_up",
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "Native thought."}],
        "encrypted_content": "gAAAA-upstream",
    }
    shown = reader.whole({**BASE, "status": "completed", "output": [own, message("Hi")]})
    assert shown["output"][0]["summary"] == []
    assert shown["output"][0]["encrypted_content"] == "gAAAA-upstream"
    block = reader.turn().parts[0]
    assert isinstance(block, ThinkingBlock)
    assert (block.thought, block.source_field) == ("Native thought.", "reasoning")
    assert block.encrypted is not None
    assert block.encrypted[0]["data"] == "gAAAA-upstream"


def test_the_request_gets_the_settings_and_loses_the_proxys_own_items() -> None:
    body = {
        "model": "m",
        "input": [
            {"role": "user", "content": "x"},
            {"type": "reasoning", "summary": [], "encrypted_content": "rp1.ours"},
            {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-theirs"},
            # another reasoning-proxy's envelope (an upstream that is one): it opens there
            {"type": "reasoning", "summary": [], "encrypted_content": "rp1.upstreams"},
        ],
        "reasoning": {"effort": "low"},
    }
    settings = ReasoningSettings(effort="high", max_tokens=100)

    def ours(token: str) -> bool:
        return token == "rp1.ours"

    out, ignored = native_request(body, settings, {}, ours)
    assert out["reasoning"] == {"effort": "low"}  # the body's own stays
    kept = [i.get("encrypted_content") for i in out["input"]]
    assert kept == [None, "gAAAA-theirs", "rp1.upstreams"]
    assert ignored == ["max_tokens"]
    out, _ = native_request(body, settings, {"effort": "high"}, ours)
    assert out["reasoning"] == {"effort": "high"}  # a header wins
    assert body["reasoning"] == {"effort": "low"}  # the client's body is not changed


ROUTE_KEY = "rk-route-secret-0123456789"
_KEY_PIECES = ["plain ", ROUTE_KEY, "rk-", "r", "k-route", "-secret-0123456789"]
_KEY_PIECES += ["<think>", "</think>"]


@given(
    st.lists(st.lists(st.sampled_from(_KEY_PIECES), min_size=1, max_size=3), max_size=8),
    st.lists(st.integers(min_value=0, max_value=80), max_size=40),
)
def test_a_route_key_split_across_deltas_is_masked_in_what_a_client_joins(
    deltas: list[list[str]], pieces: list[int]
) -> None:
    """With route keys to mask: what a client joins from each text's deltas
    is the text masked (a tail that could begin a key waits for the next
    delta, or goes out alone before any other event), at any split; the
    events stay valid, their sequence numbers contiguous."""
    from proxy.keymask import KeyMask

    mask = KeyMask.of([ROUTE_KEY])
    assert mask is not None
    texts = ["".join(d) for d in deltas]
    data = upstream_stream(texts)
    out = events(run(NativeResponses(DEFAULT_TAG_SET, mask=mask), data, pieces))
    plain = events(run(NativeResponses(DEFAULT_TAG_SET), data))
    for kind in ("response.output_text.delta", "response.reasoning_summary_text.delta"):
        joined = "".join(e["delta"] for e in out if e["type"] == kind)
        unmasked = "".join(e["delta"] for e in plain if e["type"] == kind)
        assert joined == mask.text(unmasked)
        assert ROUTE_KEY not in joined
    # everything else is as without a mask
    others = [e["type"] for e in out if not e["type"].endswith("_text.delta")]
    assert others == [e["type"] for e in plain if not e["type"].endswith("_text.delta")]


def test_a_held_tail_goes_out_before_another_texts_delta() -> None:
    from proxy.keymask import KeyMask

    mask = KeyMask.of([ROUTE_KEY])
    assert mask is not None
    at = {"output_index": 0, "content_index": 0}
    data = event("response.output_text.delta", item_id="msg_1", **at, delta="key rk-", logprobs=[])
    data += event("response.output_text.delta", item_id="msg_2", **at, delta="other.", logprobs=[])
    out = NativeResponses(DEFAULT_TAG_SET, mask=mask).feed(data)
    texts = [(e["item_id"], e["delta"]) for e in events(out)]
    assert texts == [("msg_1", "key "), ("msg_1", "rk-"), ("msg_2", "other.")]


def test_a_route_key_split_across_a_calls_arguments_is_masked() -> None:
    from proxy.keymask import MASK, KeyMask

    mask = KeyMask.of([ROUTE_KEY])
    assert mask is not None
    at = {"item_id": "fc_1", "output_index": 0}
    kind = "response.function_call_arguments.delta"
    data = event(kind, **at, delta='{"k": "' + ROUTE_KEY[:6])
    data += event(kind, **at, delta=ROUTE_KEY[6:] + '"}')
    data += event("response.function_call_arguments.done", **at, arguments="x")
    out = events(NativeResponses(DEFAULT_TAG_SET, mask=mask).feed(data))
    assert [e["delta"] for e in out if e["type"] == kind] == ['{"k": "', MASK + '"}']


def refusal_stream(reasoning_first: bool = False) -> bytes:
    """A refused answer as OpenAI streams it: the message's added events,
    its refusal part's deltas and ends (after an upstream reasoning item
    when `reasoning_first`: the message at output_index 1)."""
    out = event("response.created", response={**BASE, "status": "in_progress", "output": []})
    output: list[dict[str, Any]] = []
    if reasoning_first:
        rs = {"id": "rs_up", "type": "reasoning", "summary": []}
        out += event("response.output_item.added", output_index=0, item=rs)
        out += event("response.output_item.done", output_index=0, item=rs)
        output.append(rs)
    n = len(output)
    at = {"item_id": "msg_1", "output_index": n, "content_index": 0}
    refusal = "I can't help with that."
    out += event("response.output_item.added", output_index=n, item=message("", "in_progress"))
    out += event("response.content_part.added", **at, part={"type": "refusal", "refusal": ""})
    out += event("response.refusal.delta", **at, delta="I can't ")
    out += event("response.refusal.delta", **at, delta="help with that.")
    out += event("response.refusal.done", **at, refusal=refusal)
    part = {"type": "refusal", "refusal": refusal}
    out += event("response.content_part.done", **at, part=part)
    done = {**message(""), "content": [part]}
    out += event("response.output_item.done", output_index=n, item=done)
    output.append(done)
    final = {**BASE, "status": "completed", "output": output}
    return out + event("response.completed", response=final)


REFUSAL_ORDER = [
    "output_item.added",
    "content_part.added",
    "refusal.delta",
    "refusal.delta",
    "refusal.done",
    "content_part.done",
    "output_item.done",
]


def test_a_refusal_streams_in_the_upstreams_order() -> None:
    """Regression: a message's `added` events wait for its first answer
    text, and a refusal part has none, so its deltas, its `refusal.done` and
    `content_part.done` went out before the message's `output_item.added`."""
    for reasoning_first in (False, True):
        data = refusal_stream(reasoning_first)
        evs = events(run(NativeResponses(DEFAULT_TAG_SET), data))
        upstream = [orjson.loads(b.split(b"data: ", 1)[1]) for b in data.split(b"\n\n") if b]
        assert [e["type"] for e in evs] == [e["type"] for e in upstream]
        message_events = [e for e in evs if e.get("output_index") == int(reasoning_first)]
        assert [e["type"].removeprefix("response.") for e in message_events] == REFUSAL_ORDER
        final = Response.model_validate(evs[-1]["response"])
        assert final.output[-1].content[0].refusal == "I can't help with that."  # type: ignore[union-attr]
        whole = run(NativeResponses(DEFAULT_TAG_SET), data)
        assert run(NativeResponses(DEFAULT_TAG_SET), data, [1] * len(data)) == whole


def test_reasoning_after_a_refusal_went_out_follows_the_message() -> None:
    """A message whose added events already went out (a refusal part first)
    cannot have a reasoning item placed before it: tagged reasoning in a
    later output_text part goes into a reasoning item after it, with
    output_index values that stay distinct."""
    data = refusal_stream()
    at = {"item_id": "msg_1", "output_index": 0, "content_index": 1}
    part = {"type": "output_text", "text": "", "annotations": []}
    extra = event("response.content_part.added", **at, part=part)
    extra += event("response.output_text.delta", **at, delta="<think>Hm.</think>No.", logprobs=[])
    extra += event("response.output_text.done", **at, text="<think>Hm.</think>No.", logprobs=[])
    cut = data.index(b"event: response.output_item.done")
    evs = events(run(NativeResponses(DEFAULT_TAG_SET), data[:cut] + extra + data[cut:]))
    added = [
        (e["output_index"], e["item"]["type"])
        for e in evs
        if e["type"] == "response.output_item.added"
    ]
    assert added == [(0, "message"), (1, "reasoning")]
    text = [e["delta"] for e in evs if e["type"] == "response.output_text.delta"]
    assert text == ["No."]
