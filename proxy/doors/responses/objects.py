"""The Responses API's objects: a Response and its output items (pure).

A Response repeats what its request asked for (`Echo`), and holds the
output items in order: `reasoning` (summary text, and `encrypted_content`
when the request included it), `message` (output_text, with the tokens'
logprobs when the request included them, or a refusal), `function_call`
(with the tool's namespace when it has one) and `custom_tool_call`. Usage is
chat's, renamed (prompt -> input, completion -> output).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from proxy.doors.responses.request import ECHOED, Options
from proxy.doors.responses.tools import ClientTool

Json = dict[str, Any]


def new_id(prefix: str) -> str:
    """A fresh id: `resp`, `rs` (reasoning), `msg`, `fc` (function call), `ctc`."""
    return f"{prefix}_{os.urandom(16).hex()}"


@dataclass(frozen=True, slots=True)
class Echo:
    """What a Response repeats of its request."""

    fields: Json

    @classmethod
    def of(cls, body: Json, options: Options) -> Echo:
        reasoning = body.get("reasoning") if isinstance(body.get("reasoning"), dict) else {}
        assert isinstance(reasoning, dict)
        text = {k: v for k, v in (body.get("text") or {}).items() if v is not None}
        echoed = {name: body.get(name) for name in ECHOED}
        return cls(
            {
                "instructions": body.get("instructions"),
                "max_output_tokens": body.get("max_output_tokens"),
                "metadata": options.metadata or {},
                "model": options.model or "",
                "parallel_tool_calls": body.get("parallel_tool_calls") is not False,
                "previous_response_id": options.previous_response_id,
                "reasoning": {
                    "effort": reasoning.get("effort"),
                    "summary": reasoning.get("summary"),
                },
                "store": options.store,
                "temperature": body.get("temperature"),
                "text": {"format": {"type": "text"}, "verbosity": "medium", **text},
                "tool_choice": body.get("tool_choice") or "auto",
                **({"top_logprobs": body["top_logprobs"]} if "top_logprobs" in body else {}),
                "tools": body.get("tools") or [],
                "top_p": body.get("top_p"),
                "truncation": body.get("truncation")
                if body.get("truncation") in ("auto", "disabled")
                else "disabled",
                # answered in the foreground, whatever the request said
                "background": False,
                **echoed,
            }
        )


def response_object(
    echo: Echo,
    *,
    response_id: str,
    created_at: int,
    status: str,
    output: list[Json],
    model: str | None = None,
    usage: Json | None = None,
    error: Json | None = None,
    incomplete: str | None = None,
    completed_at: int | None = None,
) -> Json:
    out: Json = {
        "id": response_id,
        "object": "response",
        "created_at": created_at,
        "status": status,
        "error": error,
        "incomplete_details": {"reason": incomplete} if incomplete else None,
        **echo.fields,
        "output": output,
        "usage": usage,
    }
    if model:
        out["model"] = model
    if completed_at is not None:
        out["completed_at"] = completed_at
    return out


def reasoning_item(item_id: str, summary: str, encrypted: str | None) -> Json:
    item: Json = {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": summary}] if summary else [],
    }
    if encrypted is not None:
        item["encrypted_content"] = encrypted
    return item


def output_text(text: str, logprobs: list[Json] | None = None) -> Json:
    """An output_text part; `logprobs` empty unless the request included them
    (as the Responses API writes it)."""
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}


def logprobs_of(chat: Any) -> list[Json]:
    """Chat's `choice.logprobs` (its `content` tokens) as an output_text
    part's logprobs: each token with its UTF-8 `bytes` (made from the token
    where chat has none) and its `top_logprobs` alike."""
    tokens = chat.get("content") if isinstance(chat, dict) else None
    out: list[Json] = []
    for entry in tokens if isinstance(tokens, list) else ():
        token = _token(entry)
        if token is None:
            continue
        top = entry.get("top_logprobs")
        alternatives = (_token(t) for t in (top if isinstance(top, list) else ()))
        token["top_logprobs"] = [t for t in alternatives if t is not None]
        out.append(token)
    return out


def _token(entry: Any) -> Json | None:
    if not isinstance(entry, dict):
        return None
    token, logprob = entry.get("token"), entry.get("logprob")
    if not isinstance(token, str) or isinstance(logprob, bool):
        return None
    if not isinstance(logprob, int | float):
        return None
    raw = entry.get("bytes")
    if not isinstance(raw, list) or not all(type(b) is int for b in raw):
        raw = list(token.encode(errors="surrogatepass"))
    return {"token": token, "logprob": logprob, "bytes": raw}


def event_logprobs(logprobs: list[Json]) -> list[Json]:
    """A part's logprobs as `response.output_text.delta` and `.done` carry
    them: token and logprob (no bytes), and the same of each alternative."""
    return [
        {
            "token": t["token"],
            "logprob": t["logprob"],
            "top_logprobs": [
                {"token": a["token"], "logprob": a["logprob"]} for a in t["top_logprobs"]
            ],
        }
        for t in logprobs
    ]


def refusal_part(text: str) -> Json:
    return {"type": "refusal", "refusal": text}


def message_item(
    item_id: str,
    text: str | None,
    status: str,
    refusal: bool = False,
    logprobs: list[Json] | None = None,
) -> Json:
    """An assistant message (`text` None: just opened, no content part yet);
    `refusal`: its text is the model's refusal (chat's `refusal` field);
    `logprobs`: its output_text's, when the request included them."""
    content: list[Json] = []
    if text is not None:
        content.append(refusal_part(text) if refusal else output_text(text, logprobs))
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def call_item(item_id: str, call_id: str, tool: ClientTool, payload: str, status: str) -> Json:
    """A function call (`payload`: its arguments) or a custom tool call (its input)."""
    if tool.custom:
        return {
            "id": item_id,
            "type": "custom_tool_call",
            "call_id": call_id,
            "name": tool.name,
            "input": payload,
            "status": status,
        }
    item: Json = {
        "id": item_id,
        "type": "function_call",
        "call_id": call_id,
        "name": tool.name,
        "arguments": payload,
        "status": status,
    }
    if tool.namespace is not None:
        item["namespace"] = tool.namespace
    return item


