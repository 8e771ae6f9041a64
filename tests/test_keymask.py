"""KeyMask: route keys masked in whole bodies, headers and split streams."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from proxy.keymask import MASK, KeyMask, credential_values, encoded_forms

KEY = "rk-route-secret-0123456789"
OTHER = "sk-other-route-key-abcdef"


def test_nothing_to_mask_costs_nothing() -> None:
    assert KeyMask.of([]) is None
    assert KeyMask.of(["short"]) is None  # too short to be a key: would mask ordinary text


def test_whole_text_bytes_and_headers() -> None:
    mask = KeyMask.of([KEY, OTHER])
    assert mask is not None
    assert mask.text(f"bad key {KEY}, and {OTHER}") == f"bad key {MASK}, and {MASK}"
    assert mask.data(f"x{KEY}x".encode()) == f"x{MASK}x".encode()
    assert mask.headers([("x-echo", f"Bearer {KEY}"), ("ok", "fine")]) == [
        ("x-echo", f"Bearer {MASK}"),
        ("ok", "fine"),
    ]


def test_a_key_that_contains_another_is_masked_whole() -> None:
    mask = KeyMask.of([KEY, KEY + "-longer"])
    assert mask is not None
    assert mask.text(KEY + "-longer") == MASK


def test_credential_values_takes_keys_and_credential_headers() -> None:
    values = credential_values(
        [KEY],
        [
            ("X-Api-Key", "xk-12345678"),
            ("Authorization", "Bearer tok-12345678"),
            ("X-Title", "App"),
        ],
    )
    assert values == [KEY, "xk-12345678", "tok-12345678"]


def test_a_stream_holds_back_only_a_possible_key_start() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    stream = mask.stream()
    assert stream.feed(b"data: hello\n\n") == b"data: hello\n\n"  # nothing held
    assert stream.feed(b"bad key " + KEY[:5].encode()) == b"bad key "
    assert stream.feed(KEY[5:].encode() + b" end") == MASK.encode() + b" end"
    assert stream.feed(b"tail rk-") == b"tail "
    assert stream.flush() == b"rk-"  # not a key after all: given back at the end
    assert stream.flush() == b""


def test_a_tail_that_starts_like_a_key_but_differs_is_not_held() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    stream = mask.stream()
    assert stream.feed(b"rk-x rk-rout") == b"rk-x "


@given(
    st.lists(st.sampled_from(["plain ", KEY, "rk-", OTHER, "\n\n", "r", "k-route"]), max_size=12),
    st.lists(st.integers(min_value=0, max_value=400), max_size=8),
)
def test_any_split_masks_like_the_whole(parts: list[str], cuts: list[int]) -> None:
    mask = KeyMask.of([KEY, OTHER])
    assert mask is not None
    data = "".join(parts).encode()
    expected = mask.data(data)
    points = sorted({min(c, len(data)) for c in cuts})
    stream = mask.stream()
    out = b""
    start = 0
    for point in [*points, len(data)]:
        out += stream.feed(data[start:point])
        start = point
    out += stream.flush()
    assert out == expected
    assert KEY.encode() not in out
    assert OTHER.encode() not in out


def test_a_key_is_also_masked_as_encoders_write_it() -> None:
    key = "rk/base64+key=0123456789"
    mask = KeyMask.of([key])
    assert mask is not None
    for form in (
        key,
        key.replace("/", "\\/"),  # PHP's json_encode
        "rk%2Fbase64%2Bkey%3D0123456789",
        "rk%2fbase64%2bkey%3d0123456789",
        "rk/base64%2Bkey%3D0123456789",  # a URL path
    ):
        assert mask.text(f"<{form}>") == f"<{MASK}>", form
        stream = mask.stream()
        cut = len(form) // 2
        out = stream.feed(form[:cut].encode()) + stream.feed(form[cut:].encode()) + stream.flush()
        assert out == MASK.encode(), form
    # most API keys read the same in every encoding: one form, no extra cost
    assert encoded_forms("sk-plain_key.0123~") == {"sk-plain_key.0123~"}


def _chunk(
    delta: dict[str, object], finish: str | None = None, index: int = 0, compact: bool = False
) -> bytes:
    choice = {"index": index, "delta": delta, "finish_reason": finish}
    body = {"id": "c1", "object": "chat.completion.chunk", "model": "m", "choices": [choice]}
    text = json.dumps(body, separators=(",", ":") if compact else None)
    return b"data: " + text.encode() + b"\n\n"


def _read(wire: bytes) -> list[tuple[int, str, str]]:
    """(choice, field, text) of every text delta, in order; [DONE] as (-1, "done", "")."""
    out = []
    for block in wire.split(b"\n\n"):
        if block == b"data: [DONE]":
            out.append((-1, "done", ""))
        elif block.startswith(b"data: {"):
            for choice in json.loads(block[6:])["choices"]:
                for field, value in choice["delta"].items():
                    if isinstance(value, str):
                        out.append((choice["index"], field, value))
                for item in choice["delta"].get("reasoning_details") or []:
                    out.append((choice["index"], f"detail{item['index']}", item["text"]))
                for call in choice["delta"].get("tool_calls") or []:
                    out.append(
                        (choice["index"], f"tool{call['index']}", call["function"]["arguments"])
                    )
                if choice.get("finish_reason"):
                    out.append((choice["index"], "finish", choice["finish_reason"]))
    return out


def _joined(items: list[tuple[int, str, str]]) -> list[tuple[int, str, str]]:
    """Runs of one choice and field joined, empty texts left out."""
    runs: list[tuple[int, str, str]] = []
    for index, field, text in items:
        if runs and runs[-1][:2] == (index, field) and field not in ("finish", "done"):
            runs[-1] = (index, field, runs[-1][2] + text)
        elif text or field in ("finish", "done"):
            runs.append((index, field, text))
    return [r for r in runs if r[2] or r[1] in ("finish", "done")]


def test_deltas_hold_a_possible_key_start_for_the_next_delta() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    deltas = mask.deltas()
    first = deltas.feed(_chunk({"content": "key=" + KEY[:6]}))
    assert _read(first) == [(0, "content", "key=")]  # the key's start waits
    second = deltas.feed(_chunk({"content": KEY[6:] + " ok"}))
    assert _read(second) == [(0, "content", f"{MASK} ok")]
    plain = _chunk({"content": "plain"}) + _chunk({"content": "text"})
    assert deltas.feed(plain) is plain  # no value ends like a key begins: not parsed
    assert deltas.flush() == b""


def test_held_text_goes_out_before_another_field_a_finish_and_done() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    deltas = mask.deltas()
    wire = deltas.feed(_chunk({"reasoning_content": "think rk-"}) + _chunk({"content": "answer."}))
    assert _read(wire) == [
        (0, "reasoning_content", "think "),
        (0, "reasoning_content", "rk-"),  # before the answer, in a chunk of its own
        (0, "content", "answer."),
    ]
    wire = deltas.feed(_chunk({"content": " rk-ro"}) + _chunk({}, "stop") + b"data: [DONE]\n\n")
    assert _read(wire) == [
        (0, "content", " "),
        (0, "content", "rk-ro"),
        (0, "finish", "stop"),
        (-1, "done", ""),
    ]
    assert wire.endswith(b"data: [DONE]\n\n")
    wire = deltas.feed(_chunk({"content": "rk-r"})) + deltas.flush()
    assert _read(wire) == [(0, "content", ""), (0, "content", "rk-r")]
    # a held frame is the stream's own: same id and model
    frame = json.loads(wire.split(b"\n\n")[1][6:])
    assert (frame["id"], frame["model"], frame["object"]) == ("c1", "m", "chat.completion.chunk")


def test_a_finish_holds_nothing_back_and_text_before_a_tool_call_goes_whole() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    deltas = mask.deltas()
    call = {"content": "rk-", "tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}
    assert deltas.feed(_chunk(call)) == _chunk(call)
    assert deltas.feed(_chunk({"content": "rk-"}, "stop")) == _chunk({"content": "rk-"}, "stop")
    assert deltas.flush() == b""


def _call(n: int, arguments: str, **more: object) -> dict[str, object]:
    return {"tool_calls": [{"index": n, "function": {"arguments": arguments}, **more}]}


def _detail(n: int, text: str) -> dict[str, object]:
    return {"reasoning_details": [{"type": "reasoning.text", "text": text, "index": n}]}


def test_tool_call_arguments_hold_a_possible_key_start_too() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    deltas = mask.deltas()
    wire = deltas.feed(
        _chunk(_call(0, '{"key": "' + KEY[:9], id="call_1", type="function"))
        + _chunk(_call(0, KEY[9:] + '"}'))
        + _chunk(_call(1, '{"a": "rk-', id="call_2", type="function"))
        + _chunk({}, "tool_calls")
    )
    calls = [
        (c["index"], c["function"]["arguments"])
        for block in wire.split(b"\n\n")
        if block.startswith(b"data: {")
        for c in json.loads(block[6:])["choices"][0]["delta"].get("tool_calls", [])
    ]
    assert calls == [(0, '{"key": "'), (0, MASK + '"}'), (1, '{"a": "'), (1, "rk-")]
    assert _read(wire)[-1] == (0, "finish", "tool_calls")  # after the held arguments
    assert deltas.flush() == b""


def test_choices_hold_apart_and_other_events_pass() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    deltas = mask.deltas()
    wire = deltas.feed(
        _chunk({"content": "a " + KEY[:4]}, index=0)
        + _chunk({"content": "b " + KEY[:9]}, index=1)
        + b": keep-alive\n\n"
        + _chunk({"content": KEY[4:]}, index=0)
    )
    assert _read(wire) == [(0, "content", "a "), (1, "content", "b "), (0, "content", MASK)]
    assert b": keep-alive\n\n" in wire  # a comment releases nothing
    usage = b'data: {"id":"c1","choices":[],"usage":{"total_tokens":3}}\n\n'
    wire = deltas.feed(usage)
    assert _read(wire) == [(1, "content", KEY[:9])]  # not a key after all: before the usage
    assert wire.endswith(usage)
    error = b'event: error\ndata: {"error":{"message":"x"}}\n\n'
    assert deltas.feed(error) == error


LONG = "eyJhbGciOi" + "Jxb2Rlc3Q" * 12  # a token longer than the pattern follows byte by byte
_PIECES = ["plain ", KEY, "rk-", OTHER, "r", "k-route", "-secret-0123456789", " "]
_PIECES += [LONG[:3], LONG[3:70], LONG[70:], "e"]


@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 1]),
            st.sampled_from(
                ["content", "reasoning_content", "reasoning", "tool0", "tool1", "detail0"]
            ),
            st.lists(st.sampled_from(_PIECES), min_size=1, max_size=4),
        ),
        max_size=14,
    ),
    st.booleans(),
    st.lists(st.integers(min_value=0, max_value=4000), max_size=10),
    st.booleans(),
)
def test_any_split_of_deltas_masks_like_the_joined_text(
    deltas_in: list[tuple[int, str, list[str]]], done: bool, cuts: list[int], compact: bool
) -> None:
    """Through both masks, as a stream is relayed: the client's joined texts,
    per choice and field, in order, are what the upstream's joined texts are
    masked; no key is whole in what it joins;
    [DONE] stays last."""
    mask = KeyMask.of([KEY, OTHER, LONG])
    assert mask is not None
    wire_in = b"".join(
        _chunk(
            _call(int(field[4:]), "".join(parts))
            if field.startswith("tool")
            else _detail(int(field[6:]), "".join(parts))
            if field.startswith("detail")
            else {field: "".join(parts)},
            index=i,
            compact=compact,
        )
        for i, field, parts in deltas_in
    )
    if done:
        wire_in += b"data: [DONE]\n\n"
    deltas, stream = mask.deltas(), mask.stream()  # as the relay chains them
    # reads of several events, and events cut anywhere
    points = [*sorted({min(c, len(wire_in)) for c in cuts}), len(wire_in)]
    wire, start = b"", 0
    for point in points:
        wire += stream.feed(deltas.feed(wire_in[start:point]))
        start = point
    wire += stream.feed(deltas.flush()) + stream.flush()
    got, sent = _read(wire), _read(wire_in)
    for choice in (0, 1):
        mine = _joined([item for item in got if item[0] == choice])
        want = _joined([item for item in sent if item[0] == choice])
        assert mine == [(i, f, mask.text(t)) for i, f, t in want]
        for _, _, text in mine:
            assert KEY not in text
            assert OTHER not in text
            assert LONG not in text
    assert [item for item in got if item[0] == -1] == ([(-1, "done", "")] if done else [])
    if done:
        assert got[-1] == (-1, "done", "")


def test_an_event_split_across_feeds_waits_for_its_end() -> None:
    mask = KeyMask.of([KEY])
    assert mask is not None
    deltas = mask.deltas()
    event = _chunk({"content": "say rk-ro"})
    assert deltas.feed(event[:10]) == b""
    assert deltas.feed(event[10:-1]) == b""
    wire = deltas.feed(event[-1:] + _chunk({"content": "ute-secret-0123456789!"}))
    assert _joined(_read(wire)) == [(0, "content", f"say {MASK}!")]
    assert deltas.feed(b"data: [DO") == b""
    assert deltas.flush() == b"data: [DO"  # an unended event at the end goes as it came
