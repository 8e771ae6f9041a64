"""The stream normalizer against the conformance cases, re-split at random
byte positions, plus its behaviour on bad input."""

from __future__ import annotations

import copy
import random
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.blocks import Json, TextPart, ThinkingBlock, ToolCall
from proxy.reasoning.normalizer import (
    DONE,
    FAILED,
    OPEN,
    NormalizeOptions,
    StreamFailure,
    StreamNormalizer,
    normalize_completion,
)
from proxy.reasoning.sse import SSEDecoder, SSEEvent
from proxy.reasoning.tags import DEFAULT_TAG_SET
from tests.casefiles import chunk, cut_at, load_cases, no_ws, read_stream, render_stream

INGRESS = load_cases("ingress")
STREAMED = [c for c in INGRESS if c["stream"]]


def options_for(case: dict[str, Any], **kw: Any) -> NormalizeOptions:
    return NormalizeOptions(implicit_open_tag=bool(case["route"].get("implicit_open_tag")), **kw)


def run_stream(body: bytes, pieces: list[bytes] | None = None, **kw: Any) -> tuple[bytes, Any]:
    normalizer = StreamNormalizer(NormalizeOptions(**kw))
    out = b"".join(normalizer.feed(p) for p in (pieces if pieces is not None else [body]))
    return out + normalizer.finish(), normalizer


def check_case(case: dict[str, Any], client: dict[str, Any], turn: Any) -> None:
    expect = case["expect"]
    assert client["content"].strip() == expect["content"]
    assert not any(d in client["content"].lower() for d in DEFAULT_TAG_SET.delimiters())
    assert not any(d in turn.content.lower() for d in DEFAULT_TAG_SET.delimiters())
    assert no_ws(client["reasoning"]) == no_ws("".join(expect["thinking"]))
    assert [b.thought.strip() for b in turn.thinking if b.thought] == expect["thinking"]
    assert client["tool_call_ids"] == expect["tool_call_ids"]
    assert turn.tool_call_ids == expect["tool_call_ids"]
    assert client["finish_reason"] == expect["finish_reason"]
    assert turn.finish_reason == expect["finish_reason"]


def stream_case(
    case: dict[str, Any], pieces: list[bytes] | None = None
) -> tuple[dict[str, Any], Any]:
    body = render_stream(case["upstream"])
    normalizer = StreamNormalizer(options_for(case))
    out = b"".join(normalizer.feed(p) for p in (pieces if pieces is not None else [body]))
    out += normalizer.finish()
    client = read_stream(out)
    assert client["done"]
    assert not client["errors"]
    assert normalizer.state == DONE
    turn = normalizer.turn()
    assert turn.complete
    return client, turn


@pytest.mark.parametrize("case", INGRESS, ids=[c["id"] for c in INGRESS])
def test_case_whole(case: dict[str, Any]) -> None:
    if case["stream"]:
        client, turn = stream_case(case)
    else:
        body = copy.deepcopy(case["upstream"][0])
        _, turn = normalize_completion(body, options_for(case))
        message = body["choices"][0]["message"]
        client = {
            "content": message.get("content") or "",
            "reasoning": message.get("reasoning_content") or "",
            "tool_call_ids": [c["id"] for c in message.get("tool_calls") or []],
            "finish_reason": body["choices"][0]["finish_reason"],
        }
    check_case(case, client, turn)


@pytest.mark.parametrize("case", STREAMED, ids=[c["id"] for c in STREAMED])
def test_case_byte_by_byte_and_every_single_cut(case: dict[str, Any]) -> None:
    body = render_stream(case["upstream"])
    expected = stream_case(case)
    one_by_one = stream_case(case, [body[i : i + 1] for i in range(len(body))])
    assert one_by_one[0] == expected[0]
    assert one_by_one[1].parts == expected[1].parts
    for cut in range(1, len(body)):
        client, turn = stream_case(case, [body[:cut], body[cut:]])
        assert (client["content"], client["reasoning"]) == (
            expected[0]["content"],
            expected[0]["reasoning"],
        ), cut
        assert turn.parts == expected[1].parts, cut


@pytest.mark.parametrize("case", STREAMED, ids=[c["id"] for c in STREAMED])
@pytest.mark.parametrize("seed", range(8))
def test_case_random_small_pieces(case: dict[str, Any], seed: int) -> None:
    body = render_stream(case["upstream"])
    rng = random.Random(seed)
    sizes = [rng.randint(1, 5) for _ in range(len(body))]
    client, turn = stream_case(case, cut_at(body, sizes))
    check_case(case, client, turn)


@given(st.sampled_from(STREAMED), st.lists(st.integers(min_value=0, max_value=40), max_size=60))
def test_case_hypothesis_splits(case: dict[str, Any], sizes: list[int]) -> None:
    body = render_stream(case["upstream"])
    whole = stream_case(case)
    client, turn = stream_case(case, cut_at(body, sizes))
    assert (client["content"], client["reasoning"]) == (whole[0]["content"], whole[0]["reasoning"])
    assert turn.parts == whole[1].parts
    check_case(case, client, turn)