def _count(obj: Any, *path: str) -> int:
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, int) and not isinstance(obj, bool) and obj >= 0 else 0


def usage_of(chat: Any, reasoning_estimate: int | None = None) -> Json | None:
    """Chat usage as Responses usage; reasoning tokens the upstream did not
    report are the proxy's estimate of the reasoning it stored. Cache reads
    are chat's `prompt_tokens_details.cached_tokens` (DeepSeek's
    `prompt_cache_hit_tokens`), cache writes OpenRouter's
    `prompt_tokens_details.cache_write_tokens` (LiteLLM's
    `cache_creation_input_tokens`): both part of `input_tokens`, as in chat."""
    if not isinstance(chat, dict):
        return None
    prompt = _count(chat, "prompt_tokens")
    completion = _count(chat, "completion_tokens")
    reasoning = _count(chat, "completion_tokens_details", "reasoning_tokens")
    if not reasoning and reasoning_estimate:
        reasoning = min(reasoning_estimate, completion) if completion else reasoning_estimate
    cached = _count(chat, "prompt_tokens_details", "cached_tokens")
    written = _count(chat, "prompt_tokens_details", "cache_write_tokens")
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": cached or _count(chat, "prompt_cache_hit_tokens"),
            "cache_write_tokens": written or _count(chat, "cache_creation_input_tokens"),
        },
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": _count(chat, "total_tokens") or prompt + completion,
    }


# ResponseError codes: a closed set; chat failures map to the nearest
_RATE_LIMITED = frozenset({"rate_limit_exceeded", "rate_limit_error", "insufficient_quota"})


def error_of(code: Any, message: Any) -> Json:
    """A Response's `error`, from a chat error's code (kept in the message)."""
    text = message if isinstance(message, str) and message else "The response failed."
    if isinstance(code, str) and code:
        text = f"{text} ({code})"
    kind = "rate_limit_exceeded" if code in _RATE_LIMITED else "server_error"
    return {"code": kind, "message": text}
