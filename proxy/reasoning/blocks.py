"""ThinkingBlock, Turn and the utilities that work on them (pure).

A Turn is one assistant response: its parts in order (thinking blocks, text,
tool calls), finish reason, usage, and whether it ended normally. Turns are
frozen values; the normalizer builds them and the stores keep them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields, replace
from operator import attrgetter
from typing import Any, Literal, TypeVar

SourceField = Literal[
    "reasoning_content",
    "reasoning",
    "thinking",
    "reasoning_details",
    "thinking_blocks",
    "think_tag",
]
SOURCE_FIELDS: tuple[SourceField, ...] = (
    "reasoning_content",
    "reasoning",
    "thinking",
    "reasoning_details",
    "thinking_blocks",
    "think_tag",
)
StripPolicy = Literal["all", "allButLast", "none"]
STRIP_POLICIES: tuple[StripPolicy, ...] = ("all", "allButLast", "none")

Json = dict[str, Any]


# The values a response is made of are frozen dataclasses whose `__init__`
# is written out (`init=False`): compiled, `object.__setattr__(self, name,
# value)` spelled so is a native store, and a turn is made in a tenth of the
# time the `__init__` that dataclasses generates takes (that one stays
# interpreted; two turns and their blocks are made per response). The
# parameters are the fields, in order, with the fields' defaults
# (tests/reasoning hold them to it).


@dataclass(frozen=True, slots=True, init=False)
class ThinkingBlock:
    thought: str
    source_field: SourceField
    is_hidden: bool = False
    signature: str | None = None
    encrypted: tuple[Json, ...] | None = None
    tokens: int | None = None
    type: Literal["thinking"] = "thinking"

    def __init__(
        self,
        thought: str,
        source_field: SourceField,
        is_hidden: bool = False,
        signature: str | None = None,
        encrypted: tuple[Json, ...] | None = None,
        tokens: int | None = None,
        type: Literal["thinking"] = "thinking",
    ) -> None:
        object.__setattr__(self, "thought", thought)
        object.__setattr__(self, "source_field", source_field)
        object.__setattr__(self, "is_hidden", is_hidden)
        object.__setattr__(self, "signature", signature)
        object.__setattr__(self, "encrypted", encrypted)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "type", type)


@dataclass(frozen=True, slots=True, init=False)
class TextPart:
    text: str

    def __init__(self, text: str) -> None:
        object.__setattr__(self, "text", text)


@dataclass(frozen=True, slots=True, init=False)
class ToolCall:
    id: str | None
    name: str
    arguments: str
    type: str = "function"

    def __init__(self, id: str | None, name: str, arguments: str, type: str = "function") -> None:
        object.__setattr__(self, "id", id)
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "arguments", arguments)
        object.__setattr__(self, "type", type)


Part = ThinkingBlock | TextPart | ToolCall


@dataclass(frozen=True, slots=True, init=False)
class Turn:
    parts: tuple[Part, ...] = ()
    finish_reason: str | None = None
    usage: Json | None = None
    complete: bool = True
    persisted: bool = True
    model: str | None = None
    response_id: str | None = None
    # reasoning_details merged per index, in order, for verbatim round trips
    reasoning_details: tuple[Json, ...] | None = None
    error: str | None = None
    route: str | None = None
    created: float | None = None
    reasoning_truncated: bool = False
    extra: Json = field(default_factory=dict)
    # the answer came in chat's `refusal` field (its text is the content)
    refusal: bool = False

    def __init__(
        self,
        parts: tuple[Part, ...] = (),
        finish_reason: str | None = None,
        usage: Json | None = None,
        complete: bool = True,
        persisted: bool = True,
        model: str | None = None,
        response_id: str | None = None,
        reasoning_details: tuple[Json, ...] | None = None,
        error: str | None = None,
        route: str | None = None,
        created: float | None = None,
        reasoning_truncated: bool = False,
        extra: Json | None = None,
        refusal: bool = False,
    ) -> None:
        object.__setattr__(self, "parts", parts)
        object.__setattr__(self, "finish_reason", finish_reason)
        object.__setattr__(self, "usage", usage)
        object.__setattr__(self, "complete", complete)
        object.__setattr__(self, "persisted", persisted)
        object.__setattr__(self, "model", model)
        object.__setattr__(self, "response_id", response_id)
        object.__setattr__(self, "reasoning_details", reasoning_details)
        object.__setattr__(self, "error", error)
        object.__setattr__(self, "route", route)
        object.__setattr__(self, "created", created)
        object.__setattr__(self, "reasoning_truncated", reasoning_truncated)
        object.__setattr__(self, "extra", {} if extra is None else extra)
        object.__setattr__(self, "refusal", refusal)

    @property
    def content(self) -> str:
        return "".join(p.text for p in self.parts if isinstance(p, TextPart))

    @property
    def thinking(self) -> list[ThinkingBlock]:
        return [p for p in self.parts if isinstance(p, ThinkingBlock)]

    @property
    def tool_calls(self) -> list[ToolCall]:
        return [p for p in self.parts if isinstance(p, ToolCall)]

    @property
    def tool_call_ids(self) -> list[str]:
        return [p.id for p in self.parts if isinstance(p, ToolCall) and p.id]

    @property
    def reasoning_tokens(self) -> int | None:
        details = (self.usage or {}).get("completion_tokens_details")
        value = details.get("reasoning_tokens") if isinstance(details, dict) else None
        return value if isinstance(value, int) and value >= 0 else None


# -- utilities ---------------------------------------------------------------

# Turn's fields in order, for `_turn_with`: their places, and all their
# values read at once
_TURN_FIELDS = tuple(f.name for f in fields(Turn))
_TURN_FIELD_SET = frozenset(_TURN_FIELDS)
_TURN_PLACE = {name: i for i, name in enumerate(_TURN_FIELDS)}
_turn_values = attrgetter(*_TURN_FIELDS)


def _turn_with(turn: Turn, changes: dict[str, Any]) -> Turn:
    """`dataclasses.replace(turn, **changes)` at about half its cost: the
    fields are read in one call and passed by position, not looked up
    through `fields()` and passed by name (a turn is copied on every
    response)."""
    if not changes.keys() <= _TURN_FIELD_SET:
        raise TypeError(f"Turn has no field {sorted(changes.keys() - _TURN_FIELD_SET)[0]!r}")
    values = list(_turn_values(turn))
    for name, value in changes.items():
        values[_TURN_PLACE[name]] = value
    return Turn(*values)


def index_key(value: Any) -> Any:
    """An upstream `index` as a dict key: a list or an object (never valid,
    but valid JSON) is keyed by its repr instead of failing the stream."""
    if type(value) is list or type(value) is dict:
        return repr(value)
    return value


def extract_thinking_blocks(turn: Turn) -> list[ThinkingBlock]:
    """The turn's ThinkingBlocks, in order (hidden ones included)."""
    return turn.thinking