# -- generated streams: the invariants end to end ------------------------------

TOKENS = [
    "<think>",
    "</think>",
    "<THINKING>",
    "</thinking>",
    "<",
    "/",
    ">",
    "a",
    "b c",
    "\n",
    " ",
    "é",
    "🤔",
    "<th",
    "ink>",
]
deltas = st.lists(st.lists(st.sampled_from(TOKENS), max_size=6).map("".join), max_size=12)


@given(deltas, st.lists(st.integers(min_value=0, max_value=9), max_size=80), st.booleans())
def test_generated_streams_keep_the_invariants(
    contents: list[str], sizes: list[int], native: bool
) -> None:
    chunks = [chunk({"content": c}) for c in contents]
    if native:
        chunks.insert(0, chunk({"reasoning_content": "native"}))
    chunks.append(chunk({}, "stop"))
    body = render_stream(chunks)
    whole_out, whole = run_stream(body)
    split_out, split = run_stream(body, cut_at(body, sizes))
    client = read_stream(split_out)
    assert client == read_stream(whole_out)
    assert split.turn().parts == whole.turn().parts
    # 1: no delimiter in the answer, sent or stored
    assert not any(d in client["content"].lower() for d in DEFAULT_TAG_SET.delimiters())
    assert not any(d in split.turn().content.lower() for d in DEFAULT_TAG_SET.delimiters())
    # 3: nothing but delimiters and whitespace is dropped (tagged copies under
    # native reasoning are kept on the turn as hidden blocks when they differ)
    stored = "".join(
        p.thought if isinstance(p, ThinkingBlock) else p.text if isinstance(p, TextPart) else ""
        for p in split.turn().parts
    )
    source = no_ws("".join(contents))
    for d in DEFAULT_TAG_SET.delimiters():
        source = source.replace(d, "").replace(d.upper(), "")
    kept = no_ws(stored)
    assert set(kept) <= set(source + "native<>/thinkgTHINKG")


# -- channels and settings ---------------------------------------------------


def test_include_in_response_false_removes_every_reasoning_field() -> None:
    chunks = [
        chunk({"role": "assistant", "content": "", "reasoning_content": "rc"}),
        chunk({"reasoning": "r", "reasoning_details": [{"type": "reasoning.text", "text": "r"}]}),
        chunk({"thinking": "t"}),
        chunk({"content": "<think>tagged</think>answer"}),
        chunk({}, "stop"),
    ]
    out, normalizer = run_stream(render_stream(chunks), include_in_response=False)
    for line in out.split(b"\n\n"):
        for field in (b"reasoning", b"thinking", b"tagged"):
            assert field not in line
    assert read_stream(out)["content"] == "answer"
    turn = normalizer.turn()
    # a block per native field, and the differing tagged copy kept hidden
    assert [b.thought for b in turn.thinking] == ["rc", "r", "t", "tagged"]
    assert all(b.is_hidden for b in turn.thinking)


def test_reasoning_and_thinking_fields_fold_into_reasoning_content() -> None:
    chunks = [
        chunk({"reasoning": "from vllm"}),
        chunk({"thinking": " and more"}),
        chunk({"content": "ok"}, "stop"),
    ]
    out, _ = run_stream(render_stream(chunks))
    events = [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    deltas_out = [e["choices"][0]["delta"] for e in events]
    assert deltas_out[0] == {"reasoning_content": "from vllm"}
    assert deltas_out[1] == {"reasoning_content": " and more"}


def test_reasoning_details_pass_through_and_merge_per_index() -> None:
    details_1 = [{"type": "reasoning.text", "text": "Step ", "index": 0, "format": "f"}]
    details_2 = [{"type": "reasoning.text", "text": "one.", "index": 0}]
    details_3 = [
        {"type": "reasoning.text", "text": "", "signature": "sig", "index": 0},
        {"type": "reasoning.encrypted", "data": "ENC", "index": 1},
    ]
    chunks = [
        chunk({"reasoning_details": details_1}),
        chunk({"reasoning_details": details_2}),
        chunk({"reasoning_details": details_3}),
        chunk({"content": "A"}, "stop"),
    ]
    out, normalizer = run_stream(render_stream(chunks))
    assert b'"reasoning_details"' in out  # passed on for clients that round-trip it
    assert read_stream(out)["reasoning"] == "Step one."
    turn = normalizer.turn()
    assert turn.reasoning_details == (
        {
            "type": "reasoning.text",
            "text": "Step one.",
            "index": 0,
            "format": "f",
            "signature": "sig",
        },
        {"type": "reasoning.encrypted", "data": "ENC", "index": 1},
    )
    (block,) = turn.thinking
    assert block.thought == "Step one."
    assert block.source_field == "reasoning_details"
    assert block.signature == "sig"
    assert block.encrypted is not None
    assert [e["index"] for e in block.encrypted] == [0, 1]


def test_encrypted_only_reasoning_forms_a_hidden_block() -> None:
    chunks = [
        chunk({"content": "A"}),
        chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "X"}]}),
        chunk({}, "stop"),
    ]
    _, normalizer = run_stream(render_stream(chunks))
    parts = normalizer.turn().parts
    assert isinstance(parts[0], TextPart)
    assert isinstance(parts[1], ThinkingBlock)
    assert parts[1].thought == ""
    assert parts[1].is_hidden
    assert parts[1].encrypted == ({"type": "reasoning.encrypted", "data": "X"},)


