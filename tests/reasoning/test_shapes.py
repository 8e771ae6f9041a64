"""Chunk shapes: `learn` and `Shape.text` on their own, and the normalizer with
shapes on against the normalizer that parses every chunk (they must agree)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proxy.reasoning.normalizer import NormalizeOptions, StreamNormalizer
from proxy.reasoning.output import OUTPUTS
from proxy.reasoning.shapes import Shape, _delta_span, _proves, learn
from proxy.reasoning.sse import SSEComment, SSEDecoder, SSEEvent
from proxy.reasoning.tags import TagSet
from tests.casefiles import chunk, cut_at

Json = dict[str, Any]


def deepseek(
    delta: Json,
    finish: str | None = None,
    *,
    id: str = "chatcmpl-7f3a",
    model: str = "deepseek-reasoner",
) -> Json:
    """A chunk as DeepSeek streams it: an envelope with a fingerprint, and
    `logprobs` next to the delta."""
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1735000000,
        "model": model,
        "system_fingerprint": "fp_58cd7d3b4b",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def native(text: str, **kw: Any) -> Json:
    return deepseek({"content": None, "reasoning_content": text}, **kw)


def answer(text: str, **kw: Any) -> Json:
    return deepseek({"content": text, "reasoning_content": None}, **kw)


def learned(obj: Json, dumps: Callable[[Json], bytes] = orjson.dumps) -> Shape:
    data = dumps(obj)
    shape = learn(data, orjson.loads(data))
    assert shape is not None
    return shape


def spaced(obj: Json) -> bytes:
    """Python's json.dumps: a space after every colon and comma, non-ASCII escaped."""
    return json.dumps(obj).encode()


def spaced_utf8(obj: Json) -> bytes:
    return json.dumps(obj, ensure_ascii=False).encode()


def compact_ascii(obj: Json) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def check_reading(shape: Shape, learned_obj: Json, data: bytes) -> str | None:
    """`shape.text(data)`, checked for soundness: a text is only read from a
    chunk that parses to the learned chunk with that one text changed."""
    text = shape.text(data)
    if text is not None:
        expected = copy.deepcopy(learned_obj)
        expected["choices"][0]["delta"][shape.field] = text
        assert orjson.loads(data) == expected
    return text


# -- learn and Shape.text --------------------------------------------------------

TEXTS = [
    "x",
    "line\nbreak",
    'a "quoted" word',
    "back\\slash",
    "café",
    "\u00e9\u00e8",
    "😀 and 🤔",
    "\t\r\x01\x1f\x7f",
    "\u2028\u2029",
    "<think>",
    '","x":"b',
    "\\u0041",
    "",
]


def test_learn_a_deepseek_reasoning_chunk() -> None:
    obj = native("abc")
    data = orjson.dumps(obj)
    shape = learn(data, orjson.loads(data))
    assert shape is not None
    assert shape.field == "reasoning_content"
    assert shape.index == 0
    assert shape.delta == {"content": None, "reasoning_content": "abc"}
    assert list(shape.delta) == ["content", "reasoning_content"]  # upstream's key order
    assert shape.prefix.endswith(b'"reasoning_content":"')
    assert shape.suffix.startswith(b'"}')
    assert shape.prefix + b"abc" + shape.suffix == data
    assert shape.head is not None
    assert shape.head + orjson.dumps(obj["choices"][0]["delta"]) + shape.tail == data
    assert shape.text(data) == "abc"
    assert shape.with_text("z") == {"content": None, "reasoning_content": "z"}
    assert shape.delta["reasoning_content"] == "abc"  # with_text copies


def test_learn_a_content_chunk() -> None:
    shape = learned(answer("Hello"))
    assert shape.field == "content"
    assert shape.delta == {"content": "Hello", "reasoning_content": None}
    assert shape.text(orjson.dumps(answer(" world"))) == " world"
    assert shape.text(orjson.dumps(native(" world"))) is None
    plain = learned(chunk({"content": "Hello"}))
    assert plain.text(orjson.dumps(chunk({"content": "!"}))) == "!"


def test_learn_with_an_index_and_without_one() -> None:
    obj = native("abc")
    obj["choices"][0]["index"] = 3
    assert learned(obj).index == 3
    del obj["choices"][0]["index"]
    assert learned(obj).index == 0


