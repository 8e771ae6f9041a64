"""Load the conformance cases (tests/cases, plus directories named in
REASONING_PROXY_CASES_DIR, separated by the path separator)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, TypeVar

import orjson

HERE = Path(__file__).parent / "cases"

# The tool of the conformance cases' tool loops, as Chat Completions declares
# it, and as the Responses API does (the function's fields at the top).
WEATHER_FUNCTION: Any = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}
WEATHER_CHAT_TOOL: Any = {"type": "function", "function": WEATHER_FUNCTION}
WEATHER_RESPONSES_TOOL: Any = {"type": "function", **WEATHER_FUNCTION}


def case_dirs(kind: str) -> list[Path]:
    dirs = [HERE / kind]
    for extra in filter(None, os.environ.get("REASONING_PROXY_CASES_DIR", "").split(os.pathsep)):
        dirs.append(Path(extra) / kind)
    return [d for d in dirs if d.is_dir()]


def load_cases(kind: str) -> list[dict[str, Any]]:
    cases: dict[str, dict[str, Any]] = {}
    for directory in case_dirs(kind):
        for path in sorted(directory.glob("*.json")):
            case = json.loads(path.read_text(encoding="utf-8"))
            cases.setdefault(case.get("id", path.stem), case)
    return [cases[k] for k in sorted(cases)]


def render_stream(chunks: list[dict[str, Any]]) -> bytes:
    """The fake upstream's rendering: UTF-8 JSON events, then [DONE]."""
    body = b"".join(
        b"data: " + json.dumps(c, ensure_ascii=False).encode("utf-8") + b"\n\n" for c in chunks
    )
    return body + b"data: [DONE]\n\n"


def read_stream(body: bytes) -> dict[str, Any]:
    """What a client reads from an event stream: content, reasoning_content,
    tool call ids, the last finish_reason, errors, and whether [DONE] came."""
    from proxy.reasoning.sse import SSEDecoder, SSEEvent

    content, reasoning, ids, errors = [], [], [], []
    finish = None
    done = False
    decoder = SSEDecoder()
    for ev in decoder.feed(body) + decoder.flush():
        if not isinstance(ev, SSEEvent):
            continue
        if ev.data == b"[DONE]":
            done = True
            continue
        obj = orjson.loads(ev.data)
        if "error" in obj:
            errors.append(obj["error"])
        for choice in obj.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            delta = choice.get("delta") or {}
            content.append(delta.get("content") or "")
            reasoning.append(delta.get("reasoning_content") or "")
            for call in delta.get("tool_calls") or []:
                if call.get("id"):
                    ids.append(call["id"])
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    return {
        "content": "".join(content),
        "reasoning": "".join(reasoning),
        "tool_call_ids": ids,
        "finish_reason": finish,
        "errors": errors,
        "done": done,
    }


Cut = TypeVar("Cut", str, bytes)


def cut_at(body: Cut, sizes: list[int]) -> list[Cut]:
    """`body` in pieces of the given sizes, and the rest as the last piece."""
    pieces: list[Cut] = []
    pos = 0
    for size in sizes:
        pieces.append(body[pos : pos + size])
        pos += size
    pieces.append(body[pos:])
    return pieces


def no_ws(text: str) -> str:
    return "".join(text.split())


def chunk(
    delta: dict[str, Any], finish: str | None = None, *, model: str = "m", id: str = "c"
) -> dict[str, Any]:
    """One `chat.completion.chunk` with a single choice, as upstreams send it."""
    return {
        "id": id,
        "object": "chat.completion.chunk",
        "created": 1,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