def test_tagged_copy_that_differs_from_native_is_kept_hidden() -> None:
    chunks = [
        chunk({"reasoning_content": "native plan"}),
        chunk({"content": "<think>other words</think>answer"}),
        chunk({}, "stop"),
    ]
    out, normalizer = run_stream(render_stream(chunks))
    assert read_stream(out)["reasoning"] == "native plan"
    blocks = normalizer.turn().thinking
    assert [(b.thought, b.source_field, b.is_hidden) for b in blocks] == [
        ("native plan", "reasoning_content", False),
        ("other words", "think_tag", True),
    ]


def test_interleaved_blocks_around_tool_calls_stay_in_order() -> None:
    call = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
    }
    call2 = {
        "index": 1,
        "id": "call_2",
        "type": "function",
        "function": {"name": "g", "arguments": "{}"},
    }
    chunks = [
        chunk({"reasoning_content": "first"}),
        chunk({"tool_calls": [call]}),
        chunk({"reasoning_content": "second"}),
        chunk({"tool_calls": [call2]}),
        chunk({}, "tool_calls"),
    ]
    _, normalizer = run_stream(render_stream(chunks))
    kinds = [
        (type(p).__name__, getattr(p, "thought", None) or getattr(p, "id", None))
        for p in normalizer.turn().parts
    ]
    assert kinds == [
        ("ThinkingBlock", "first"),
        ("ToolCall", "call_1"),
        ("ThinkingBlock", "second"),
        ("ToolCall", "call_2"),
    ]


def test_reasoning_after_visible_text_in_one_delta_is_sent_in_order() -> None:
    chunks = [chunk({"role": "assistant", "content": "A<think>r</think>B"}), chunk({}, "stop")]
    out, _ = run_stream(render_stream(chunks))
    events = [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    pieces = [e["choices"][0]["delta"] for e in events]
    assert pieces[:3] == [
        {"role": "assistant", "content": "A"},
        {"reasoning_content": "r"},
        {"content": "B"},
    ]


def test_second_tag_block_is_separated_for_the_client() -> None:
    chunks = [chunk({"content": "<think>one</think>x<think>two</think>y"}), chunk({}, "stop")]
    out, _ = run_stream(render_stream(chunks))
    assert read_stream(out)["reasoning"] == "one\n\ntwo"


def test_multiple_choices_are_separated_independently() -> None:
    first = {
        "id": "c",
        "choices": [
            {"index": 0, "delta": {"content": "<think>a</think>A"}, "finish_reason": None},
            {"index": 1, "delta": {"content": "<think>b"}, "finish_reason": None},
        ],
    }
    second = {
        "id": "c",
        "choices": [
            {"index": 0, "delta": {}, "finish_reason": "stop"},
            {"index": 1, "delta": {"content": "</think>B"}, "finish_reason": "stop"},
        ],
    }
    out, normalizer = run_stream(render_stream([first, second]))
    assert read_stream(out)["content"] == "AB"
    assert [b.thought for b in normalizer.turn(0).thinking] == ["a"]
    assert [b.thought for b in normalizer.turn(1).thinking] == ["b"]


def test_usage_and_reasoning_tokens_are_kept() -> None:
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 9,
        "total_tokens": 12,
        "completion_tokens_details": {"reasoning_tokens": 7},
    }
    chunks = [chunk({"content": "x"}, "stop"), {"id": "c", "choices": [], "usage": usage}]
    out, normalizer = run_stream(render_stream(chunks))
    assert normalizer.turn().usage == usage
    assert normalizer.turn().reasoning_tokens == 7
    assert b'"usage"' in out


def test_groq_usage_inside_x_groq_is_kept() -> None:
    usage = {"prompt_tokens": 11, "completion_tokens": 4, "total_tokens": 15}
    first = {**chunk({"content": "x"}), "x_groq": {"id": "req_1"}}
    last = {**chunk({}, "stop"), "x_groq": {"id": "req_1", "usage": usage}}
    out, normalizer = run_stream(render_stream([first, last]))
    assert normalizer.turn().usage == usage
    assert b'"x_groq"' in out  # the client's chunks keep it, as Groq sent it


def test_tool_call_arguments_accumulate() -> None:
    chunks = [
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "get", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]}),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "1}"}}]}),
        chunk({}, "tool_calls"),
    ]
    _, normalizer = run_stream(render_stream(chunks))
    assert normalizer.turn().tool_calls == [ToolCall("call_9", "get", '{"a": 1}')]