@pytest.mark.parametrize("text", TEXTS)
def test_text_reads_chunks_of_the_same_shape(text: str) -> None:
    obj = native("abc")
    shape = learned(obj)
    assert check_reading(shape, obj, orjson.dumps(native(text))) == text
    # the same text written otherwise: non-ASCII escaped, or raw UTF-8
    body = json.dumps(text)[1:-1].encode()
    assert check_reading(shape, obj, shape.prefix + body + shape.suffix) == text
    body = json.dumps(text, ensure_ascii=False)[1:-1].encode()
    assert check_reading(shape, obj, shape.prefix + body + shape.suffix) == text


def test_text_reads_escapes() -> None:
    obj = native("abc")
    shape = learned(obj)

    def read(body: bytes) -> str | None:
        return check_reading(shape, obj, shape.prefix + body + shape.suffix)

    assert read(b"a\\nb") == "a\nb"
    assert read(b'say \\"hi\\"') == 'say "hi"'
    assert read(b"c:\\\\dir") == "c:\\dir"
    assert read(b"caf\\u00e9") == "café"
    assert read(b"caf\\u00E9") == "café"
    assert read(b"\\ud83d\\ude00") == "😀"
    assert read("caf\u00e9 😀".encode()) == "café 😀"
    assert read(b"\\/\\b\\f\\r\\t") == "/\b\f\r\t"
    assert read(b"") == ""
    assert read(b"\\\\") == "\\"


@pytest.mark.parametrize(
    "body",
    [
        b'a","x":"b',  # an extra key: another shape
        b'a"',  # the closing quote moved
        b'"',
        b"a\\",  # the closing quote escaped
        b"\xff",  # invalid UTF-8
        b"caf\xc3",  # a truncated sequence
        b"\xed\xa0\x80",  # an encoded surrogate
        b"\xc0\xaf",  # an overlong encoding
        b"a\nb",  # raw control characters
        b"a\tb",
        b"\x00",
        b"\x1f",
        b"\\x41",  # invalid escapes
        b"\\u12",
        b"\\u12g4",
        b"\\ud800",  # a lone surrogate
        b"\\ude00x",
        b"\\",
    ],
)
def test_text_refuses_bodies_that_are_no_json_string(body: bytes) -> None:
    obj = native("abc")
    shape = learned(obj)
    assert shape.text(shape.prefix + body + shape.suffix) is None


@pytest.mark.parametrize(
    "other",
    [
        native("abc", id="chatcmpl-other"),
        native("abc", model="deepseek-chat"),
        {**native("abc"), "usage": None},
        native("abc", finish="stop"),
        deepseek({"reasoning_content": "abc"}),
        deepseek({"content": None, "reasoning_content": "abc", "role": None}),
        deepseek({"content": "abc", "reasoning_content": None}),
        {
            **native("abc"),
            "choices": [
                native("abc")["choices"][0],
                {**native("abc")["choices"][0], "index": 1},
            ],
        },
    ],
    ids=[
        "other-id",
        "other-model",
        "extra-key",
        "finish-reason",
        "fewer-keys",
        "more-keys",
        "other-field",
        "two-choices",
    ],
)
def test_text_refuses_chunks_of_other_shapes(other: Json) -> None:
    obj = native("abc")
    shape = learned(obj)
    assert shape.text(orjson.dumps(other)) is None
    assert shape.text(spaced(obj)) is None  # the same chunk, written otherwise


def test_text_refuses_a_chunk_where_prefix_and_suffix_overlap() -> None:
    shape = learned(native("abc"))
    # the prefix ends with the opening quote, the suffix starts with the closing
    # one: one shared quote makes bytes that start with one and end with the other
    assert shape.prefix[-1:] == shape.suffix[:1] == b'"'
    short = shape.prefix + shape.suffix[1:]
    assert short.startswith(shape.prefix)
    assert short.endswith(shape.suffix)
    assert len(short) < len(shape.prefix) + len(shape.suffix)
    assert shape.text(short) is None
    assert shape.text(shape.prefix) is None
    assert shape.text(shape.suffix) is None
    assert shape.text(b"") is None