def blocks_for_context(turn: Turn) -> list[ThinkingBlock]:
    """The blocks worth sending back upstream.

    A hidden `think_tag` block in a turn that also has native reasoning is a
    differing tagged copy kept only so nothing is lost; sending it back would
    duplicate the reasoning, so it is left out. Blocks hidden from the client
    for other reasons (includeInResponse false, encrypted-only) stay.
    """
    blocks = turn.thinking
    has_native = any(b.source_field != "think_tag" for b in blocks)
    if not has_native:
        return blocks
    return [b for b in blocks if not (b.is_hidden and b.source_field == "think_tag")]


T = TypeVar("T")


def filter_for_context(items: Sequence[T | None], policy: StripPolicy) -> list[T | None]:
    """Apply a strip policy to the reasoning of each assistant message, oldest
    first: `none` keeps all, `allButLast` keeps only the last message's, `all`
    keeps none. Positions are kept (stripped entries become None)."""
    if policy == "none":
        return list(items)
    if policy == "all" or not items:
        return [None] * len(items)
    return [None] * (len(items) - 1) + [items[-1]]


def tighter_policy(policy: StripPolicy) -> StripPolicy | None:
    """The next stricter policy (`none` -> `allButLast` -> `all`), or None."""
    order = STRIP_POLICIES[::-1]  # none, allButLast, all
    index = order.index(policy)
    return order[index + 1] if index + 1 < len(order) else None


def join_reasoning(blocks: Iterable[ThinkingBlock], separator: str = "\n\n") -> str:
    """One reasoning string from several blocks (empty thoughts skipped)."""
    return separator.join(b.thought for b in blocks if b.thought)


def estimate_tokens_chars(text: str) -> int:
    """The fallback estimate: ceil(characters / 4) (`proxy.tokenizer` says how near it is)."""
    return math.ceil(len(text) / 4)


def map_texts(turn: Turn, fn: Callable[[str], str]) -> Turn:
    """The turn with `fn` applied to every text it holds (answer, thoughts,
    tool calls, the strings in `reasoning_details`); the same turn when `fn`
    changed none. Signatures and encrypted payloads are opaque: kept."""
    parts: list[Part] = []
    changed = False
    for p in turn.parts:
        new: Part
        if isinstance(p, TextPart):
            new = TextPart(fn(p.text))
        elif isinstance(p, ThinkingBlock):
            new = replace(p, thought=fn(p.thought))
        else:
            new = replace(p, name=fn(p.name), arguments=fn(p.arguments))
        changed = changed or new != p
        parts.append(new)
    details = turn.reasoning_details
    if details is not None:
        mapped = tuple(_map_json(d, fn) for d in details)
        changed = changed or mapped != details
        details = mapped
    if not changed:
        return turn
    return replace(turn, parts=tuple(parts), reasoning_details=details)