@pytest.mark.parametrize("text", ["<", "a <", "<thi"])
def test_text_held_as_a_possible_tag_start_goes_out_before_the_tool_call(text: str) -> None:
    # the tail of the answer could begin a `<think>`; a tool call ends the
    # answer, so it goes out with the call's first delta, not after the call
    chunks = [
        chunk({"content": text}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "f", "arguments": ""},
                    }
                ]
            }
        ),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, "tool_calls"),
    ]
    out, normalizer = run_stream(render_stream(chunks))
    deltas = [
        orjson.loads(e[6:])["choices"][0]["delta"]
        for e in out.split(b"\n\n")
        if e.startswith(b"data: {")
    ]
    shown = ""
    for delta in deltas:
        shown += delta.get("content") or ""
        if delta.get("tool_calls"):
            break
    assert shown == text
    assert [type(p).__name__ for p in normalizer.turn().parts] == ["TextPart", "ToolCall"]


def test_comments_and_named_events_pass_through() -> None:
    body = b": OPENROUTER PROCESSING\n\nevent: custom\ndata: hello\n\n" + render_stream(
        [chunk({"content": "x"}, "stop")]
    )
    out, normalizer = run_stream(body)
    assert out.startswith(b": OPENROUTER PROCESSING\n\nevent: custom\ndata: hello\n\n")
    assert normalizer.state == DONE


def test_unchanged_events_are_forwarded_byte_for_byte() -> None:
    raw = (
        b'data: {"choices":[{"index":0,"delta":{"content":"caf\\u00e9"},"finish_reason":null}]}\n\n'
    )
    out, _ = run_stream(raw + b"data: [DONE]\n\n")
    assert out == raw + b"data: [DONE]\n\n"


# -- bad input: each has a defined result --------------------------------------


def test_malformed_json_ends_the_stream_with_an_error_event() -> None:
    body = render_stream([chunk({"content": "partial"})])[: -len(b"data: [DONE]\n\n")]
    out, normalizer = run_stream(body + b"data: {not json\n\n" + b"data: [DONE]\n\n")
    client = read_stream(out)
    assert client["content"] == "partial"
    assert client["errors"][0]["code"] == "malformed_upstream_event"
    assert not client["done"]
    assert normalizer.state == FAILED
    turn = normalizer.turn()
    assert not turn.complete
    assert turn.error == "malformed_upstream_event"
    assert turn.content == "partial"
    assert normalizer.feed(b"data: {}\n\n") == b""  # input after a failure is ignored


@pytest.mark.parametrize("split", [True, False])
def test_a_malformed_event_says_whether_data_came_before_it(split: bool) -> None:
    """In one read with a good event or in a read of its own, a broken event
    after data is a late failure (the stream has begun); one that is the
    stream's first data event, after comments only, is not."""
    good = render_stream([chunk({"content": "partial"})])[: -len(b"data: [DONE]\n\n")]
    bad = b"data: {not json\n\n"
    _, late = run_stream(good + bad, [good, bad] if split else None)
    assert late.failed_after_data
    _, first = run_stream(b": keep-alive\n\n" + bad)
    assert first.state == FAILED
    assert not first.failed_after_data


def test_over_long_line_ends_the_stream_with_an_error_event() -> None:
    normalizer = StreamNormalizer(NormalizeOptions(max_line_bytes=64))
    normalizer.feed(b"data: " + b"x" * 40)
    out = normalizer.feed(b"y" * 40)
    assert read_stream(out)["errors"][0]["code"] == "upstream_line_too_long"
    assert normalizer.state == FAILED
    assert normalizer.finish() == b""


def test_over_long_final_line_at_close() -> None:
    normalizer = StreamNormalizer(NormalizeOptions(max_line_bytes=64))
    normalizer.feed(b"data: " + b"x" * 50)
    normalizer._decoder._max = 10  # the bound also applies to what flush finds
    assert b"upstream_line_too_long" in normalizer.finish()


def test_chunk_without_choices_passes_through_unchanged() -> None:
    odd = b'data: {"object":"ping","n":1}\n\n'
    out, normalizer = run_stream(odd + render_stream([chunk({"content": "x"}, "stop")]))
    assert out.startswith(odd)
    assert normalizer.state == DONE


def test_json_that_is_not_an_object_passes_through() -> None:
    out, _ = run_stream(b"data: 42\n\ndata: [1,2]\n\n" + render_stream([chunk({}, "stop")]))
    assert out.startswith(b"data: 42\n\ndata: [1,2]\n\n")


@pytest.mark.parametrize(
    "odd",
    [b'{"choices":[{"index":0,"logprobs":null}]}', b'{"choices":[{"index":0,"delta":null}]}'],
)
def test_choice_without_delta_gets_an_empty_one(odd: bytes) -> None:
    out, normalizer = run_stream(
        b"data: " + odd + b"\n\n" + render_stream([chunk({"content": "x"})])
    )
    first = orjson.loads(out.split(b"\n\n")[0][6:])
    assert first["choices"][0]["delta"] == {}
    assert normalizer.state == DONE