@pytest.mark.parametrize(
    "obj",
    [
        deepseek({"role": "assistant", "content": "", "reasoning_content": "abc"}),
        deepseek({"role": "assistant", "content": "abc"}),
        deepseek({"content": "a", "reasoning_content": "b"}),
        deepseek({"content": "abc", "refusal": "no"}),
        deepseek({"reasoning": "abc"}),
        deepseek({"content": None, "reasoning": None, "thinking": "abc"}),
        deepseek(
            {
                "content": "abc",
                "tool_calls": [{"index": 0, "function": {"arguments": "{}"}}],
            }
        ),
        deepseek({"tool_calls": [{"index": 0, "id": "call_1", "function": {"name": "f"}}]}),
        {**native("abc"), "usage": {"prompt_tokens": 1, "completion_tokens": 1}},
        {**native("abc"), "usage": None},
        {**native("abc"), "error": {"message": "boom"}},
        native("abc", finish="stop"),
        answer("abc", finish="length"),
        native(""),
        answer(""),
        deepseek({"content": None, "reasoning_content": None}),
        deepseek({}),
        deepseek({"content": 5}),
        deepseek({"reasoning_content": ["abc"]}),
        deepseek({"content": {"text": "abc"}}),
        deepseek({"content": "abc", "reasoning_content": ""}),
        deepseek({"content": "abc", "reasoning_content": False}),
        {**native("abc"), "choices": native("abc")["choices"] * 2},
        {**native("abc"), "choices": []},
        {**native("abc"), "choices": None},
        {**native("abc"), "choices": {"0": native("abc")["choices"][0]}},
        {**native("abc"), "choices": ["abc"]},
        {**native("abc"), "choices": [{"index": 0, "delta": "abc"}]},
        {**native("abc"), "choices": [{"index": 0, "message": {"content": "abc"}}]},
        {"id": "x", "object": "ping"},
    ],
)
def test_learn_refuses_what_is_no_single_text_delta(obj: Json) -> None:
    data = orjson.dumps(obj)
    assert learn(data, orjson.loads(data)) is None


def test_learn_leaves_the_parsed_object_as_it_was() -> None:
    obj = native("abc")
    data = orjson.dumps(obj)
    parsed = orjson.loads(data)
    assert learn(data, parsed) is not None
    assert parsed == obj
    assert orjson.dumps(parsed) == data  # key order kept too


@pytest.mark.parametrize("dumps", [spaced, spaced_utf8], ids=["ascii", "utf8"])
def test_learn_with_spaces_after_colons(dumps: Callable[[Json], bytes]) -> None:
    obj = native("abc")
    data = dumps(obj)
    assert b'"reasoning_content": "abc"' in data
    shape = learned(obj, dumps)
    assert shape.prefix.endswith(b'"reasoning_content": "')
    assert shape.head is None  # the delta is not written as orjson writes it
    for text in TEXTS:
        assert check_reading(shape, obj, dumps(native(text))) == text
    assert shape.text(orjson.dumps(native("abc"))) is None


def test_learn_needs_the_text_written_as_orjson_writes_it() -> None:
    # "café" is written as caf\u00e9 by json.dumps: not found, not learned
    data = compact_ascii(native("café"))
    assert learn(data, orjson.loads(data)) is None
    # an ASCII text teaches the shape, which then reads escaped texts too
    shape = learned(native("abc"), compact_ascii)
    assert shape.head is not None
    assert check_reading(shape, native("abc"), compact_ascii(native("café 😀"))) == "café 😀"


def template(text: str, other: str) -> list[tuple[str, bytes]]:
    """Chunks in which the text occurs more than once, as (name, bytes):
    `other` is what the second occurrence holds."""
    body = orjson.dumps(native(text))
    twin = orjson.dumps({"content": None, "reasoning_content": other})
    t, o = orjson.dumps(text), orjson.dumps(other)
    return [
        # an id with the text's value
        ("same-id", orjson.dumps(native(text, id=other))),
        # another object with the same key and value, before and after the delta
        ("twin-before", b'{"x":{"reasoning_content":' + o + b"}," + body[1:]),
        ("twin-after", body[:-1] + b',"x":{"reasoning_content":' + o + b"}}"),
        ("twin-spaced-before", b'{"x":{"reasoning_content": ' + o + b"}," + body[1:]),
        ("twin-spaced-after", body[:-1] + b',"x":{"reasoning_content": ' + o + b"}}"),
        # a whole copy of the delta elsewhere
        ("delta-before", b'{"x":' + twin + b"," + body[1:]),
        ("delta-after", body[:-1] + b',"x":' + twin + b"}"),
        # duplicate keys in the delta (the last one wins)
        (
            "duplicate-first",
            body.replace(
                b'"reasoning_content":' + t,
                b'"reasoning_content":' + o + b',"reasoning_content":' + t,
            ),
        ),
        (
            "duplicate-spaced-first",
            body.replace(
                b'"reasoning_content":' + t,
                b'"reasoning_content": ' + o + b',"reasoning_content":' + t,
            ),
        ),
        (
            "duplicate-spaced-last",
            body.replace(
                b'"reasoning_content":' + t,
                b'"reasoning_content":' + o + b',"reasoning_content": ' + t,
            ),
        ),
    ]


