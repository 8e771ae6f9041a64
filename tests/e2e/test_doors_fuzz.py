"""The three front doors against drawn answers: hypothesis draws a Chat
Completions answer the way an OpenAI-compatible upstream streams it (native
reasoning deltas, `<think>` tags in `content` split at any character, tool
calls whose arguments arrive in pieces, parallel calls interleaved by
`index`, a usage chunk, a finish reason that fits), and the same answer
whole. Each door (chat completions, Responses, Messages), streamed and not,
through the real server and the official SDKs, must show the drawn answer:
the same visible text (no delimiter left), the same reasoning, the same tool
calls in order, and store the same turn."""

from __future__ import annotations

import itertools
import json
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anthropic
import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proxy.reasoning.tags import Reasoning, TagSplitter, Visible
from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy
from tests.messages_wire import assert_blocks_in_order

KEY = "sk-test-doors-fuzz"
# DOORS_FUZZ_EXAMPLES=500 hunts with more (and random) examples, locally
HUNT = int(os.environ.get("DOORS_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=HUNT or 60,
    deadline=None,
    derandomize=not HUNT,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
TOOLS = ("get_weather", "search_docs")
IDS = itertools.count()

# -- the drawn answer ------------------------------------------------------------------------

# text that holds no delimiter of the default tag set, but the characters
# that make them (so a split tag prefix `<thi` is tried against real text)
TEXT = st.text(alphabet="ab <>/\n\té😀k", max_size=12).filter(
    lambda s: not re.search(r"</?(t|r)", s, re.IGNORECASE)
)
TAGS = ("think", "THINK", "thinking", "reasoning")


@dataclass
class Call:
    id: str
    name: str
    arguments: str


@dataclass
class Answer:
    native: str  # native reasoning text, as the upstream sent it
    native_field: str
    content: str  # the `content` the upstream sent, tags and all
    drawn_visible: str  # what is not in tags (trimmed after each block)
    drawn_tagged: str  # the reasoning the tags hold (trimmed bodies, joined)
    calls: list[Call]
    finish: str
    usage: bool
    stream_chunks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def visible(self) -> str:
        """The answer text, exactly: the route's tag splitter (property-tested
        on its own) on the whole content. It differs from `drawn_visible`
        only in whitespace: text before a block that could start a delimiter
        (`<`) is held past the block, and the blank after the block then
        stays."""
        return "".join(e.text for e in split(self.content) if isinstance(e, Visible))

    @property
    def tagged(self) -> str:
        return "".join(e.text for e in split(self.content) if isinstance(e, Reasoning))

    @property
    def reasoning(self) -> str:
        """The reasoning the client is shown: native is authoritative."""
        return self.native if self.native.strip() else self.tagged


def split(content: str) -> list[Any]:
    splitter = TagSplitter()
    return [*splitter.feed(content), *splitter.flush()]


def pieces(draw: st.DrawFn, text: str) -> list[str]:
    """`text` split at drawn character positions."""
    if not text:
        return []
    cuts = (
        draw(st.sets(st.integers(1, max(1, len(text) - 1)), max_size=4)) if len(text) > 1 else set()
    )
    bounds = [0, *sorted(cuts), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds) if a < b]


@st.composite
def answers(draw: st.DrawFn) -> Answer:
    native = draw(st.one_of(st.just(""), TEXT.filter(lambda s: s.strip() != "")))
    # interleaved thinking: more native reasoning after the text, before the calls
    late = draw(TEXT.filter(lambda s: s.strip() != "")) if native and draw(st.booleans()) else ""
    native_field = draw(st.sampled_from(["reasoning_content", "reasoning"]))
    # content: visible runs and tagged bodies, alternating
    segments: list[tuple[str, str, str]] = []  # (kind, text, tag)
    for _ in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            segments.append(("think", draw(TEXT), draw(st.sampled_from(TAGS))))
        else:
            segments.append(("text", draw(TEXT), ""))
    calls = [
        Call(
            f"call_{i}",
            draw(st.sampled_from(TOOLS)),
            json.dumps(draw(st.dictionaries(st.sampled_from("xyz"), TEXT, max_size=2))),
        )
        for i in range(draw(st.integers(0, 2)))
    ]
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length"]))
    # a stream cut by the length limit may end inside a tagged body
    unclosed = finish == "length" and bool(segments) and segments[-1][0] == "think"
    unclosed = unclosed and draw(st.booleans())
    content = ""
    visible = ""
    tagged: list[str] = []
    after_block = False
    for n, (kind, text, tag) in enumerate(segments):
        if kind == "think":
            last = n == len(segments) - 1
            content += f"<{tag}>{text}" + ("" if last and unclosed else f"</{tag}>")
            if text.strip():
                tagged.append(text.strip())
            after_block = True
        else:
            content += text
            visible += text.lstrip() if after_block else text
            after_block = after_block and not text.strip()
    answer = Answer(
        native + late,
        native_field,
        content,
        visible,
        "".join(tagged),
        calls,
        finish,
        draw(st.booleans()),
    )
    deltas: list[dict[str, Any]] = []
    for n, part in enumerate(pieces(draw, native)):
        deltas.append({native_field: part, **({"role": "assistant"} if n == 0 else {})})
    deltas.extend({"content": part} for part in pieces(draw, content))
    deltas.extend({native_field: part} for part in pieces(draw, late))
    # tool calls: id and name first, then the arguments in pieces; two calls
    # may interleave their argument deltas
    per_call = [
        [
            {
                "index": i,
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": ""},
            },
            *({"index": i, "function": {"arguments": p}} for p in pieces(draw, c.arguments)),
        ]
        for i, c in enumerate(calls)
    ]
    if len(per_call) == 2 and draw(st.booleans()):
        order = draw(st.permutations([0] * (len(per_call[0]) - 1) + [1] * (len(per_call[1]) - 1)))
        queues = [per_call[0][1:], per_call[1][1:]]
        calls_deltas = [per_call[0][0], per_call[1][0]]
        calls_deltas += [queues[i].pop(0) for i in order]
    else:
        calls_deltas = [d for one in per_call for d in one]
    deltas.extend({"tool_calls": [d]} for d in calls_deltas)
    chunks = [chunk(d) for d in deltas]
    if chunks and draw(st.booleans()):  # the finish reason on the last delta
        chunks[-1]["choices"][0]["finish_reason"] = finish
    else:
        chunks.append(chunk({}, finish))
    if answer.usage:
        chunks.append(
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "created": 1,
                "model": "m",
                "choices": [],
                "usage": {"prompt_tokens": 7, "completion_tokens": 11, "total_tokens": 18},
            }
        )
    answer.stream_chunks = chunks
    return answer