@pytest.mark.parametrize("usage_only", [{"choices": None}, {}])
def test_chunk_with_null_or_no_choices_gets_an_empty_list(usage_only: Json) -> None:
    odd = {**chunk({}), **usage_only, "usage": {"total_tokens": 3}}
    if not usage_only:
        del odd["choices"]
    out, normalizer = run_stream(render_stream([chunk({"content": "x"}, "stop"), odd]))
    events = [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    assert events[-1]["choices"] == []
    assert events[-1]["usage"] == {"total_tokens": 3}
    assert normalizer.turn().usage == {"total_tokens": 3}


def test_error_object_with_null_choices_passes_through() -> None:
    odd = b'data: {"object":"chat.completion.chunk","choices":null,"error":{"message":"x"}}\n\n'
    out, _ = run_stream(render_stream([chunk({"content": "x"}, "stop")])[:-14] + odd)
    assert odd in out


def test_finish_without_delta_still_releases_held_text() -> None:
    body = render_stream([chunk({"content": "a <th"})])[:-14]
    body += b'data: {"choices":[{"index":0,"finish_reason":"stop"},"junk"]}\n\n'
    out, normalizer = run_stream(body)
    assert read_stream(out)["content"] == "a <th"
    assert normalizer.state == DONE


def test_close_before_finish_reason_is_a_failure() -> None:
    body = render_stream([chunk({"content": "cut <thi"})])[:-14]
    out, normalizer = run_stream(body)
    client = read_stream(out)
    assert client["errors"][0]["code"] == "upstream_closed"
    assert not client["done"]
    turn = normalizer.turn()
    assert not turn.complete
    assert turn.content == "cut <thi"


def test_close_after_finish_reason_without_done_ends_normally() -> None:
    body = render_stream([chunk({"content": "ok"}, "stop")])[:-14]
    out, normalizer = run_stream(body)
    client = read_stream(out)
    assert client["done"]
    assert not client["errors"]
    assert normalizer.turn().complete


def test_done_without_finish_reason_flushes_held_text() -> None:
    out, normalizer = run_stream(render_stream([chunk({"content": "tail <thi"})]))
    client = read_stream(out)
    assert client["content"] == "tail <thi"
    assert client["done"]
    assert normalizer.turn().finish_reason is None


def test_upstream_error_event_passes_through_and_marks_the_turn() -> None:
    err = {
        "id": "c",
        "error": {"code": "server_error", "message": "Provider disconnected"},
        "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": "error"}],
    }
    out, normalizer = run_stream(render_stream([chunk({"content": "x"}), err]))
    assert read_stream(out)["errors"][0]["message"] == "Provider disconnected"
    turn = normalizer.turn()
    assert not turn.complete
    assert turn.error == "upstream_error_event"
    named, normalizer = run_stream(b"event: error\ndata: boom\n\n" + render_stream([]))
    assert named.startswith(b"event: error\ndata: boom\n\n")
    assert not normalizer.turn().complete


def test_abort_sends_the_given_error_once() -> None:
    normalizer = StreamNormalizer()
    normalizer.feed(render_stream([chunk({"content": "<think>half"})])[:-14])
    out = normalizer.abort(StreamFailure("upstream_timeout", "idle", "timeout_error"))
    assert read_stream(out)["errors"] == [
        {"message": "idle", "type": "timeout_error", "param": None, "code": "upstream_timeout"}
    ]
    assert normalizer.abort(StreamFailure("x", "y")) == b""
    turn = normalizer.turn()
    assert [b.thought for b in turn.thinking] == ["half"]
    assert not turn.complete
    assert normalizer.failure is not None
    assert normalizer.failure.code == "upstream_timeout"


def test_turn_of_an_open_stream_is_incomplete() -> None:
    normalizer = StreamNormalizer()
    assert normalizer.state == OPEN
    assert normalizer.turn().error == "interrupted"
    normalizer.feed(render_stream([chunk({"content": "x"})])[:-14])
    assert normalizer.turn().content == "x"
    assert not normalizer.turn().complete


def test_reasoning_bytes_per_turn_are_bounded() -> None:
    chunks = [chunk({"reasoning_content": "x" * 10}) for _ in range(5)] + [chunk({}, "stop")]
    out, normalizer = run_stream(render_stream(chunks), max_reasoning_bytes=25)
    assert len(read_stream(out)["reasoning"]) == 50  # the client still gets all of it
    turn = normalizer.turn()
    assert turn.thinking[0].thought == "x" * 25  # cut at the bound
    assert turn.reasoning_truncated


# -- non-streaming -------------------------------------------------------------


def test_nonstream_body_without_choices_is_untouched() -> None:
    body = {"error": {"message": "bad"}}
    assert normalize_completion(body) == (False, None)
    body2: dict[str, Any] = {"choices": [{"index": 0, "text": "legacy"}]}
    assert normalize_completion(body2) == (False, None)