NAMES = [name for name, _ in template("abc", "abc")]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("other", ["abc", "zzz"])
def test_learn_where_the_text_occurs_twice_refuses_or_is_right(name: str, other: str) -> None:
    data = dict(template("abc", other))[name]
    obj = orjson.loads(data)
    shape = learn(data, obj)
    if shape is None:
        return
    # a learned shape reads the learned chunk and others like it correctly...
    assert check_reading(shape, obj, data) == obj["choices"][0]["delta"][shape.field]
    for text in ["NEW", "", 'q"uote', "😀"]:
        changed = dict(template(text, other))[name]
        assert check_reading(shape, obj, changed) == text
        # ...and never reads the other occurrence as the text
        moved = dict(template("abc", text))[name]
        check_reading(shape, obj, moved)


@given(
    st.text(min_size=1),
    st.text(),
    st.sampled_from(NAMES),
)
def test_learn_where_the_text_occurs_twice_generated(text: str, new: str, name: str) -> None:
    for other in (text, new):
        data = dict(template(text, other))[name]
        obj = orjson.loads(data)
        shape = learn(data, obj)
        if shape is None:
            continue
        assert check_reading(shape, obj, dict(template(new, other))[name]) == new
        check_reading(shape, obj, dict(template(text, new))[name])


# a chunk's envelope, drawn: any JSON-ish values, any key order
scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**40), 2**40), st.text(max_size=6))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
RENDERERS: list[Callable[[Json], bytes]] = [orjson.dumps, spaced, spaced_utf8, compact_ascii]


@given(
    st.dictionaries(
        st.sampled_from(["id", "model", "x", "reasoning_content", "content", "usage_"]),
        values,
        max_size=4,
    ),
    st.sampled_from(["content", "reasoning_content"]),
    st.text(min_size=1),
    st.text(),
    st.sampled_from(RENDERERS),
    st.booleans(),
)
def test_learned_shapes_read_exactly_the_chunks_they_describe(
    envelope: Json,
    field: str,
    text: str,
    new: str,
    dumps: Callable[[Json], bytes],
    null_other: bool,
) -> None:
    def make(t: str) -> Json:
        delta: Json = {field: t}
        if null_other:
            delta["content" if field == "reasoning_content" else "reasoning_content"] = None
        return {**envelope, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}

    obj = make(text)
    data = dumps(obj)
    shape = learn(data, orjson.loads(data))
    # (json.dumps escapes DEL, which orjson writes as it is)
    plain = text.isascii() and "\x7f" not in text
    if (dumps is orjson.dumps or dumps is spaced_utf8 or plain) and data.count(
        orjson.dumps(field)
    ) == 1:
        # the common writings, the field's name nowhere else: the text is
        # found, and the shape is learned
        assert shape is not None
    if shape is None:
        return
    assert shape.field == field
    assert check_reading(shape, obj, data) == text
    assert check_reading(shape, obj, dumps(make(new))) == new
    for other in RENDERERS:
        check_reading(shape, obj, other(make(new)))
    # an envelope value changed: another chunk, never read as this shape
    for key in envelope:
        changed = {**obj, key: [envelope[key]]}
        assert shape.text(dumps(changed)) is None


# -- the normalizer: shapes on and off agree -------------------------------------

INTERESTING = [
    "",
    '"',
    "\\",
    "\n",
    "é",
    "😀",
    "<think>",
    "</think>",
    "<th",
    "ink>",
    "</",
    "think>",
    "<",
    '","x":"',
    "\\u00e9",
    " ",
    "[THINK]",
    "[/THINK]",
    "<|channel|>analysis<|message|>",
    "<|end|>",
    "<|start|>assistant<|channel|>final<|message|>",
    "<answer>",
    "<tool_call>",
]
texts = st.one_of(
    st.text(max_size=8),
    st.sampled_from(INTERESTING),
    st.lists(st.sampled_from(INTERESTING), min_size=1, max_size=4).map("".join),
)

