"""The wire formats the simulator speaks: one demo model per provider shape.

Each `DemoModel` is data: where its reasoning travels (a field, OpenRouter's
`reasoning` + `reasoning_details`, or `<think>` tags in `content`), which
extra envelope fields the provider adds, where usage goes in a stream, and
which refusal it checks. `stream_chunks` and `completion` turn a `Reply` into
the provider's chunks or whole response; they are pure and do no I/O. The
shapes follow the providers' documentation and the captured streams in
tests/cases/ingress.
"""

from __future__ import annotations

import base64
import hashlib
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from proxy.demo.checks import (
    Check,
    deepseek_reasoning_required,
    groq_reasoning_unsupported,
    kimi_reasoning_required,
)
from proxy.demo.replies import CHARS_PER_TOKEN, Reply

FINGERPRINT = "reasoning-proxy-demo-simulator"
NOTE = (
    "SIMULATED upstream of `reasoning-proxy demo`: canned answers in each provider's "
    "wire format, no real model, no network."
)

# reasoning_content / reasoning: a field beside `content` (DeepSeek and Kimi /
# vLLM and Groq); openrouter: `reasoning` plus `reasoning_details` items;
# think_tags: `<think>...</think>` in `content` (MiniMax); implicit_think: the
# prompt opened `<think>`, so only `</think>` appears (Qwen3 / R1 served raw).
Style = Literal["reasoning_content", "reasoning", "openrouter", "think_tags", "implicit_think"]
# finish_chunk: usage on the chunk with finish_reason; x_groq: inside Groq's
# `x_groq` object; on_request: OpenAI's way, a last chunk with no choices,
# only when the request asks with stream_options.include_usage.
UsageIn = Literal["finish_chunk", "x_groq", "on_request"]


@dataclass(frozen=True, slots=True)
class DemoModel:
    id: str
    imitates: str  # one line for /v1/models and the start-up banner
    style: Style
    id_prefix: str = "chatcmpl-"
    check: Check | None = None
    usage_in_stream: UsageIn = "on_request"
    reasoning_tokens: bool = False  # usage has completion_tokens_details.reasoning_tokens
    logprobs: bool = False  # choices carry "logprobs": null
    explicit_nulls: bool = False  # deltas carry both keys, the unused one null (DeepSeek)
    provider: str | None = None  # OpenRouter names the serving provider
    comment: str | None = None  # an SSE comment before the first event (a keep-alive)
    opening_delta: Mapping[str, Any] | None = None  # a role-only first chunk
    finish_delta: Mapping[str, Any] = field(default_factory=dict)