def _map_json(value: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, list):
        return [_map_json(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_json(v, fn) for k, v in value.items()}
    return value


def with_token_counts(turn: Turn, count: Callable[[str], int], **changes: Any) -> Turn:
    """Fill each block's `tokens`: the upstream's `reasoning_tokens` when the
    turn reports it (spread over the text blocks in proportion to their
    estimates, so they sum to the reported figure), else the estimate.
    `changes` are other fields to replace in the same copy. One block with
    text and a reported figure is not counted: the figure is its own
    (counting costs about 65 us per KB of reasoning, on every response)."""
    blocks = turn.thinking
    if not blocks:
        return _turn_with(turn, changes) if changes else turn
    reported = turn.reasoning_tokens
    if reported is not None and sum(1 for b in blocks if b.thought) == 1:
        estimates = [1 if b.thought else 0 for b in blocks]  # the whole figure to that one
    else:
        estimates = [count(b.thought) if b.thought else 0 for b in blocks]
    counts = estimates
    total = sum(estimates)
    if reported is not None and total > 0:
        counts = [reported * e // total for e in estimates]
        last = max(i for i, e in enumerate(estimates) if e > 0)
        counts[last] += reported - sum(counts)
    it = iter(counts)
    parts = tuple(
        ThinkingBlock(p.thought, p.source_field, p.is_hidden, p.signature, p.encrypted, next(it))
        if isinstance(p, ThinkingBlock)
        else p
        for p in turn.parts
    )
    changes["parts"] = parts
    return _turn_with(turn, changes)


# -- JSON shapes -------------------------------------------------------------


def block_to_json(block: ThinkingBlock) -> Json:
    """The API's camelCase ThinkingBlock."""
    return {
        "type": "thinking",
        "thought": block.thought,
        "sourceField": block.source_field,
        "isHidden": block.is_hidden,
        "signature": block.signature,
        "encrypted": list(block.encrypted) if block.encrypted is not None else None,
        "tokens": block.tokens,
    }


def block_from_json(data: Json) -> ThinkingBlock:
    encrypted = data.get("encrypted")
    source = data.get("sourceField", "reasoning_content")
    if source not in SOURCE_FIELDS:
        raise ValueError(f"unknown sourceField {source!r}")
    return ThinkingBlock(
        thought=str(data.get("thought", "")),
        source_field=source,
        is_hidden=bool(data.get("isHidden", False)),
        signature=data.get("signature"),
        encrypted=tuple(encrypted) if encrypted is not None else None,
        tokens=data.get("tokens"),
    )


def turn_to_json(turn: Turn, index: int) -> Json:
    """The turn as the conversations API returns it."""
    return {
        "index": index,
        "created": turn.created,
        "model": turn.model,
        "route": turn.route,
        "complete": turn.complete,
        "persisted": turn.persisted,
        "finishReason": turn.finish_reason,
        "blocks": [block_to_json(b) for b in turn.thinking],
        "content": turn.content,
        "toolCallIds": turn.tool_call_ids,
        "usage": turn.usage,
        "reasoningTruncated": turn.reasoning_truncated,
        "refusal": turn.refusal,
    }


def turn_to_record(turn: Turn) -> Json:
    """A lossless JSON-able record of a turn, for the stores."""
    parts: list[Json] = []
    for part in turn.parts:
        if isinstance(part, ThinkingBlock):
            parts.append({"kind": "thinking", **block_to_json(part)})
        elif isinstance(part, TextPart):
            parts.append({"kind": "text", "text": part.text})
        else:
            parts.append(
                {
                    "kind": "tool_call",
                    "id": part.id,
                    "name": part.name,
                    "arguments": part.arguments,
                    "type": part.type,
                }
            )
    return {
        "parts": parts,
        "finish_reason": turn.finish_reason,
        "usage": turn.usage,
        "complete": turn.complete,
        "persisted": turn.persisted,
        "model": turn.model,
        "response_id": turn.response_id,
        "reasoning_details": list(turn.reasoning_details)
        if turn.reasoning_details is not None
        else None,
        "error": turn.error,
        "route": turn.route,
        "created": turn.created,
        "reasoning_truncated": turn.reasoning_truncated,
        "extra": turn.extra,
        "refusal": turn.refusal,
    }


def turn_from_record(data: Json) -> Turn:
    parts: list[Part] = []
    for item in data.get("parts", ()):
        kind = item.get("kind")
        if kind == "thinking":
            parts.append(block_from_json(item))
        elif kind == "text":
            parts.append(TextPart(str(item.get("text", ""))))
        elif kind == "tool_call":
            parts.append(
                ToolCall(
                    id=item.get("id"),
                    name=str(item.get("name", "")),
                    arguments=str(item.get("arguments", "")),
                    type=str(item.get("type", "function")),
                )
            )
        else:
            raise ValueError(f"unknown turn part kind {kind!r}")
    details = data.get("reasoning_details")
    return Turn(
        parts=tuple(parts),
        finish_reason=data.get("finish_reason"),
        usage=data.get("usage"),
        complete=bool(data.get("complete", True)),
        persisted=bool(data.get("persisted", True)),
        model=data.get("model"),
        response_id=data.get("response_id"),
        reasoning_details=tuple(details) if details is not None else None,
        error=data.get("error"),
        route=data.get("route"),
        created=data.get("created"),
        reasoning_truncated=bool(data.get("reasoning_truncated", False)),
        extra=dict(data.get("extra") or {}),
        refusal=bool(data.get("refusal", False)),  # records written before it have none
    )