def upstream_stream(answer: Answer) -> Stream:
    return Stream(answer.stream_chunks)


def upstream_whole(answer: Answer) -> Json:
    message: dict[str, Any] = {"role": "assistant", "content": answer.content or None}
    if answer.native:
        message[answer.native_field] = answer.native
    if answer.calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in answer.calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-fuzz",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": answer.finish}],
    }
    if answer.usage:
        body["usage"] = {"prompt_tokens": 7, "completion_tokens": 11, "total_tokens": 18}
    return Json(body)


# -- what a door showed -----------------------------------------------------------------------


@dataclass
class Shown:
    text: str
    reasoning: str
    calls: list[tuple[str | None, str, str]]  # (id, name, arguments)
    text_after_call: bool = False  # answer text in an item or block after a tool call


def squash(text: str) -> str:
    """Text without its whitespace: where the documented trimming may differ."""
    return "".join(text.split())


def same_args(a: str, b: str) -> bool:
    return json.loads(a or "{}") == json.loads(b or "{}")


def check(shown: Shown, answer: Answer) -> None:
    """The invariants every door keeps for every answer. The answer text is
    compared exactly (but for its ends) with the tag splitter's, and without
    whitespace with the drawn one; the reasoning without whitespace, since
    each door joins several blocks its own way (chat streams a blank line
    between tagged blocks)."""
    for tag in TAGS:
        assert f"<{tag}>".lower() not in shown.text.lower()
        assert f"</{tag}>".lower() not in shown.text.lower()
    assert squash(shown.text) == squash(answer.drawn_visible)  # nothing lost, nothing added
    assert shown.text.strip() == answer.visible.strip()
    assert squash(shown.reasoning) == squash(answer.reasoning)
    assert squash(answer.tagged) == squash(answer.drawn_tagged)
    assert not shown.text_after_call  # the drawn answer's text comes before its calls
    assert [n for _, n, _ in shown.calls] == [c.name for c in answer.calls]
    for (call_id, _, args), call in zip(shown.calls, answer.calls, strict=True):
        assert call_id == call.id
        assert same_args(args, call.arguments), (args, call.arguments)


def agree(streamed: Shown, whole: Shown) -> None:
    assert streamed.text.strip() == whole.text.strip()
    assert streamed.reasoning == whole.reasoning
    assert [c[:2] for c in streamed.calls] == [c[:2] for c in whole.calls]
    for a, b in zip(streamed.calls, whole.calls, strict=True):
        assert same_args(a[2], b[2])