# the kinds of chunk in a stream, drawn as runs of one kind
KINDS = [
    "native",  # DeepSeek: reasoning_content, content null
    "native-bare",  # reasoning_content alone
    "content",  # content, reasoning_content null
    "content-bare",  # content alone
    "think",  # content "<think>", or the tag split over two chunks
    "unthink",  # content "</think>"
    "reasoning",  # vLLM's field
    "tool",
    "other-id",
    "extra-key",
    "role",
    "empty",
    "comment",
    "spaced",  # a chunk written as json.dumps writes, in a stream written otherwise
]
PALETTES = [
    ["native", "native-bare", "content", "content-bare", "empty"],  # reasoning models
    ["content", "content-bare", "think", "unthink", "empty"],  # tags in the answer
    KINDS,
]
BROKEN = [b"\x01", b"\xff", b"\\x", b"\\ud800", b'","x":"', b'"', b"\\"]


def step_chunks(kind: str, text: str, make: Callable[..., Json]) -> list[Json]:
    if kind == "native":
        return [make({"content": None, "reasoning_content": text})]
    if kind == "native-bare":
        return [make({"reasoning_content": text})]
    if kind in ("content", "think", "unthink"):
        if kind != "content":
            tag = "<think>" if kind == "think" else "</think>"
            cut = len(text) % (len(tag) + 1)
            return [make({"content": tag[:cut]}), make({"content": tag[cut:] + text})]
        return [make({"content": text, "reasoning_content": None})]
    if kind == "content-bare":
        return [make({"content": text})]
    if kind == "reasoning":
        return [make({"reasoning": text})]
    if kind == "tool":
        call = {"index": 0, "id": "call_1", "type": "function"}
        return [make({"tool_calls": [{**call, "function": {"name": "f", "arguments": text}}]})]
    if kind == "other-id":
        return [make({"content": None, "reasoning_content": text}, id="chatcmpl-other")]
    if kind == "extra-key":
        return [{**make({"content": text}), "x": text}]
    if kind == "role":
        return [make({"role": "assistant", "content": text})]
    assert kind in ("empty", "spaced")
    return [make({"content": text} if kind == "spaced" else {})]


@st.composite
def streams(draw: st.DrawFn) -> bytes:
    """An upstream event stream: runs of the chunks upstreams send, written
    compactly or as json.dumps writes, maybe ended, maybe broken."""
    make: Callable[..., Json] = draw(st.sampled_from([deepseek, chunk]))
    dumps = draw(st.sampled_from(RENDERERS))
    palette = draw(st.sampled_from(PALETTES))
    events: list[bytes] = []
    if draw(st.booleans()):
        role: Json = {"role": "assistant", "content": ""}
        if draw(st.booleans()):
            role["reasoning_content"] = None
        events.append(dumps(make(role)))
    runs = st.lists(texts, min_size=1, max_size=8)
    for kind, run in draw(st.lists(st.tuples(st.sampled_from(palette), runs), max_size=10)):
        for text in run:
            if kind == "comment":
                events.append(b": keep-alive")
                continue
            for obj in step_chunks(kind, text, make):
                events.append(spaced(obj) if kind == "spaced" else dumps(obj))
    if draw(st.integers(0, 7)) == 7:  # a chunk of a learned shape, broken inside its text
        at = draw(st.integers(0, len(events)))
        data = dumps(make({"content": None, "reasoning_content": "a\x02b"}))
        mark = orjson.dumps("\x02")[1:-1] if dumps is orjson.dumps else b"\\u0002"
        events.insert(at, data.replace(mark, draw(st.sampled_from(BROKEN))))
    ending = draw(st.sampled_from(["finish", "finish", "finish+usage", "done-only", "none"]))
    if ending.startswith("finish"):
        events.append(dumps(make({}, draw(st.sampled_from(["stop", "length"])))))
    if ending == "finish+usage":
        usage = {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}
        events.append(dumps({"id": "chatcmpl-7f3a", "choices": [], "usage": usage}))
    body = b"".join(e + b"\n\n" if e.startswith(b":") else b"data: " + e + b"\n\n" for e in events)
    if ending == "done-only" or (ending != "none" and draw(st.booleans())):
        body += b"data: [DONE]\n\n"
    if draw(st.integers(0, 7)) == 7:  # CRLF framing: events the decoder builds objects for
        body = body.replace(b"\n", b"\r\n")
    return body


