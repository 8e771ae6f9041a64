"""proxy.reasoning.calls: which call a streamed tool-call piece belongs to,
for OpenAI's numbering and for the servers that bend it (Ollama's parallel
calls all at index 0, Gemini's and older Ollama's without an index,
llama.cpp's arguments as an object), through the normalizer too."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.calls import CallSlots, arguments_text, as_chat_call
from proxy.reasoning.modes import stream_as_completion
from proxy.reasoning.normalizer import StreamNormalizer, normalize_completion

LIMIT = 1 << 20


def piece(index: Any = None, call_id: str | None = None, name: str = "", args: Any = "") -> Any:
    out: dict[str, Any] = {"function": {"arguments": args}}
    if name:
        out["function"]["name"] = name
    if index is not None:
        out["index"] = index
    if call_id is not None:
        out["id"] = call_id
    return out


def slots_of(pieces: list[tuple[Any, int]]) -> tuple[list[int], list[Any]]:
    slots = CallSlots()
    got = [slots.slot(p, position) for p, position in pieces]
    return got, [slots.wire(n) for n in range(len(slots))]


def test_openai_numbering_is_kept() -> None:
    got, wire = slots_of(
        [
            (piece(0, "call_a", "f", "{"), 0),
            (piece(0, args="}"), 0),
            (piece(1, "call_b", "g", "{"), 0),
            (piece(0, args=" "), 0),  # interleaved pieces of parallel calls
            (piece(1, args="}"), 0),
        ]
    )
    assert got == [0, 0, 1, 0, 1]
    assert wire == [0, 1]


def test_a_call_that_repeats_its_id_on_each_piece_stays_one_call() -> None:
    got, _ = slots_of([(piece(0, "call_a", "f", "{"), 0), (piece(0, "call_a", args="}"), 0)])
    assert got == [0, 0]


def test_a_new_id_at_a_taken_index_is_a_new_call_at_the_next_free_index() -> None:
    # Ollama: each of several parallel calls whole, all at index 0
    got, wire = slots_of(
        [
            (piece(0, "call_a", "f", "{}"), 0),
            (piece(0, "call_b", "g", "{}"), 0),
            (piece(0, args=""), 0),  # continues the call index 0 names now
            (piece(1, "call_c", "h", "{}"), 0),
        ]
    )
    assert got == [0, 1, 1, 2]
    assert wire == [0, 1, 2]  # call_c's own index 1 was taken: it goes after


def test_pieces_without_an_index() -> None:
    # Gemini: whole calls with ids; a piece with no id continues the last
    got, wire = slots_of(
        [
            (piece(call_id="call_a", name="f", args="{"), 0),
            (piece(args="}"), 0),
            (piece(call_id="call_b", name="g", args="{}"), 0),
            (piece(name="h", args="{}"), 0),  # a second name: another call
            (piece(args="{}"), 1),  # not the first of its chunk: another call
        ]
    )
    assert got == [0, 0, 1, 2, 3]
    assert wire == [0, 1, 2, 3]


def test_a_late_id_and_a_late_name_continue_their_call() -> None:
    got, _ = slots_of(
        [
            (piece(0, args=""), 0),
            (piece(0, "call_a", "f", "{}"), 0),
            (piece(call_id="x"), 0),  # no index: the last call took its id late
            (piece(name="g"), 0),
        ]
    )
    assert got == [0, 0, 1, 1]


def test_odd_indexes_are_keys_as_they_came() -> None:
    got, wire = slots_of([(piece([1]), 0), (piece([1], args="x"), 0), (piece("2"), 0)])
    assert got == [0, 0, 1]
    assert wire == ["[1]", "2"]


def test_arguments_text_and_the_chat_shape() -> None:
    assert arguments_text('{"a":1}') == '{"a":1}'
    assert arguments_text({"a": 1}) == '{"a":1}'
    assert arguments_text([1]) == "[1]"
    assert arguments_text(None) is None
    assert arguments_text(3) is None
    call: dict[str, Any] = {"index": 0, "function": {"name": "f", "arguments": {"a": 1}}}
    assert as_chat_call(call, 1)
    assert call == {"index": 1, "function": {"name": "f", "arguments": '{"a":1}'}}
    assert not as_chat_call(call, 1)
    assert not as_chat_call(call, None)
    assert not as_chat_call({"index": [0]}, "[0]")  # odd indexes stay as they came
    assert as_chat_call({"function": {}}, 0)  # a piece without an index gets its slot's


pieces = st.lists(
    st.tuples(
        st.sampled_from([None, 0, 1, 2]),
        st.sampled_from([None, "a", "b", "c", "d"]),
        st.booleans(),
        st.integers(0, 2),
    ),
    max_size=12,
)


@given(pieces)
def test_no_call_has_two_ids_and_int_indexes_are_distinct(drawn: list[Any]) -> None:
    slots = CallSlots()
    ids: dict[int, set[str]] = {}
    for index, call_id, named, position in drawn:
        n = slots.slot(piece(index, call_id, "f" if named else ""), position)
        assert 0 <= n < len(slots)
        if call_id is not None:
            ids.setdefault(n, set()).add(call_id)
    assert all(len(found) == 1 for found in ids.values())
    wire = [slots.wire(n) for n in range(len(slots))]
    assert len(set(wire)) == len(wire)


OLLAMA = [
    {"role": "assistant", "content": ""},
    {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_a",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
            }
        ]
    },
    {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_b",
                "type": "function",
                "function": {"name": "get_time", "arguments": {"tz": "UTC"}},
            }
        ]
    },
]


def sse(deltas: list[dict[str, Any]]) -> bytes:
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
        for choice in [{"index": 0, "delta": d, "finish_reason": None} for d in deltas]
        + [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]
    ]
    return b"".join(b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"


def test_the_normalizer_gives_a_chat_client_two_calls_and_stores_both() -> None:
    normalizer = StreamNormalizer()
    out = normalizer.feed(sse(OLLAMA)) + normalizer.finish()
    whole = stream_as_completion(out, LIMIT)
    calls = whole["choices"][0]["message"]["tool_calls"]
    assert [(c["id"], c["function"]["name"], c["function"]["arguments"]) for c in calls] == [
        ("call_a", "get_weather", '{"city":"Paris"}'),
        ("call_b", "get_time", '{"tz":"UTC"}'),
    ]
    sent = [
        orjson.loads(line[6:])
        for line in out.split(b"\n\n")
        if line.startswith(b"data: {") and b'"tool_calls":[' in line
    ]
    indexes = [c["index"] for s in sent for c in s["choices"][0]["delta"]["tool_calls"]]
    assert indexes == [0, 1]
    turn = normalizer.turn()
    stored = [(c.id, c.name, c.arguments) for c in turn.tool_calls]
    assert stored == [
        ("call_a", "get_weather", '{"city":"Paris"}'),
        ("call_b", "get_time", '{"tz":"UTC"}'),
    ]


def test_a_whole_answers_object_arguments_become_a_string() -> None:
    call = {"id": "call_a", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    body: dict[str, Any] = {
        "choices": [{"index": 0, "message": {"role": "assistant", "tool_calls": [call]}}]
    }
    changed, turn = normalize_completion(body)
    assert changed
    assert call["function"]["arguments"] == '{"a":1}'
    assert "index" not in call  # a message's calls carry no index
    assert turn is not None
    assert [c.arguments for c in turn.tool_calls] == ['{"a":1}']
