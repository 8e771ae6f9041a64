"""Reading the reasoning back out of each output shape, as a client of that
shape would: the answer and the reasoning it gets from a stream or a whole
response."""

from __future__ import annotations

from typing import Any

import orjson

from proxy.reasoning.output import OUTPUTS
from proxy.reasoning.sse import SSEDecoder, SSEEvent
from proxy.reasoning.tags import Reasoning as TagReasoning
from proxy.reasoning.tags import TagSplitter, Visible

SHAPES = list(OUTPUTS)


def deltas(body: bytes) -> list[dict[str, Any]]:
    """The first choice's deltas of an event stream, in order."""
    out = []
    decoder = SSEDecoder()
    for ev in decoder.feed(body) + decoder.flush():
        if not isinstance(ev, SSEEvent) or ev.data == b"[DONE]":
            continue
        for choice in orjson.loads(ev.data).get("choices") or []:
            if choice.get("index", 0) == 0 and isinstance(choice.get("delta"), dict):
                out.append(choice["delta"])
    return out


def merge_details(parts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`reasoning_details` pieces merged per index, as OpenRouter's clients do."""
    merged: dict[Any, dict[str, Any]] = {}
    for item in parts:
        into = merged.setdefault(item.get("index"), {})
        for key, value in item.items():
            if key in ("text", "data", "signature") and isinstance(into.get(key), str):
                into[key] += value
            elif into.get(key) is None:
                into[key] = value
    return list(merged.values())


def unwrap(content: str) -> tuple[str, str]:
    """(answer, reasoning) of content with inline <think> blocks."""
    splitter = TagSplitter()
    events = splitter.feed(content) + splitter.flush()
    answer = "".join(e.text for e in events if isinstance(e, Visible))
    reasoning = "\n\n".join("".join(e.text for e in run) for run in _blocks(events) if run)
    return answer, reasoning


def _blocks(events: list[Any]) -> list[list[Any]]:
    blocks: list[list[Any]] = [[]]
    for e in events:
        if isinstance(e, TagReasoning):
            blocks[-1].append(e)
        elif not isinstance(e, Visible):
            blocks.append([])
    return blocks


def read(parts: list[dict[str, Any]], shape: str) -> dict[str, Any]:
    """What a client of `shape` reads from deltas (or one message): the
    answer, the reasoning, and every reasoning field that arrived."""
    content = "".join(p.get("content") or "" for p in parts)
    fields = sorted({k for p in parts for k in p if k not in ("role", "content", "tool_calls")})
    reasoning = ""
    details = merge_details([d for p in parts for d in p.get("reasoning_details") or []])
    if shape == "reasoning_content":
        reasoning = "".join(p.get("reasoning_content") or "" for p in parts)
    elif shape == "reasoning":
        reasoning = "".join(p.get("reasoning") or "" for p in parts)
    elif shape == "think_tags":
        content, reasoning = unwrap(content)
    elif shape == "reasoning_details":
        reasoning = "".join(d.get("text") or d.get("summary") or "" for d in details)
    return {"content": content, "reasoning": reasoning, "fields": fields, "details": details}