def events_of(out: bytes) -> list[Any]:
    """What a client reads: each event's parsed JSON (in its key order), or
    its literal data when it is no JSON ([DONE]), and comments."""
    decoder = SSEDecoder()
    parsed: list[Any] = []
    for ev in decoder.feed(out) + decoder.flush():
        if isinstance(ev, SSEComment):
            parsed.append(("comment", ev.text))
            continue
        assert isinstance(ev, SSEEvent)
        try:
            value = orjson.dumps(orjson.loads(ev.data))
        except orjson.JSONDecodeError:
            value = ev.data
        parsed.append((ev.event, value))
    return parsed


def run(pieces: list[bytes], options: NormalizeOptions, tap: bool) -> tuple[Any, StreamNormalizer]:
    """Feed the reads to a normalizer: what the client reads, and the normalizer."""
    normalizer = StreamNormalizer(options)
    if tap:
        normalizer.watch()
    out = b"".join(normalizer.feed(p) for p in pieces)
    return events_of(out + normalizer.finish()), normalizer


def assert_same(
    pieces: list[bytes], include: bool, max_reasoning_bytes: int = 1 << 24, **more: Any
) -> tuple[StreamNormalizer, StreamNormalizer]:
    """The normalizer with shapes and the one that parses every chunk agree:
    events, state, turns, and what the tap saw (with a tap, and without one,
    which lets the shape path take more)."""
    options = NormalizeOptions(
        include_in_response=include, max_reasoning_bytes=max_reasoning_bytes, **more
    )
    results = []
    for tap in (True, False):
        fast_out, fast = run(pieces, replace(options, shapes=True), tap)
        slow_out, slow = run(pieces, replace(options, shapes=False), tap)
        assert fast_out == slow_out
        assert fast.state == slow.state
        assert fast.failure == slow.failure
        assert (fast.tap.pairs if fast.tap else None) == (slow.tap.pairs if slow.tap else None)
        assert fast.turn() == slow.turn()
        for index in (0, 1):
            assert fast.turn(index) == slow.turn(index)
        assert not slow._shapes
        results.append((fast_out, fast, slow))
    (with_tap, fast, slow), (without_tap, other, _) = results
    assert with_tap == without_tap
    assert fast.turn() == other.turn()
    return fast, slow


@given(
    streams(),
    st.lists(st.integers(min_value=0, max_value=60), max_size=40),
    st.booleans(),
    st.sampled_from([1 << 24, 1, 7, 40]),
)
def test_shapes_on_and_off_give_the_same_stream(
    body: bytes, sizes: list[int], include: bool, max_reasoning_bytes: int
) -> None:
    assert_same(cut_at(body, sizes), include, max_reasoning_bytes)
    assert_same([body], include, max_reasoning_bytes)


TAG_SETS = {
    "magistral+default": TagSet.of(presets=["magistral"]),
    "magistral": TagSet.of((), presets=["magistral"]),
    "harmony": TagSet.of((), presets=["harmony"]),
    "at-start": TagSet.of(only_at_start=True),
    "answer+tool-markers": TagSet.of(answer_tags=["answer"], tool_call_markers=["<tool_call>"]),
    "off": TagSet.of(()),
}


@given(
    streams(),
    st.lists(st.integers(min_value=0, max_value=60), max_size=40),
    st.booleans(),
    st.sampled_from(sorted(TAG_SETS)),
    st.booleans(),
    st.sampled_from(OUTPUTS),
)
def test_shapes_on_and_off_agree_for_every_tag_set_and_output(
    body: bytes, sizes: list[int], include: bool, tags: str, implicit: bool, output: str
) -> None:
    more = {
        "tags": TAG_SETS[tags],
        "implicit_open_tag": implicit and bool(TAG_SETS[tags].table),
        "output": output,
    }
    assert_same(cut_at(body, sizes), include, **more)
    assert_same([body], include, **more)


def long_stream(dumps: Callable[[Json], bytes] = orjson.dumps) -> bytes:
    chunks = [deepseek({"role": "assistant", "content": None, "reasoning_content": ""})]
    chunks += [native(t) for t in ["Let", " me", ' "think"', "\\", "\n", " é", " 😀"] * 20]
    chunks += [answer(t) for t in ["The", " answer", " is", ' "42"', ".\n"] * 20]
    chunks.append(deepseek({"content": "", "reasoning_content": None}, "stop"))
    events = b"".join(b"data: " + dumps(c) + b"\n\n" for c in chunks)
    return events + b"data: [DONE]\n\n"