def test_nonstream_include_false_and_tool_calls() -> None:
    body: dict[str, Any] = {
        "id": "x",
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "content": None,
                    "reasoning": "plan",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
            }
        ],
    }
    changed, turn = normalize_completion(body, NormalizeOptions(include_in_response=False))
    assert changed
    assert body["choices"][0]["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    assert turn is not None
    assert turn.tool_call_ids == ["call_1"]
    assert turn.thinking[0].is_hidden
    assert turn.model == "m"
    assert turn.response_id == "x"


def test_nonstream_plain_body_is_unchanged() -> None:
    body = {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
        ]
    }
    before = copy.deepcopy(body)
    changed, turn = normalize_completion(body)
    assert not changed
    assert body == before
    assert turn is not None
    assert turn.content == "hi"


# -- edge paths ------------------------------------------------------------------


def test_done_in_an_unterminated_last_line() -> None:
    body = render_stream([chunk({"content": "x"}, "stop")])[: -len(b"\n\n")]
    out, normalizer = run_stream(body)
    assert out.endswith(b"data: [DONE]\n\n")
    assert normalizer.state == DONE


def test_multi_line_json_data_is_parsed_and_passed_on() -> None:
    body = b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "hi"}}]}\n\n'
    out, normalizer = run_stream(body + render_stream([chunk({}, "stop")]))
    assert out.startswith(b'data: {"choices": [{"index": 0,\ndata: "delta"')
    assert normalizer.turn().content == "hi"


def test_non_object_choices_are_skipped() -> None:
    odd = {
        "id": "c",
        "choices": [
            "junk",
            {"index": 0, "delta": {"content": "<think>r</think>a"}, "finish_reason": None},
        ],
    }
    out, normalizer = run_stream(render_stream([odd, chunk({}, "stop")]))
    assert read_stream(out)["content"] == "a"
    assert normalizer.turn().thinking[0].thought == "r"


def test_out_of_order_final_delta_with_held_text() -> None:
    chunks = [chunk({"content": "x<think>r</think>A<th"}, "stop")]
    out, _ = run_stream(render_stream(chunks))
    events = [orjson.loads(e[6:]) for e in out.split(b"\n\n") if e.startswith(b"data: {")]
    assert [e["choices"][0]["delta"] for e in events] == [
        {"content": "x"},
        {"reasoning_content": "r"},
        {"content": "A<th"},
    ]
    assert events[-1]["choices"][0]["finish_reason"] == "stop"


def test_held_reasoning_at_done_stays_off_the_wire_when_excluded() -> None:
    out, normalizer = run_stream(
        render_stream([chunk({"content": "<think>abc</thi"})]), include_in_response=False
    )
    assert b"abc" not in out
    assert normalizer.state == DONE
    assert normalizer.turn().thinking[0].thought == "abc</thi"


def test_whitespace_only_native_reasoning_makes_no_block() -> None:
    _, normalizer = run_stream(
        render_stream([chunk({"reasoning_content": "\n \n"}), chunk({"content": "a"}, "stop")])
    )
    assert normalizer.turn().thinking == []


def test_details_items_that_are_not_objects_are_ignored() -> None:
    chunks = [
        chunk({"reasoning_details": ["junk", {"type": "reasoning.summary", "summary": "short"}]}),
        chunk({}, "stop"),
    ]
    out, normalizer = run_stream(render_stream(chunks))
    assert read_stream(out)["reasoning"] == "short"
    assert normalizer.turn().thinking[0].thought == "short"


def test_finish_without_delta_and_nothing_held_gets_an_empty_delta() -> None:
    final = b'data: {"choices":[{"index":0,"finish_reason":"stop"}]}\n\n'
    body = render_stream([chunk({"content": "a"})])[:-14] + final + b"data: [DONE]\n\n"
    out, normalizer = run_stream(body)
    assert b'data: {"choices":[{"index":0,"finish_reason":"stop","delta":{}}]}\n\n' in out
    assert normalizer.turn().finish_reason == "stop"


def test_tap_records_what_the_first_choice_sends() -> None:
    chunks = [
        chunk({"reasoning_content": "native "}),
        chunk({"content": "plain "}),
        chunk({"content": "x<think>tagged</think>y"}),
        chunk({"content": "tail <th"}),
        chunk({}, "stop"),
    ]
    normalizer = StreamNormalizer()
    tap = normalizer.watch()
    normalizer.feed(render_stream(chunks))
    assert tap.pairs == [
        ("reasoning", "native "),
        ("content", "plain "),
        ("content", "xy"),
        ("content", "tail "),
        ("content", "<th"),
    ]
    hidden = StreamNormalizer(NormalizeOptions(include_in_response=False))
    hidden_tap = hidden.watch()
    hidden.feed(render_stream([chunk({"reasoning_content": "r"}), chunk({"content": "c"}, "stop")]))
    assert hidden_tap.pairs == [("content", "c")]
    ordered = StreamNormalizer()
    ordered_tap = ordered.watch()
    ordered.feed(render_stream([chunk({"content": "A<think>r</think>B"}, "stop")]))
    assert ordered_tap.pairs == [("content", "A"), ("reasoning", "r"), ("content", "B")]


