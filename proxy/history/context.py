"""Context accounting: how many tokens a request really sends, and compression.

Effective tokens are counted on the messages as they will be sent (after
strip/include); raw tokens are the same request with every known reasoning
included. When the route sets `context_limit` and the effective count passes
`compression_threshold x context_limit`, the strip policy is tightened
(`none` -> `allButLast` -> `all`) until the request fits or no reasoning is
left to strip; a request that sends none is not compressed. The count
follows OpenAI's chat accounting: each message costs its texts plus a few
tokens of framing, and each image part a fixed figure.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.dialects import Dialect
from proxy.history.egress import AssistantMessage, EgressResult, Reasoning, build_upstream_messages
from proxy.history.keys import content_text
from proxy.reasoning.blocks import StripPolicy, tighter_policy
from proxy.reasoning.native import blocks_text, details_text
from proxy.settings import IncludeInContext

Count = Callable[[str], int]

PER_MESSAGE = 4  # role and separators around each message
PER_REQUEST = 3  # the assistant reply's priming
# an image part: OpenAI's cost of a 1024x1024 image (85 + 170 per 512-pixel
# tile), or of any image at `detail: low`; its size is not read
IMAGE_TOKENS = 765
IMAGE_TOKENS_LOW = 85


# fields of a message whose string values are counted as they are
_TEXT_FIELDS = frozenset(("reasoning_content", "reasoning", "thinking", "name", "tool_call_id"))


def message_tokens(message: Any, count: Count) -> int:
    """PER_MESSAGE and the tokens of each text of the message that counts
    (this runs for every message of every request)."""
    if not isinstance(message, dict):
        return 0
    total = PER_MESSAGE + count(str(message.get("role", "")))
    content = message.get("content")
    total += count(content_text(content))
    if isinstance(content, list):
        total += sum(map(image_tokens, content))
    for key, value in message.items():
        if key in _TEXT_FIELDS:
            if isinstance(value, str):
                total += count(value)
        elif key == "reasoning_details":
            if isinstance(value, list):
                total += count(details_text(value))
        elif key == "thinking_blocks":
            if isinstance(value, list):
                total += count(blocks_text(value))
        elif key == "tool_calls" and isinstance(value, list):
            for call in value:
                function = call.get("function") if isinstance(call, dict) else None
                if isinstance(function, dict):
                    total += count(str(function.get("name", "")))
                    total += count(str(function.get("arguments", "")))
    return total


def image_tokens(part: Any) -> int:
    """The tokens of a content part that is an image (0 for any other)."""
    if not isinstance(part, dict) or part.get("type") != "image_url":
        return 0
    image = part.get("image_url")
    low = isinstance(image, dict) and image.get("detail") == "low"
    return IMAGE_TOKENS_LOW if low else IMAGE_TOKENS


def message_texts(message: Any) -> list[str]:
    """The texts `message_tokens` counts, in order (some may be empty), for
    counting them ahead (`Count.warm`)."""
    texts: list[str] = []

    def collect(text: str) -> int:
        texts.append(text)
        return 0

    message_tokens(message, collect)
    return texts


def tools_text(tools: Any) -> str:
    """The tools as they are counted: their JSON ("" for none)."""
    return orjson.dumps(tools).decode() if tools else ""


def request_tokens(messages: Sequence[Any], tools: Any, count: Count) -> int:
    return request_tokens_of(messages, tools_text(tools), count)


def request_tokens_of(messages: Sequence[Any], tools: str, count: Count) -> int:
    """`request_tokens` with the tools' JSON given (`tools_text`)."""
    total = PER_REQUEST + sum(message_tokens(m, count) for m in messages)
    return total + count(tools) if tools else total


def request_texts(messages: Sequence[Any], tools: str) -> Iterator[str]:
    """Every text `request_tokens_of` counts."""
    for message in messages:
        yield from message_texts(message)
    if tools:
        yield tools


@dataclass(frozen=True, slots=True, init=False)
class EgressPlan:
    result: EgressResult
    effective: int
    raw: int
    compressed: StripPolicy | None  # the policy compression tightened to, if it did
    # per assistant message, what was done with its reasoning and why (explain.py)
    notes: dict[str, Any] = field(default_factory=dict)

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(
        self,
        result: EgressResult,
        effective: int,
        raw: int,
        compressed: StripPolicy | None,
        notes: dict[str, Any] | None = None,
    ) -> None:
        object.__setattr__(self, "result", result)
        object.__setattr__(self, "effective", effective)
        object.__setattr__(self, "raw", raw)
        object.__setattr__(self, "compressed", compressed)
        object.__setattr__(self, "notes", {} if notes is None else notes)


def plan_egress(
    messages: Sequence[Any],
    tools: Any,
    assistants: Sequence[AssistantMessage],
    known: Sequence[Reasoning | None],
    *,
    dialect: Dialect,
    include: IncludeInContext,
    strip: StripPolicy,
    native_format: bool,
    context_limit: int | None,
    threshold: float,
    count: Count,
    tools_json: str | None = None,
    place: str | None = None,
) -> EgressPlan:
    """`tools_json`: the tools' `tools_text`, and `place` the messages'
    `place_of`, when the caller has them."""
    if tools_json is None:
        tools_json = tools_text(tools)

    def build(policy: StripPolicy) -> tuple[EgressResult, int]:
        result = build_upstream_messages(
            messages,
            assistants,
            known,
            dialect=dialect,
            include=include,
            strip=policy,
            native_format=native_format,
            place=place,
        )
        return result, request_tokens_of(result.messages, tools_json, count)

    policy = strip
    result, effective = build(policy)
    compressed: StripPolicy | None = None
    if context_limit and include:
        budget = threshold * context_limit
        # a request that sends no reasoning has none to take out: it goes as
        # it is, and nothing says it was compressed
        while effective > budget and any(s is not None for s in result.sent):
            tighter = tighter_policy(policy)
            if tighter is None:
                break
            policy = compressed = tighter
            result, effective = build(policy)
    unsent = sum(
        count(r.text)
        for r, s in zip(known, result.sent, strict=True)
        if r is not None and s is None
    )
    return EgressPlan(result, effective, effective + unsent, compressed)