def parsed_chunks(
    monkeypatch: pytest.MonkeyPatch, body: bytes, options: NormalizeOptions, tap: bool
) -> tuple[int, StreamNormalizer]:
    """Normalize `body` in one read, counting the JSON objects parsed (a
    chunk's full parse; a shape's decode of an escaped text is no object)."""
    count = 0
    loads = orjson.loads

    def counting(data: bytes | str) -> Any:
        nonlocal count
        count += data[:1] in (b"{", "{")
        return loads(data)

    normalizer = StreamNormalizer(options)
    if tap:
        normalizer.watch()
    with monkeypatch.context() as patch:
        patch.setattr(orjson, "loads", counting)
        normalizer.feed(body)
        normalizer.finish()
    return count, normalizer


@pytest.mark.parametrize("dumps", RENDERERS, ids=["orjson", "spaced", "utf8", "ascii"])
@pytest.mark.parametrize("tap", [True, False], ids=["tap", "no-tap"])
def test_a_long_native_stream_takes_the_shape_path(
    monkeypatch: pytest.MonkeyPatch, dumps: Callable[[Json], bytes], tap: bool
) -> None:
    body = long_stream(dumps)
    fast, _ = assert_same([body], True)
    slow_parses, _ = parsed_chunks(monkeypatch, body, NormalizeOptions(shapes=False), tap)
    fast_parses, fast = parsed_chunks(monkeypatch, body, NormalizeOptions(), tap)
    # 140 reasoning chunks and 100 answer chunks: without shapes each is
    # parsed; with them, the first of each kind (and a few learning probes)
    assert slow_parses >= 242
    assert fast_parses <= 30, fast_parses
    assert [s.field for s in fast._shapes] == ["reasoning_content", "content"]
    assert fast.turn().content == 'The answer is "42".\n' * 20
    assert fast.turn().thinking[0].thought == 'Let me "think"\\\n é 😀' * 20
    if tap:
        assert "".join(t for k, t in (fast.tap.pairs if fast.tap else []) if k == "reasoning") == (
            'Let me "think"\\\n é 😀' * 20
        )
    # and byte by byte, and in reads of a few bytes
    assert_same([body[i : i + 1] for i in range(len(body))], True)
    assert_same(cut_at(body, [7, 300, 1, 13] * 40), True)


@pytest.mark.parametrize("tap", [True, False], ids=["tap", "no-tap"])
def test_hidden_reasoning_leaves_the_answer_shape_learnable(
    monkeypatch: pytest.MonkeyPatch, tap: bool
) -> None:
    # With reasoning hidden, a reasoning chunk read by its shape must still be
    # parsed (it is rewritten). That must not use up the parsed chunks that may
    # teach a shape, or the answer chunks after 16 reasoning chunks are never
    # learned and every one of them is parsed too.
    body = long_stream()
    assert_same([body], False)
    hidden = NormalizeOptions(include_in_response=False)
    fast_parses, fast = parsed_chunks(monkeypatch, body, hidden, tap)
    assert fast.turn().content == 'The answer is "42".\n' * 20
    assert fast_parses <= 140 + 30, fast_parses  # the reasoning chunks, a few more
    assert [s.field for s in fast._shapes] == ["reasoning_content", "content"]
    assert_same([body[i : i + 1] for i in range(len(body))], False)
    assert_same(cut_at(body, [7, 300, 1, 13] * 40), False)


def test_a_shape_read_chunk_that_moves_tagged_text_is_rewritten_like_a_parsed_one() -> None:
    # after <think>, content chunks of a learned shape become reasoning_content:
    # the shape path re-encodes them from the learned head and tail
    chunks = [answer("<think>"), *[answer(t) for t in ["a", "b", ' "c"', "\\"]], answer("</think>")]
    chunks += [answer("ok"), deepseek({}, "stop")]
    for dumps in RENDERERS:
        body = b"".join(b"data: " + dumps(c) + b"\n\n" for c in chunks) + b"data: [DONE]\n\n"
        fast, _ = assert_same([body], True)
        assert fast.turn().content == "ok"
        assert [b.thought for b in fast.turn().thinking] == ['ab "c"\\']
        assert_same([body], False)


# -- runs, and the guards of learning --------------------------------------------