def stored(proxy: ProxyServer, conversation: str) -> Shown:
    r = httpx.get(
        f"{proxy.url}/conversations/{conversation}",
        headers={"Authorization": f"Bearer {KEY}"},
        timeout=30,
    )
    assert r.status_code == 200, r.text
    turn = r.json()["turns"][-1]
    thoughts = [
        b["thought"] for b in turn["blocks"] if b.get("type") == "thinking" and not b["isHidden"]
    ]
    calls = [(i, "", "") for i in turn["toolCallIds"]]
    return Shown(turn["content"] or "", "".join(thoughts), calls)


def check_stored(proxy: ProxyServer, conversation: str, answer: Answer) -> None:
    turn = stored(proxy, conversation)
    assert turn.text.strip() == answer.visible.strip()
    assert squash(turn.reasoning) == squash(answer.reasoning)
    assert [c[0] for c in turn.calls] == [c.id for c in answer.calls]


# -- the proxy, once for the module ------------------------------------------------------------


@pytest.fixture(scope="module")
def proxy(upstream_server: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream_server)) as server:
        yield server


@pytest.fixture(scope="module")
def chat_sdk(proxy: ProxyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0, timeout=30) as sdk:
        yield sdk


@pytest.fixture(scope="module")
def messages_sdk(proxy: ProxyServer) -> Iterator[anthropic.Anthropic]:
    with anthropic.Anthropic(base_url=proxy.base, api_key=KEY, max_retries=0, timeout=30) as sdk:
        yield sdk


def script(upstream: FakeUpstream, answer: Answer) -> None:
    upstream.reset()
    upstream.script(upstream_stream(answer), upstream_whole(answer))


def conversation_ids(door: str) -> tuple[str, str]:
    n = next(IDS)
    return f"fuzz-{door}-{n}-s", f"fuzz-{door}-{n}-w"


CHAT_TOOLS: Any = [
    {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
    for name in TOOLS
]


# -- chat completions -------------------------------------------------------------------------


def chat_streamed(sdk: openai.OpenAI, conversation: str) -> Shown:
    text, reasoning = "", ""
    calls: dict[int, list[Any]] = {}
    finish = None
    stream = sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Go."}],
        tools=CHAT_TOOLS,
        stream=True,
        extra_headers={"X-Conversation-Id": conversation},
    )
    with stream:
        for event in stream:
            for choice in event.choices:
                delta = choice.delta
                text += delta.content or ""
                reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
                for call in delta.tool_calls or []:
                    slot = calls.setdefault(call.index, [None, "", ""])
                    if call.id:
                        slot[0] = call.id
                    if call.function and call.function.name:
                        slot[1] += call.function.name
                    if call.function and call.function.arguments:
                        slot[2] += call.function.arguments
                finish = choice.finish_reason or finish
    assert finish is not None
    return Shown(text, reasoning, [tuple(calls[i]) for i in sorted(calls)])  # type: ignore[misc]


def chat_whole(sdk: openai.OpenAI, conversation: str) -> Shown:
    completion = sdk.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "Go."}],
        tools=CHAT_TOOLS,
        extra_headers={"X-Conversation-Id": conversation},
    )
    message = completion.choices[0].message
    calls = [
        (c.id, c.function.name, c.function.arguments)  # type: ignore[union-attr]
        for c in message.tool_calls or []
    ]
    reasoning = (message.model_extra or {}).get("reasoning_content") or ""
    return Shown(message.content or "", reasoning, calls)


def shows(
    proxy: ProxyServer,
    upstream: FakeUpstream,
    answer: Answer,
    door: str,
    streamed: Callable[[str], Shown],
    whole: Callable[[str], Shown],
) -> None:
    """One door's streamed and whole answers to one draw: each as drawn,
    the two alike, and each stored as drawn."""
    script(upstream, answer)
    streamed_id, whole_id = conversation_ids(door)
    got_streamed, got_whole = streamed(streamed_id), whole(whole_id)
    check(got_streamed, answer)
    check(got_whole, answer)
    agree(got_streamed, got_whole)
    check_stored(proxy, streamed_id, answer)
    check_stored(proxy, whole_id, answer)


@FUZZ
@given(answer=answers())
def test_the_chat_door_shows_every_drawn_answer(
    proxy: ProxyServer, upstream_server: FakeUpstream, chat_sdk: openai.OpenAI, answer: Answer
) -> None:
    shows(
        proxy,
        upstream_server,
        answer,
        "chat",
        lambda c: chat_streamed(chat_sdk, c),
        lambda c: chat_whole(chat_sdk, c),
    )


# -- responses --------------------------------------------------------------------------------