def test_done_alone_after_a_held_prefix_releases_it() -> None:
    normalizer = StreamNormalizer()
    first = normalizer.feed(render_stream([chunk({"content": "a <th"})])[:-14])
    assert read_stream(first)["content"] == "a "
    out = normalizer.feed(b"data: [DONE]\n\n")
    assert read_stream(out) == {**read_stream(out), "content": "<th", "done": True}


def test_reads_that_need_no_change_are_forwarded_as_they_came() -> None:
    body = render_stream([chunk({"content": "plain"}), chunk({}, "stop")])
    normalizer = StreamNormalizer()
    assert normalizer.feed(body) == body
    assert normalizer.state == DONE


def test_a_new_block_past_the_reasoning_bound_keeps_what_fits() -> None:
    chunks = [
        chunk({"content": "<think>" + "x" * 30 + "</think>a<think>more</think>b<think>z</think>"}),
        chunk({}, "stop"),
    ]
    _, normalizer = run_stream(render_stream(chunks), max_reasoning_bytes=32)
    turn = normalizer.turn()
    assert [b.thought for b in turn.thinking] == ["x" * 30, "mo"]
    assert turn.reasoning_truncated


def test_tap_ignores_other_choices() -> None:
    first = {
        "id": "c",
        "choices": [{"index": 1, "delta": {"content": "other"}, "finish_reason": None}],
    }
    normalizer = StreamNormalizer()
    tap = normalizer.watch()
    normalizer.feed(render_stream([first, first, chunk({"content": "mine <th"})]))
    assert tap.pairs == [("content", "mine "), ("content", "<th")]  # held, then flushed


@pytest.mark.parametrize(
    "delta",
    [
        {"content": "hi"},
        {"tool_calls": [{"index": [1], "id": "a", "function": {"name": "f", "arguments": "{}"}}]},
        {"reasoning_details": [{"type": "reasoning.text", "text": "x", "index": {"a": 1}}]},
    ],
    ids=["choice", "tool-call", "detail"],
)
def test_an_index_that_is_a_list_or_an_object_does_not_break_the_stream(delta: Json) -> None:
    # never valid, but valid JSON: the stream goes on (keyed by the value's repr)
    event = {"id": "x", "choices": [{"index": [0], "delta": delta, "finish_reason": None}]}
    data = b"data: " + orjson.dumps(event) + b"\n\n"
    normalizer = StreamNormalizer()
    out = normalizer.feed(data + data)
    done = {"id": "x", "choices": [{"index": [0], "delta": {}, "finish_reason": "stop"}]}
    out += normalizer.feed(b"data: " + orjson.dumps(done) + b"\n\ndata: [DONE]\n\n")
    assert normalizer.state == DONE
    assert out.endswith(b"data: [DONE]\n\n")
    turn = normalizer.turn()
    assert turn.complete
    if "content" in delta:
        assert turn.content == "hihi"
    if "tool_calls" in delta:
        assert [(c.name, c.arguments) for c in turn.tool_calls] == [("ff", "{}{}")]


def test_an_upstream_event_id_stays_on_its_event() -> None:
    def event(delta: Json, id_: str | None = None, name: str | None = None) -> bytes:
        data = orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": delta}]})
        head = (f"id: {id_}\n" if id_ else "") + (f"event: {name}\n" if name else "")
        return head.encode() + b"data: " + data + b"\n\n"

    normalizer = StreamNormalizer()
    out = normalizer.feed(
        event({"content": "<think>a</think>b"}, "7")  # rewritten
        + event({"content": "c"}, "8")  # passed as it came
        + event({"content": "d"})
        + event({}, "9", "ping")  # a named event
    )
    decoder = SSEDecoder()
    got = [
        (e.id, e.event, orjson.loads(e.data)) for e in decoder.feed(out) if isinstance(e, SSEEvent)
    ]
    assert [(i, n) for i, n, _ in got] == [("7", None), ("8", None), ("8", None), ("9", "ping")]
    assert got[0][2]["choices"][0]["delta"] == {"content": "b", "reasoning_content": "a"}
    assert out.count(b"id: ") == 3


# -- a byte-order mark before the first event -------------------------------------

BOM = b"\xef\xbb\xbf"


@pytest.mark.parametrize(
    "sizes",
    [[], [1], [2], [3], [1, 1, 1], [1, 2], [4], [5, 10]],
    ids=lambda s: "-".join(map(str, s)) or "whole",
)
def test_a_leading_bom_does_not_cost_the_first_event(sizes: list[int]) -> None:
    body = render_stream(
        [chunk({"content": "<think>first thought</think>First"}), chunk({"content": "!"}, "stop")]
    )
    out, normalizer = run_stream(BOM + body, cut_at(BOM + body, sizes))
    assert BOM not in out
    client = read_stream(out)
    assert client["content"] == "First!"
    assert client["reasoning"] == "first thought"
    assert client["done"]
    assert not client["errors"]
    assert normalizer.turn().content == "First!"