def test_a_run_reads_consecutive_chunks_and_stops_at_the_first_other() -> None:
    data = orjson.dumps(chunk({"content": None, "reasoning_content": "first"}))
    shape = learn(data, orjson.loads(data))
    assert shape is not None

    def make(text: str) -> bytes:
        return orjson.dumps(chunk({"content": None, "reasoning_content": text}))

    plain = [make(t) for t in ("a", "b c", "")]
    escaped = [make('say "x"\n'), make("é 😀")]
    tail: list[object] = [b'{"other":1}', SSEComment(b" ping"), make("after")]
    assert shape.run([*plain, *tail], 0) == (3, "ab c")
    assert shape.run([*plain, *escaped, *tail], 1) == (4, "b c" + 'say "x"\n' + "é 😀")
    # a body that is not one JSON string ends the run there, even mid-list
    forged = shape.prefix + b'a","x":"b' + shape.suffix
    assert shape.run([*escaped, forged, make("z")], 0) == (2, 'say "x"\n' + "é 😀")
    assert shape.run(tail, 0) == (0, "")


def test_proof_helpers_refuse_what_does_not_parse_back() -> None:
    obj = chunk({"content": "abc"})
    delta = obj["choices"][0]["delta"]
    assert not _proves(obj, delta, "content", "abc", b"not json")
    assert delta == {"content": "abc"}  # restored
    data = orjson.dumps(obj)
    start = data.index(b'"abc"')
    prefix, suffix = data[: start + 1], data[start + 4 :]
    # the delta's bytes outside the learned prefix and suffix: no span
    assert _delta_span(data, obj, obj["choices"][0], delta, b"", suffix) == (None, b"")
    # bytes around the delta that do not parse back: no span
    odd = b"xx" + orjson.dumps(delta) + b"yy"
    assert _delta_span(odd, obj, obj["choices"][0], delta, b"xx{", b"}yy") == (None, b"")
    assert _delta_span(data, obj, obj["choices"][0], delta, prefix, suffix)[0] is not None


@pytest.mark.parametrize("include", [True, False], ids=["shown", "hidden"])
def test_a_tagged_run_at_the_start_of_a_read_with_empty_and_blank_chunks(include: bool) -> None:
    # The block opens in the first read; the second read starts inside it,
    # so its first chunks are a run of text moved to reasoning, with empty
    # deltas (unchanged) and whitespace the splitter holds back whole.
    def content(text: str) -> bytes:
        return b"data: " + orjson.dumps(answer(text)) + b"\n\n"

    inside = ["a", "b", "", "  ", "   ", "c ", " d", "", "e\n\n", "f", " ", "g"] * 3
    first = content("<think>") + content("x") + content("y")
    second = b"".join(content(t) for t in inside) + b": keep-alive\n\n"
    second += b"".join(content(t) for t in inside) + content("h</think>Done")
    third = b"".join(content(t) for t in [" and", " done", ""]) + b"data: [DONE]\n\n"
    fast, slow = assert_same([first, second, third], include)
    assert fast.turn().thinking[0].thought == slow.turn().thinking[0].thought
    assert fast.turn().content == "Done and done"
    assert [s.field for s in fast._shapes] == ["content"]


def test_an_unchanged_run_after_a_rewritten_chunk_in_the_same_read() -> None:
    def content(text: str) -> bytes:
        return b"data: " + orjson.dumps(answer(text)) + b"\n\n"

    read = b"".join(content(t) for t in ["<think>a</think>", "b", "c", "d", "e"])
    fast, _ = assert_same([read + b"data: [DONE]\n\n"], True)
    assert fast.turn().content == "bcde"
    assert fast._shapes


def test_learning_stops_at_the_most_shapes_a_stream_keeps() -> None:
    # chunks of six shapes (each its own id): four are learned, then the
    # normalizer stops learning and parses the others, with the same result
    events = [
        {"id": f"c{n}", "choices": [{"index": 0, "delta": {"content": f"part {n}. "}}]}
        for n in range(6)
        for _ in range(2)
    ]
    body = b"".join(b"data: " + orjson.dumps(e) + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    fast, _ = assert_same([body], True)
    assert [s.prefix for s in fast._shapes] == [
        b'{"id":"c%d","choices":[{"index":0,"delta":{"content":"' % n for n in range(4)
    ]
    assert fast._learning == 0
    assert fast.turn().content == "".join(f"part {n}. " * 2 for n in range(6))