RESPONSES_TOOLS: Any = [
    {"type": "function", "name": name, "parameters": {"type": "object"}, "strict": False}
    for name in TOOLS
]


def response_shown(response: Any) -> Shown:
    reasoning = ""
    late = False
    calls = []
    for item in response.output:
        if item.type == "reasoning":
            reasoning += "".join(s.text for s in item.summary)
        elif item.type == "function_call":
            calls.append((item.call_id, item.name, item.arguments))
        elif item.type == "message" and calls:
            late = True
    return Shown(response.output_text, reasoning, calls, late)


def responses_streamed(sdk: openai.OpenAI, conversation: str) -> Shown:
    text, reasoning = "", ""
    arguments: dict[str, str] = {}
    numbers = []
    final: Any = None
    with sdk.responses.stream(
        model="m",
        input="Go.",
        tools=RESPONSES_TOOLS,
        extra_headers={"X-Conversation-Id": conversation},
    ) as stream:
        for event in stream:
            numbers.append(event.sequence_number)
            if event.type == "response.output_text.delta":
                text += event.delta
            elif event.type == "response.reasoning_summary_text.delta":
                reasoning += event.delta
            elif event.type == "response.function_call_arguments.delta":
                arguments[event.item_id] = arguments.get(event.item_id, "") + event.delta
            elif event.type in ("response.completed", "response.incomplete"):
                final = event.response  # the SDK's helper knows only response.completed
    assert numbers == list(range(len(numbers)))
    assert final.status in ("completed", "incomplete")
    shown = response_shown(final)
    # the deltas add up to the final response
    assert text == shown.text
    assert reasoning == shown.reasoning
    by_item = {item.id: item for item in final.output if item.type == "function_call"}
    for item_id, args in arguments.items():
        assert by_item[item_id].arguments == args
    return shown


def responses_whole(sdk: openai.OpenAI, conversation: str) -> Shown:
    response = sdk.responses.create(
        model="m",
        input="Go.",
        tools=RESPONSES_TOOLS,
        extra_headers={"X-Conversation-Id": conversation},
    )
    assert response.status in ("completed", "incomplete")
    return response_shown(response)


@FUZZ
@given(answer=answers())
def test_the_responses_door_shows_every_drawn_answer(
    proxy: ProxyServer, upstream_server: FakeUpstream, chat_sdk: openai.OpenAI, answer: Answer
) -> None:
    shows(
        proxy,
        upstream_server,
        answer,
        "responses",
        lambda c: responses_streamed(chat_sdk, c),
        lambda c: responses_whole(chat_sdk, c),
    )


# -- messages ---------------------------------------------------------------------------------

MESSAGES_TOOLS: Any = [{"name": name, "input_schema": {"type": "object"}} for name in TOOLS]


def message_shown(message: Any) -> Shown:
    text, reasoning = "", ""
    late = False
    calls = []
    for block in message.content:
        if block.type == "text":
            text += block.text
            late = late or bool(calls)
        elif block.type == "thinking":
            reasoning += block.thinking
        elif block.type == "tool_use":
            calls.append((block.id, block.name, json.dumps(block.input)))
    return Shown(text, reasoning, calls, late)


def messages_streamed(sdk: anthropic.Anthropic, conversation: str) -> Shown:
    raw: list[tuple[str, dict[str, Any]]] = []
    with sdk.messages.stream(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "Go."}],
        tools=MESSAGES_TOOLS,
        extra_headers={"X-Conversation-Id": conversation},
    ) as stream:
        for event in stream:
            if event.type in (
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
            ):
                raw.append((event.type, event.model_dump()))
        final = stream.get_final_message()
    assert raw[0][0] == "message_start"
    assert raw[-1][0] == "message_stop"
    assert_blocks_in_order(raw)
    return message_shown(final)


def messages_whole(sdk: anthropic.Anthropic, conversation: str) -> Shown:
    message = sdk.messages.create(
        model="m",
        max_tokens=100,
        messages=[{"role": "user", "content": "Go."}],
        tools=MESSAGES_TOOLS,
        extra_headers={"X-Conversation-Id": conversation},
    )
    return message_shown(message)


@FUZZ
@given(answer=answers())
def test_the_messages_door_shows_every_drawn_answer(
    proxy: ProxyServer,
    upstream_server: FakeUpstream,
    messages_sdk: anthropic.Anthropic,
    answer: Answer,
) -> None:
    shows(
        proxy,
        upstream_server,
        answer,
        "messages",
        lambda c: messages_streamed(messages_sdk, c),
        lambda c: messages_whole(messages_sdk, c),
    )
