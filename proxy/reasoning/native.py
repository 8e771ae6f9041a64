"""Reasoning carried in native fields of a delta or message (pure).

Upstreams put reasoning in `reasoning_content` (DeepSeek, Kimi, SGLang,
llama.cpp), `reasoning` (vLLM >= 0.11, Ollama, OpenRouter, Groq), `thinking`
(a string, or an object such as `{"thinking" | "text" | "content": ...,
"signature": ...}`), `reasoning_details[]` (OpenRouter, MiniMax with
`reasoning_split`), or `thinking_blocks[]` (LiteLLM and other
Anthropic-compatible upstreams: `thinking` blocks with a `signature`,
`redacted_thinking` blocks with opaque `data`). Some send the same text
twice, in `reasoning` and in a `reasoning.text` detail, or in
`reasoning_content` and `thinking_blocks`: one delta yields one text, from
the first field that has any, so it counts once.

Mistral's reasoning models (Magistral; Mistral Small and Medium with
`reasoning_effort`) send `content` as a list of chunks instead:
`{"type": "thinking", "thinking": [{"type": "text", "text": ...}]}` and
`{"type": "text", "text": ...}`. `content_parts_as_fields` turns such a
list into chat's fields (the text into `content`, the thinking into
`reasoning_content`) before anything else reads the delta or message.
"""

from __future__ import annotations

from typing import Any

from proxy.reasoning.blocks import Json, SourceField, index_key

TEXT_FIELDS: tuple[SourceField, ...] = ("reasoning_content", "reasoning", "thinking")
REASONING_FIELDS = (
    "reasoning_content",
    "reasoning",
    "thinking",
    "reasoning_details",
    "thinking_blocks",
)

# reasoning_details item type -> the key holding its readable text
DETAIL_TEXT_KEYS = {"reasoning.text": "text", "reasoning.summary": "summary"}
# keys of a detail item whose string values arrive in pieces when streamed
_CONCAT_KEYS = frozenset({"text", "summary", "data", "signature", "thinking"})
# keys of a `thinking` object that may hold its text, in order
_THINKING_TEXT_KEYS = ("thinking", "text", "content")


def native_text(obj: dict[str, Any]) -> tuple[str, SourceField] | None:
    """The reasoning text in one delta or message, and the field it came from."""
    for name in TEXT_FIELDS:
        value = obj.get(name)
        if value:
            if type(value) is str:
                return value, name
            if name == "thinking":
                text = thinking_text(value)
                if text:
                    return text, name
    details = obj.get("reasoning_details")
    if details and type(details) is list:
        text = details_text(details)
        if text:
            return text, "reasoning_details"
    blocks = obj.get("thinking_blocks")
    if blocks and type(blocks) is list:
        text = blocks_text(blocks)
        if text:
            return text, "thinking_blocks"
    return None


def content_parts_as_fields(obj: Json) -> bool:
    """A `content` list of text and thinking chunks as a `content` string and
    `reasoning_content` (added to what the field already holds), in place.
    Chunks of other types are left out of both. True if `content` was a list."""
    parts = obj.get("content")
    if type(parts) is not list:
        return False
    texts: list[str] = []
    thinking: list[str] = []
    for part in parts:
        if type(part) is not dict:
            continue
        kind = part.get("type")
        if kind == "text" and type(part.get("text")) is str:
            texts.append(part["text"])
        elif kind == "thinking":
            thinking.append(_chunks_text(part.get("thinking")))
    obj["content"] = "".join(texts)
    found = "".join(thinking)
    if found:
        before = obj.get("reasoning_content")
        obj["reasoning_content"] = (before if type(before) is str else "") + found
    return True


def _chunks_text(value: Any) -> str:
    """The text of a thinking chunk's `thinking`: a string, or text chunks."""
    if type(value) is str:
        return value
    if type(value) is not list:
        return ""
    return "".join(c["text"] for c in value if type(c) is dict and type(c.get("text")) is str)


def thinking_text(value: Any) -> str:
    """The text of a `thinking` value that is not a string: an object with
    its text under `thinking`, `text` or `content`, or a list of such parts."""
    if type(value) is str:
        return value
    if type(value) is list:
        return "".join(thinking_text(v) for v in value)
    if type(value) is dict:
        for key in _THINKING_TEXT_KEYS:
            text = value.get(key)
            if text:
                return thinking_text(text)
    return ""


def thinking_signature(value: Any) -> str | None:
    """The signature of a `thinking` object, if it carries one."""
    signature = value.get("signature") if type(value) is dict else None
    return signature if signature and type(signature) is str else None


def blocks_text(blocks: list[Any]) -> str:
    """The readable text of `thinking_blocks` (redacted ones have none)."""
    return "".join(
        b["thinking"]
        for b in blocks
        if type(b) is dict and b.get("type") == "thinking" and type(b.get("thinking")) is str
    )


def merge_piece(merged: Json, item: Json) -> None:
    """Add a streamed piece of an item to what came before: string pieces of
    text-like keys are concatenated, other keys keep their first non-null value."""
    for key, value in item.items():
        old = merged.get(key)
        if key in _CONCAT_KEYS and type(value) is str and type(old) is str:
            merged[key] = old + value
        elif old is None:
            merged[key] = value


def details_text(details: list[Any]) -> str:
    """The readable text of `reasoning_details` items (encrypted ones skipped)."""
    pieces = []
    for item in details:
        if type(item) is dict:
            key = DETAIL_TEXT_KEYS.get(item.get("type", ""))
            value = item.get(key) if key else None
            if value and type(value) is str:
                pieces.append(value)
    return "".join(pieces)


def is_opaque_detail(item: Json) -> bool:
    """Encrypted items, and any item carrying a signature, are kept byte for
    byte for round trips and never displayed."""
    return item.get("type") == "reasoning.encrypted" or bool(item.get("signature"))


class DetailsMerger:
    """Merge streamed `reasoning_details` items per `index`: string pieces of
    text-like keys are concatenated, other keys keep their first non-null
    value, and items stay in the order their index first appeared."""

    __slots__ = ("by_index", "items")

    def __init__(self) -> None:
        self.items: list[Json] = []
        self.by_index: dict[Any, Json] = {}

    def add(self, item: Json) -> tuple[Json, bool]:
        """Merge one item; returns the merged item and whether it is new."""
        index = index_key(item.get("index"))
        merged = self.by_index.get(index) if index is not None else None
        if merged is None:
            merged = dict(item)
            self.items.append(merged)
            if index is not None:
                self.by_index[index] = merged
            return merged, True
        merge_piece(merged, item)
        return merged, False
