"""A whole chat completion as a stream, and a stream as a whole completion,
for an upstream that answers in the other mode than the request asked (some
ignore `stream`). The result then goes the usual way (normalized, stored,
written in the client's wire), so the client gets the mode it asked for.

Sans-IO: objects and bytes in, bytes and objects out.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.reasoning.blocks import Json, index_key
from proxy.reasoning.calls import CallSlots, arguments_text
from proxy.reasoning.native import DetailsMerger, merge_piece
from proxy.reasoning.normalizer import answer_error, chunk_usage
from proxy.reasoning.sse import SSEComment, SSEDecoder

# the fields a completion and its chunks share beside `choices` and `usage`
# (OpenAI's `ChatCompletion` and `ChatCompletionChunk`)
_ENVELOPE = ("id", "created", "model", "system_fingerprint", "service_tier")
# the per-token lists of a choice's `logprobs`, one entry per token in order
_LOGPROB_LISTS = ("content", "refusal")


def _event(obj: Json) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


def asks_usage(payload: Json) -> bool:
    """Whether a chat request asks for the usage chunk
    (`stream_options.include_usage: true`)."""
    options = payload.get("stream_options")
    return type(options) is dict and options.get("include_usage") is True


def completion_as_stream(completion: Json, *, usage_chunk: bool = True) -> bytes:
    """The event stream of a `chat.completion`: per choice one chunk whose
    delta is the whole message (its `finish_reason` and `logprobs` on it),
    then [DONE]. The completion's usage comes as a chunk of its own (no
    choices) when `usage_chunk` (the request asked with
    `stream_options.include_usage`), else on the last choice's chunk, where
    a client that reads `choices[0]` of every chunk still finds one."""
    envelope = {k: completion[k] for k in _ENVELOPE if completion.get(k) is not None}
    envelope["object"] = "chat.completion.chunk"
    chunks: list[Json] = []
    choices = completion.get("choices")
    for choice in choices if type(choices) is list else ():
        if type(choice) is not dict:
            continue
        message = choice.get("message")
        delta = {k: v for k, v in message.items() if v is not None} if type(message) is dict else {}
        calls = delta.get("tool_calls")
        if type(calls) is list:
            delta["tool_calls"] = [
                {**call, "index": n} for n, call in enumerate(calls) if type(call) is dict
            ]
        entry = {
            "index": choice.get("index", 0),
            "delta": delta,
            "finish_reason": choice.get("finish_reason"),
        }
        if "logprobs" in choice:
            entry["logprobs"] = choice["logprobs"]
        chunks.append({**envelope, "choices": [entry]})
    usage = completion.get("usage")
    if type(usage) is dict:
        if usage_chunk or not chunks:
            chunks.append({**envelope, "choices": [], "usage": usage})
        else:
            chunks[-1]["usage"] = usage
    return b"".join(_event(chunk) for chunk in chunks) + b"data: [DONE]\n\n"


class _Choice:
    __slots__ = ("calls", "details", "finish_reason", "logprobs", "message", "slots", "thinking")

    def __init__(self) -> None:
        self.message: Json = {"role": "assistant"}
        self.calls: dict[int, Json] = {}  # by slot (proxy/reasoning/calls.py)
        self.slots = CallSlots()
        self.finish_reason: Any = None
        self.logprobs: Json | None = None  # the chunks' token lists, joined
        # streamed pieces of `reasoning_details` and `thinking_blocks` items,
        # each put together into the item a whole answer holds
        self.details = DetailsMerger()
        self.thinking = DetailsMerger()

    def add_logprobs(self, piece: Any) -> None:
        if type(piece) is not dict:
            return
        joined = self.logprobs
        if joined is None:
            joined = self.logprobs = {key: None for key in _LOGPROB_LISTS}
        for key, value in piece.items():
            before = joined.get(key)
            if type(value) is list and type(before) is list:
                joined[key] = [*before, *value]
            elif value is not None:
                joined[key] = value

    def add(self, delta: Json) -> None:
        message = self.message
        for key, value in delta.items():
            if key == "tool_calls":
                if type(value) is list:
                    self._calls(value)
            elif key == "reasoning_details" and type(value) is list:
                for item in value:
                    if type(item) is dict:
                        self.details.add(item)
            elif key == "thinking_blocks" and type(value) is list:
                self._thinking(value)
            elif key == "function_call" and type(value) is dict:
                self._function_call(value)  # the legacy single call, in pieces too
            elif key == "role" or value is None:
                continue
            else:
                before = message.get(key)
                if type(value) is str and type(before) is str:
                    message[key] = before + value
                elif type(value) is list and type(before) is list:
                    message[key] = [*before, *value]
                else:
                    message[key] = value

    def _calls(self, calls: list[Any]) -> None:
        for n, call in enumerate(calls):
            if type(call) is not dict:
                continue
            entry = self.calls.setdefault(
                self.slots.slot(call, n),
                {"id": None, "type": "function", "function": {"name": "", "arguments": ""}},
            )
            for key in ("id", "type"):
                if call.get(key):
                    entry[key] = call[key]
            function = call.get("function")
            if type(function) is dict:
                name = function.get("name")
                if type(name) is str:
                    entry["function"]["name"] += name
                arguments = arguments_text(function.get("arguments"))
                if arguments is not None:
                    entry["function"]["arguments"] += arguments

    def _thinking(self, items: list[Any]) -> None:
        """Thinking blocks join by their `index` when they have one; else a
        `thinking` piece continues the last block while that one is a
        `thinking` block without its signature (LiteLLM streams the text,
        then the signature, of each block)."""
        for item in items:
            if type(item) is not dict:
                continue
            listed = self.thinking.items
            last = listed[-1] if listed else None
            if (
                last is not None
                and item.get("index") is None
                and last.get("index") is None
                and item.get("type") == "thinking" == last.get("type")
                and not last.get("signature")
            ):
                merge_piece(last, item)
            else:
                self.thinking.add(item)

    def _function_call(self, piece: Json) -> None:
        call = self.message.setdefault("function_call", {"name": "", "arguments": ""})
        for key in ("name", "arguments"):
            if type(piece.get(key)) is str:
                call[key] += piece[key]

    def whole(self, index: Any) -> Json:
        message = dict(self.message)
        message.setdefault("content", None)
        if self.calls:
            message["tool_calls"] = list(self.calls.values())
        if self.details.items:
            message["reasoning_details"] = self.details.items
        if self.thinking.items:
            message["thinking_blocks"] = self.thinking.items
        return {
            "index": index,
            "message": message,
            "logprobs": self.logprobs,
            "finish_reason": self.finish_reason,
        }


CLOSED = {
    "message": "The upstream closed the stream before it finished.",
    "type": "upstream_error",
    "code": "upstream_closed",
}


def stream_as_completion(body: bytes, max_line_bytes: int) -> Json | None:
    """The `chat.completion` a whole event stream adds up to: content and
    reasoning texts joined, tool calls put together by index, the pieces of
    `reasoning_details` and `thinking_blocks` items put together into whole
    items, each choice's `logprobs` token lists joined, the last finish_reason and usage. A
    stream that says it failed (an error object or `event: error`, anywhere)
    gives `{"error": ...}`, and so does one that stops before its end (no
    [DONE], and a choice without its finish_reason): half an answer is not
    an answer. One without a chunk (or not a stream at all) gives None.
    SSELineTooLong: a line over `max_line_bytes`."""
    decoder = SSEDecoder(max_line_bytes)
    events = [*decoder.feed(body), *decoder.flush()]
    envelope: Json = {}
    choices: dict[Any, _Choice] = {}
    usage: Json | None = None
    ended = False
    for ev in events:
        if type(ev) is SSEComment:
            continue
        data = ev.data  # type: ignore[union-attr]
        if data.strip() == b"[DONE]":
            ended = True
            break
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return None
        if ev.event == "error":  # type: ignore[union-attr]
            error = chunk.get("error", chunk) if type(chunk) is dict else chunk
            return {"error": error if error is not None else CLOSED}
        if type(chunk) is not dict:
            continue
        error = answer_error(chunk)
        if error is not None:
            return {"error": error}
        for key in _ENVELOPE:
            if key not in envelope and chunk.get(key) is not None:
                envelope[key] = chunk[key]
        usage = chunk_usage(chunk) or usage
        listed = chunk.get("choices")
        for choice in listed if type(listed) is list else ():
            if type(choice) is not dict:
                continue
            index = index_key(choice.get("index", 0))
            state = choices.get(index)
            if state is None:
                state = choices[index] = _Choice()
            delta = choice.get("delta")
            if type(delta) is dict:
                state.add(delta)
            state.add_logprobs(choice.get("logprobs"))
            if choice.get("finish_reason") is not None:
                state.finish_reason = choice["finish_reason"]
    if not choices and usage is None:
        return None
    # without [DONE], a finish_reason on every choice (`n` > 1: one choice's
    # end is not the others')
    if not ended and not (choices and all(c.finish_reason is not None for c in choices.values())):
        return {"error": CLOSED}
    completion: Json = {**envelope, "object": "chat.completion"}
    completion["choices"] = [state.whole(index) for index, state in choices.items()]
    if usage is not None:
        completion["usage"] = usage
    return completion