MODELS: dict[str, DemoModel] = {
    m.id: m
    for m in (
        DemoModel(
            "demo-deepseek",
            "DeepSeek: reasoning_content, then content",
            "reasoning_content",
            check=deepseek_reasoning_required,
            usage_in_stream="finish_chunk",
            reasoning_tokens=True,
            logprobs=True,
            explicit_nulls=True,
            opening_delta={"role": "assistant", "content": None, "reasoning_content": ""},
            finish_delta={"content": "", "reasoning_content": None},
        ),
        DemoModel(
            "demo-kimi",
            "Kimi K2 Thinking: reasoning_content; 400 if a tool-call turn comes without it",
            "reasoning_content",
            check=kimi_reasoning_required,
            usage_in_stream="finish_chunk",
        ),
        DemoModel(
            "demo-openrouter",
            "OpenRouter: reasoning + reasoning_details (text, encrypted)",
            "openrouter",
            id_prefix="gen-",
            usage_in_stream="finish_chunk",
            reasoning_tokens=True,
            provider="DemoSimulator",
            comment="OPENROUTER PROCESSING",
            finish_delta={"role": "assistant", "content": ""},
        ),
        DemoModel(
            "demo-vllm",
            "vLLM >= 0.11: the reasoning field",
            "reasoning",
            opening_delta={"role": "assistant", "content": ""},
        ),
        DemoModel(
            "demo-minimax",
            "MiniMax M2: <think>...</think> inline in content",
            "think_tags",
        ),
        DemoModel(
            "demo-qwen",
            "Qwen3 / R1 served raw: only </think> appears (the prompt opened it)",
            "implicit_think",
        ),
        DemoModel(
            "demo-groq",
            "Groq: the reasoning field; 400 on reasoning_content in the input",
            "reasoning",
            check=groq_reasoning_unsupported,
            usage_in_stream="x_groq",
            logprobs=True,
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Envelope:
    """What every chunk of one response repeats."""

    id: str
    created: int
    model: str
    split_reasoning: bool = False  # MiniMax's reasoning_split: reasoning_details, not tags


def model_object(model: DemoModel) -> dict[str, Any]:
    """One model as `GET /v1/models` lists it and `/v1/models/{id}` returns it."""
    return {
        "id": model.id,
        "object": "model",
        "created": 0,
        "owned_by": FINGERPRINT,
        "description": f"SIMULATED. {model.imitates}.",
    }


def models_list() -> dict[str, Any]:
    return {
        "object": "list",
        "data": [model_object(m) for m in MODELS.values()],
        "note": NOTE,
    }


def pieces(text: str, words: int = 2) -> list[str]:
    """`text` cut into stream pieces of a few words; joined, they give it back."""
    tokens = re.findall(r"\s*\S+", text)
    out = ["".join(tokens[i : i + words]) for i in range(0, len(tokens), words)]
    rest = text[sum(map(len, tokens)) :]
    if rest:
        out.append(rest)
    return out


def tokens(text: str) -> int:
    return math.ceil(len(text) / CHARS_PER_TOKEN)


# -- stream ----------------------------------------------------------------------------

PartKind = Literal["reasoning", "encrypted", "content", "tool_start", "tool_args"]


def _in_content(model: DemoModel, env: Envelope) -> bool:
    if model.style == "think_tags":
        return not env.split_reasoning
    return model.style == "implicit_think"


def _tagged(model: DemoModel, reply: Reply) -> str:
    """The content of a model that writes its reasoning into it."""
    if not reply.reasoning:
        return reply.answer
    if model.style == "implicit_think":
        return f"{reply.reasoning}\n</think>\n\n{reply.answer}"
    return f"<think>\n{reply.reasoning}\n</think>\n\n{reply.answer}"


@dataclass(frozen=True, slots=True)
class _Part:
    kind: PartKind
    text: str
    index: int = 0  # which tool call a tool part belongs to


def _parts(model: DemoModel, reply: Reply, env: Envelope) -> list[_Part]:
    parts: list[_Part] = []
    if _in_content(model, env):
        parts += [_Part("content", p) for p in pieces(_tagged(model, reply))]
    else:
        parts += [_Part("reasoning", p) for p in pieces(reply.reasoning)]
        if model.style == "openrouter" and reply.reasoning:
            parts.append(_Part("encrypted", _encrypted(reply.reasoning)))
        parts += [_Part("content", p) for p in pieces(reply.answer)]
    # several calls (parallel tool calls) follow one another, each with its
    # own index: its id and name first, then its arguments in pieces
    for index, call in enumerate(reply.tool_calls):
        parts.append(_Part("tool_start", "", index))
        arguments = call.arguments
        parts += [
            _Part("tool_args", arguments[i : i + 10], index) for i in range(0, len(arguments), 10)
        ]
    return parts


def _encrypted(reasoning: str) -> str:
    # opaque, deterministic bytes standing for a provider's signed reasoning
    digest = hashlib.sha256(reasoning.encode()).digest()
    return base64.b64encode(b"demo-encrypted-reasoning:" + digest).decode()


def _text_detail(text: str, model: DemoModel) -> dict[str, Any]:
    if model.style == "openrouter":
        return {"type": "reasoning.text", "text": text, "format": "unknown", "index": 0}
    return {"type": "reasoning.text", "text": text, "index": 0}


def _encrypted_detail(data: str) -> dict[str, Any]:
    return {
        "type": "reasoning.encrypted",
        "data": data,
        "id": "rs_" + data[-16:].strip("="),
        "format": "unknown",
        "index": 1,
    }


def _delta(model: DemoModel, part: _Part, reply: Reply) -> dict[str, Any]:
    kind, text = part.kind, part.text
    if kind == "reasoning":
        if model.style == "openrouter":
            return {
                "role": "assistant",
                "content": "",
                "reasoning": text,
                "reasoning_details": [_text_detail(text, model)],
            }
        if model.style == "think_tags":  # split by MiniMax's reasoning_split
            return {"reasoning_details": [_text_detail(text, model)]}
        if model.explicit_nulls:
            return {"content": None, model.style: text}
        return {model.style: text}
    if kind == "encrypted":
        return {
            "role": "assistant",
            "content": "",
            "reasoning": None,
            "reasoning_details": [_encrypted_detail(text)],
        }
    if kind == "content":
        if model.style == "openrouter":
            return {"role": "assistant", "content": text}
        if model.explicit_nulls:
            return {"content": text, model.style: None}
        return {"content": text}
    if kind == "tool_start":
        call = reply.tool_calls[part.index]
        function = {"name": call.name, "arguments": ""}
        start = {"index": part.index, "id": call.id, "type": "function", "function": function}
        return {"tool_calls": [start]}
    return {"tool_calls": [{"index": part.index, "function": {"arguments": text}}]}


def _chunk(
    model: DemoModel, env: Envelope, delta: Mapping[str, Any], finish: str | None = None
) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": dict(delta)}
    if model.logprobs:
        choice["logprobs"] = None
    choice["finish_reason"] = finish
    if model.provider is not None:
        choice["native_finish_reason"] = finish
    chunk: dict[str, Any] = {
        "id": env.id,
        "object": "chat.completion.chunk",
        "created": env.created,
        "model": env.model,
    }
    if model.provider is not None:
        chunk["provider"] = model.provider
    chunk["system_fingerprint"] = FINGERPRINT
    chunk["choices"] = [choice]
    return chunk


def _finish_reason(reply: Reply) -> str:
    return "tool_calls" if reply.tool_calls else "stop"


def usage(model: DemoModel, reply: Reply, prompt_chars: int) -> dict[str, Any]:
    """Token counts estimated at four characters a token."""
    reasoning = tokens(reply.reasoning)
    answer = tokens(reply.answer + "".join(c.arguments for c in reply.tool_calls))
    prompt = max(1, math.ceil(prompt_chars / 4))
    out: dict[str, Any] = {
        "prompt_tokens": prompt,
        "completion_tokens": reasoning + answer,
        "total_tokens": prompt + reasoning + answer,
    }
    if model.reasoning_tokens:
        out["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    return out


def stream_chunks(
    model: DemoModel, reply: Reply, env: Envelope, *, prompt_chars: int, include_usage: bool
) -> list[dict[str, Any]]:
    """The chunks of a streamed answer, in order (without `[DONE]`)."""
    chunks: list[dict[str, Any]] = []
    if model.opening_delta is not None:
        chunks.append(_chunk(model, env, model.opening_delta))
    for part in _parts(model, reply, env):
        delta = _delta(model, part, reply)
        if not chunks:
            delta = {"role": "assistant", "content": "", **delta}
        chunks.append(_chunk(model, env, delta))
    finish = _chunk(model, env, model.finish_delta, _finish_reason(reply))
    counted = usage(model, reply, prompt_chars)
    if model.usage_in_stream == "finish_chunk":
        finish["usage"] = counted
    elif model.usage_in_stream == "x_groq":
        if chunks:
            chunks[0]["x_groq"] = {"id": _request_id(env)}
        finish["x_groq"] = {"id": _request_id(env), "usage": counted}
    chunks.append(finish)
    if model.usage_in_stream == "on_request" and include_usage:
        last = _chunk(model, env, {})
        last["choices"] = []
        last["usage"] = counted
        chunks.append(last)
    return chunks


def _request_id(env: Envelope) -> str:
    return "req_" + env.id.rsplit("-", 1)[-1]


# -- whole response -----------------------------------------------------------------


def _message(model: DemoModel, reply: Reply, env: Envelope) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant"}
    if _in_content(model, env):
        message["content"] = _tagged(model, reply)
    else:
        message["content"] = reply.answer
        if reply.reasoning and model.style == "openrouter":
            message["refusal"] = None
            message["reasoning"] = reply.reasoning
            message["reasoning_details"] = [
                _text_detail(reply.reasoning, model),
                _encrypted_detail(_encrypted(reply.reasoning)),
            ]
        elif reply.reasoning and model.style == "think_tags":
            message["reasoning_details"] = [_text_detail(reply.reasoning, model)]
        elif reply.reasoning:
            message[model.style] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": call.arguments},
            }
            for call in reply.tool_calls
        ]
    return message


def completion(
    model: DemoModel, reply: Reply, env: Envelope, *, prompt_chars: int
) -> dict[str, Any]:
    """The whole (non-streamed) response."""
    choice: dict[str, Any] = {"index": 0, "message": _message(model, reply, env)}
    if model.logprobs:
        choice["logprobs"] = None
    choice["finish_reason"] = _finish_reason(reply)
    if model.provider is not None:
        choice["native_finish_reason"] = choice["finish_reason"]
    out: dict[str, Any] = {
        "id": env.id,
        "object": "chat.completion",
        "created": env.created,
        "model": env.model,
    }
    if model.provider is not None:
        out["provider"] = model.provider
    out["system_fingerprint"] = FINGERPRINT
    out["choices"] = [choice]
    out["usage"] = usage(model, reply, prompt_chars)
    if model.usage_in_stream == "x_groq":
        out["x_groq"] = {"id": _request_id(env)}
    return out