def test_a_leading_bom_before_plain_events_is_not_forwarded() -> None:
    # the quick path forwards unchanged reads as they came: without the BOM
    body = render_stream([chunk({"content": "plain"}), chunk({}, "stop")])
    normalizer = StreamNormalizer()
    assert normalizer.feed(BOM[:1]) == b""
    assert normalizer.feed(BOM[1:] + body) == body


def test_a_first_error_event_behind_a_bom_is_seen() -> None:
    normalizer = StreamNormalizer()
    normalizer.feed(BOM + b'data: {"error": {"message": "overloaded"}}\n\n')
    assert normalizer.seen_data
    assert normalizer.first_error == {"message": "overloaded"}


def test_a_close_after_an_upstream_error_event_adds_no_second_error() -> None:
    normalizer = StreamNormalizer()
    body = render_stream([chunk({"content": "partial"}), {"error": {"message": "late"}}])
    out = normalizer.feed(body.removesuffix(b"data: [DONE]\n\n"))
    out += normalizer.finish()
    assert out.count(b'"error"') == 1
    assert b"upstream_closed" not in out
    assert normalizer.state == "failed"
    turn = normalizer.turn()
    assert (turn.complete, turn.error, turn.content) == (False, "upstream_error_event", "partial")


def test_an_over_long_line_keeps_the_events_before_it_in_the_same_read() -> None:
    """The good events of the read go out first; the stream has begun, so
    the failure is a late one (an error event, not a status)."""
    good = render_stream([chunk({"content": "partial"})])[: -len(b"data: [DONE]\n\n")]
    long = b"data: " + b"x" * 300 + b"\n\n"
    out, normalizer = run_stream(good + long, max_line_bytes=200)
    got = read_stream(out)
    assert got["content"] == "partial"
    assert [e["code"] for e in got["errors"]] == ["upstream_line_too_long"]
    assert normalizer.failed_after_data
    assert normalizer.turn().content == "partial"
    # the first data event over long: nothing came before it
    _, first = run_stream(b": keep-alive\n\n" + long, max_line_bytes=200)
    assert first.state == FAILED
    assert not first.failed_after_data


def test_an_over_long_line_after_done_changes_nothing() -> None:
    whole = render_stream([chunk({"content": "all"}, finish="stop")])
    out, normalizer = run_stream(whole + b"data: " + b"x" * 300 + b"\n\n", max_line_bytes=200)
    assert normalizer.state == DONE
    got = read_stream(out)
    assert got["content"] == "all"
    assert got["errors"] == []
    assert got["done"] is True


def test_a_refusal_is_the_turns_text_and_the_live_feeds_answer() -> None:
    normalizer = StreamNormalizer(NormalizeOptions())
    tap = normalizer.watch()
    body = render_stream(
        [chunk({"refusal": "I can't "}), chunk({"refusal": "help with that."}, finish="stop")]
    )
    out = normalizer.feed(body) + normalizer.finish()
    assert b"I can't " in out
    assert normalizer.turn().content == "I can't help with that."
    assert "".join(t for k, t in tap.pairs if k == "content") == "I can't help with that."
    whole = {
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": None, "refusal": "No."},
                "finish_reason": "stop",
            }
        ]
    }
    _, turn = normalize_completion(whole)
    assert turn is not None
    assert turn.content == "No."


def test_a_legacy_function_call_is_the_turns_tool_call() -> None:
    pieces = [
        chunk({"function_call": {"name": "get_weather", "arguments": ""}}),
        chunk({"function_call": {"arguments": '{"city": '}}),
        chunk({"function_call": {"arguments": '"Paris"}'}}, finish="function_call"),
    ]
    _, normalizer = run_stream(render_stream(pieces))
    [call] = normalizer.turn().tool_calls
    assert call.name == "get_weather"
    assert orjson.loads(call.arguments) == {"city": "Paris"}


@pytest.mark.parametrize("tail", [b'data: {"id": "x", "choi', b'data: {"usage": {"prompt_tok\n'])
def test_an_event_cut_in_half_after_the_finish_reason_is_only_lost(tail: bytes) -> None:
    """The answer is whole: the connection cutting the usage chunk in half
    ends it as a close without [DONE] does, not with an error."""
    whole = render_stream([chunk({"content": "all"}, finish="stop")])[: -len(b"data: [DONE]\n\n")]
    out, normalizer = run_stream(whole + tail)
    got = read_stream(out)
    assert normalizer.state == DONE
    assert (got["content"], got["errors"], got["done"]) == ("all", [], True)
    # a whole last event without its blank line still counts
    usage = b'data: {"choices": [], "usage": {"prompt_tokens": 3}}'
    out, normalizer = run_stream(whole + usage)
    assert b'"prompt_tokens": 3' in out or b'"prompt_tokens":3' in out
    assert normalizer.state == DONE
    # before the finish_reason, the cut is the stream's failure
    head = render_stream([chunk({"content": "half"})])[: -len(b"data: [DONE]\n\n")]
    _, cut = run_stream(head + tail)
    assert cut.state == FAILED
