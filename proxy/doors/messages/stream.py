"""Chat Completions -> Anthropic Messages, for the door's responses (sans-IO).

`MessagesEncoder` is the Messages door's `Encoder`: `feed()` takes the
normalized chat SSE bytes of one upstream read and returns the Messages
events for them (nothing held back beyond an incomplete event, and the
blocks `BlockOrder` holds so that blocks never interleave), `flush()` ends
the stream, `whole()` turns a whole chat completion (or an error body) into
a Message (or an Anthropic error).

Stream states: before the first whole data event nothing is sent but
keep-alives (as SSE comments, which clients skip); then `message_start`
(its model the one the first chunk names, as a whole answer names the
completion's; usage.input_tokens is the proxy's count of the request until
the upstream reports its own, in `message_delta`). Then one content block is
open at a time, in the order the model began them (`proxy.doors.messages.
blocks`): a delta of another kind (reasoning, text, a new tool call) closes
the open one and opens the next, except that a tool call stays open until
its arguments are whole, what begins meanwhile going out after it. A legacy
`function_call` delta is a tool call too (its id made up, one per message).
A thinking block closes with a `signature_delta` carrying the sealed
envelope of its text (and the upstream's own artefacts). The choice's
`finish_reason` sends what is held; `[DONE]` closes the last block and
sends `message_delta` (stop_reason, usage) and `message_stop`; an error
event sends what is held, then becomes `event: error` and ends the stream
(no `message_stop`). Chat comments (keep-alives) after `message_start`
become `ping` events.
"""

from __future__ import annotations

import os
from typing import Any

import orjson

from proxy.doors.messages.blocks import (
    HELD,
    TEXT,
    THINKING,
    TOOL,
    Block,
    BlockOrder,
    Json,
    Seal,
    Thinking,
    event,
    tool_input,
)
from proxy.doors.messages.shapes import error_body, error_from_openai, matched_stop, stop_reason
from proxy.reasoning.calls import CallSlots, arguments_text
from proxy.reasoning.channels import LEGACY_CALL
from proxy.reasoning.native import DetailsMerger
from proxy.reasoning.normalizer import answer_error, chunk_usage, may_fail
from proxy.reasoning.sse import (
    SSEComment,
    SSEDecoder,
    SSEEvent,
    SSELineTooLong,
    encode_comment,
)

OPEN, DONE, FAILED = "open", "done", "failed"
_EMPTY = orjson.dumps(
    {
        "message": "The upstream ended the stream without sending an answer.",
        "code": "upstream_empty_response",
    }
)
_PING = b'event: ping\ndata: {"type":"ping"}\n\n'
_STOP = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def message_id() -> str:
    return "msg_" + os.urandom(12).hex()


def _tool_id() -> str:
    return "toolu_" + os.urandom(12).hex()


def usage_of(usage: Any, input_estimate: int, output_estimate: int) -> Json:
    """Chat usage as Messages usage; the estimates stand in where the
    upstream reported none. Anthropic counts cache reads and cache writes
    apart from `input_tokens` (their sum is the prompt) and always writes
    both counts, 0 when nothing was cached. A cache read is chat's
    `prompt_tokens_details.cached_tokens` (DeepSeek's
    `prompt_cache_hit_tokens`), a cache write OpenRouter's
    `prompt_tokens_details.cache_write_tokens` (LiteLLM's
    `cache_creation_input_tokens`); both are part of chat's `prompt_tokens`."""
    out: Json = {
        "input_tokens": input_estimate,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "output_tokens": output_estimate,
    }
    if not isinstance(usage, dict):
        return out
    prompt = usage.get("prompt_tokens")
    completion = usage.get("completion_tokens")
    if isinstance(prompt, int) and not isinstance(prompt, bool):
        out["input_tokens"] = prompt
    if isinstance(completion, int) and not isinstance(completion, bool):
        out["output_tokens"] = completion
    details = usage.get("prompt_tokens_details")
    details = details if isinstance(details, dict) else {}
    cached = details.get("cached_tokens")
    if not _count(cached):
        cached = usage.get("prompt_cache_hit_tokens")
    written = details.get("cache_write_tokens")
    if not _count(written):
        written = usage.get("cache_creation_input_tokens")
    for key, value in (
        ("cache_read_input_tokens", cached),
        ("cache_creation_input_tokens", written),
    ):
        if _count(value) and value <= out["input_tokens"]:
            out["input_tokens"] -= value
            out[key] = value
    return out


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class MessagesEncoder:
    """The Messages door's wire for one response (see the module docstring)."""

    def __init__(
        self,
        *,
        model: str,
        seal: Seal,
        input_tokens: int,
        show_thinking: bool = True,
        stop_sequences: tuple[str, ...] = (),
        headers: list[tuple[str, str]] | None = None,
        max_line_bytes: int = 1 << 22,
    ) -> None:
        self.model = model
        self.seal = seal
        self.input_tokens = input_tokens
        self.show_thinking = show_thinking
        self.stop_sequences = stop_sequences
        self.headers = headers or []  # added to the response head (X-Proxy-Dropped-*)
        self.id = message_id()
        self.state = OPEN
        self._decoder = SSEDecoder(max_line_bytes)
        self._started = False
        self._order = BlockOrder(seal, show_thinking)
        self._tools: dict[Any, Block] = {}  # tool-call slot (or LEGACY_CALL) -> its block
        self._slots = CallSlots()
        self._finish: Any = None
        self._stop_sequence: str | None = None
        self._usage: Any = None
        self._chars = 0  # output characters, for an estimate when no usage comes
        self._refused = False  # the answer is a refusal (chat's `refusal` field)

    # -- Encoder --------------------------------------------------------------------

    def start_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        stream = any(
            k.lower() == "content-type" and v.startswith("text/event-stream") for k, v in headers
        )
        out = [(k, v) for k, v in headers if k.lower() not in ("content-type", "content-length")]
        kind = "text/event-stream; charset=utf-8" if stream else "application/json"
        return [("content-type", kind), *out, *self.headers]

    def feed(self, data: bytes) -> bytes:
        if self.state != OPEN:
            return b""
        out: list[bytes] = []
        try:
            events = self._decoder.split(data)  # a plain data event comes as its bytes
        except SSELineTooLong:  # the normalizer bounds lines before this
            events = []
        for ev in events:
            if isinstance(ev, SSEComment):
                # before message_start (a Messages stream's first event) a
                # keep-alive stays a comment, which clients skip
                out.append(_PING if self._started else encode_comment(ev.text))
                continue
            if not self._started:
                self._start(out, _model_of(ev))
            if type(ev) is bytes:
                go_on = self._data(ev, out)
            else:
                assert isinstance(ev, SSEEvent)
                go_on = self._event(ev, out)
            if not go_on:
                break
        return b"".join(out)

    def flush(self) -> bytes:
        """The stream ended: whatever `feed` saw last stands (a stream cut
        before [DONE] or an error ends without `message_stop`); blocks still
        held go out, so none is lost."""
        out: list[bytes] = []
        if self.state == OPEN:
            self._order.drain(out)
        return b"".join(out)

    def whole(self, status: int, body: bytes) -> bytes:
        if status >= 400:
            return error_body(status, body)
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            return error_body(502, b"The upstream sent a response that is not JSON.")
        if not isinstance(data, dict):
            return error_body(502, b"The upstream sent a response that is not an object.")
        return orjson.dumps(self.message(data))

    # -- whole -----------------------------------------------------------------------

    def message(self, completion: Json) -> Json:
        """A whole chat completion as a Message (its first choice)."""
        choices = completion.get("choices")
        choice = choices[0] if isinstance(choices, list) and choices else {}
        choice = choice if isinstance(choice, dict) else {}
        message = choice.get("message")
        message = message if isinstance(message, dict) else {}
        content: list[Json] = []
        chars = 0
        thinking = Thinking()
        reasoning = message.get("reasoning_content")
        _collect(thinking, message)
        if isinstance(reasoning, str) and reasoning:
            thinking.text.append(reasoning)
        if thinking.text or thinking.artefacts():
            content.append(self._thinking_block(thinking))
            chars += len(reasoning) if isinstance(reasoning, str) else 0
        refusal = message.get("refusal")
        refused = isinstance(refusal, str) and bool(refusal)
        for text in (message.get("content"), refusal):  # a refusal is the answer's text
            if isinstance(text, str) and text:
                content.append({"type": "text", "text": text})
                chars += len(text)
        calls = message.get("tool_calls")
        calls = [c for c in calls if isinstance(c, dict)] if isinstance(calls, list) else []
        legacy = message.get("function_call")  # the legacy single call
        if isinstance(legacy, dict):
            calls.append({"id": self._legacy_id(), "function": legacy})
        for call in calls:
            function = call.get("function")
            function = function if isinstance(function, dict) else {}
            arguments = arguments_text(function.get("arguments")) or ""
            chars += len(arguments)
            name = function.get("name")
            content.append(
                {
                    "type": "tool_use",
                    "id": call.get("id") or _tool_id(),
                    "name": name if isinstance(name, str) else "",
                    "input": tool_input(arguments),  # what a tool_use must hold: an object
                }
            )
        tool_use = any(b["type"] == "tool_use" for b in content)
        stop = matched_stop(choice, self.stop_sequences)
        reason = "stop_sequence" if stop else stop_reason(choice.get("finish_reason"), tool_use)
        model = completion.get("model")
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": model if isinstance(model, str) else self.model,
            "content": content,
            "stop_reason": "refusal" if refused and reason == "end_turn" else reason,
            "stop_sequence": stop,
            "usage": usage_of(completion.get("usage"), self.input_tokens, -(-chars // 4)),
        }

    def _thinking_block(self, thinking: Thinking) -> Json:
        text = "".join(thinking.text)
        return {
            "type": "thinking",
            "thinking": text if self.show_thinking else "",
            "signature": self.seal(text, thinking.artefacts()),
        }

    # -- stream ----------------------------------------------------------------------

    def _start(self, out: list[bytes], model: str | None) -> None:
        """`message_start`, naming the model the first chunk names (as a
        whole answer names the completion's), else the requested one."""
        self._started = True
        message: Json = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": model or self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage_of(None, self.input_tokens, 0),
        }
        out.append(event("message_start", {"type": "message_start", "message": message}))

    def _event(self, ev: SSEEvent, out: list[bytes]) -> bool:
        """One chat event; False when the stream ends here."""
        if ev.event == "error":
            return self._error(ev.data, out)
        if ev.event not in (None, "message"):
            return True  # an event kind chat clients would ignore too
        return self._data(ev.data, out)

    def _data(self, data: bytes, out: list[bytes]) -> bool:
        """One chat data event; False when the stream ends here."""
        if data.strip() == b"[DONE]":
            if self._order.started == 0 and not self._order.held and self._finish is None:
                # no block, no finish_reason (a usage chunk or a role alone):
                # no answer, not an empty one (as the other doors say)
                return self._error(_EMPTY, out)
            self._order.close(out)
            self._end(out)
            return False
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return self._error(b'"The upstream sent an event that is not JSON."', out)
        if not isinstance(chunk, dict):
            return True
        error = answer_error(chunk) if may_fail(data) else None
        if error is not None:
            self._choices(chunk, out)  # what came with the error, then the failure
            return self._error(orjson.dumps(error), out)
        usage = chunk_usage(chunk)
        if usage is not None:
            self._usage = usage
        self._choices(chunk, out)
        return True

    def _choices(self, chunk: Json, out: list[bytes]) -> None:
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice, out)

    def _choice(self, choice: Json, out: list[bytes]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = delta.get("reasoning_content")
            if (isinstance(reasoning, str) and reasoning) or _has_artefacts(delta):
                self._reasoning(reasoning if isinstance(reasoning, str) else "", delta, out)
            for key in ("content", "refusal"):  # a refusal is the answer's text
                content = delta.get(key)
                if isinstance(content, str) and content:
                    block = self._continued(TEXT)
                    if block is None:
                        block = self._order.begin(Block(TEXT, {"type": "text", "text": ""}), out)
                    self._chars += len(content)
                    self._refused = self._refused or key == "refusal"
                    self._order.add(block, content, out)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for n, call in enumerate(calls):
                    if isinstance(call, dict):
                        at = self._slots.slot(call, n)
                        self._tool_call(at, call.get("id"), call.get("function"), out)
            legacy = delta.get("function_call")
            if isinstance(legacy, dict):
                self._tool_call(LEGACY_CALL, self._legacy_id(), legacy, out)
        finish = choice.get("finish_reason")
        if finish is not None:
            self._finish = finish
            self._stop_sequence = matched_stop(choice, self.stop_sequences)
            self._order.drain(out)  # no more tool-call pieces: the held blocks go out

    def _continued(self, kind: str) -> Block | None:
        """The block that began last, if a piece of `kind` continues it."""
        last = self._order.last()
        return last if last is not None and last.kind == kind and not last.closed else None

    def _reasoning(self, text: str, delta: Json, out: list[bytes]) -> None:
        block = self._continued(THINKING)
        if block is None:
            head = {"type": "thinking", "thinking": "", "signature": ""}
            block = self._order.begin(Block(THINKING, head, Thinking()), out)
        assert block.thinking is not None
        _collect(block.thinking, delta)
        if text:
            self._chars += len(text)
            self._order.add(block, text, out)

    def _tool_call(self, key: Any, call_id: Any, function: Any, out: list[bytes]) -> None:
        function = function if isinstance(function, dict) else {}
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        block = self._tools.get(key)
        if block is None:
            call_id = call_id if isinstance(call_id, str) and call_id else _tool_id()
            head: Json = {"type": "tool_use", "id": call_id, "name": name, "input": {}}
            block = self._tools[key] = self._order.begin(Block(TOOL, head), out)
        elif block.index == HELD and name and not block.head["name"]:
            block.head["name"] = name  # a name that came after the call's first piece
            self._order.named(out)
        arguments = arguments_text(function.get("arguments"))
        if arguments:
            self._chars += len(arguments)
            self._order.add(block, arguments, out)

    def _legacy_id(self) -> str:
        """The id of a legacy `function_call` (it has none): one per message."""
        return "toolu_" + self.id.removeprefix("msg_")

    def _end(self, out: list[bytes]) -> None:
        self.state = DONE
        tool_use = bool(self._tools)
        reason = "stop_sequence" if self._stop_sequence else stop_reason(self._finish, tool_use)
        if self._refused and reason == "end_turn":
            reason = "refusal"
        usage = usage_of(self._usage, self.input_tokens, -(-self._chars // 4))
        delta = {"stop_reason": reason, "stop_sequence": self._stop_sequence}
        end = {"type": "message_delta", "delta": delta, "usage": usage}
        out.append(event("message_delta", end))
        out.append(_STOP)

    def _error(self, data: bytes, out: list[bytes]) -> bool:
        self.state = FAILED
        self._order.drain(out)  # what came before the error, in order
        try:
            error = orjson.loads(data)
        except orjson.JSONDecodeError:
            error = data.decode("utf-8", "replace")
        if isinstance(error, dict) and isinstance(error.get("error"), dict):
            error = error["error"]
        out.append(event("error", error_from_openai(error)))
        return False


def _model_of(ev: Any) -> str | None:
    """The model a chat data event names, if it names one."""
    data = ev if type(ev) is bytes else ev.data if isinstance(ev, SSEEvent) else None
    if not data or data.strip() == b"[DONE]":
        return None
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    model = chunk.get("model") if isinstance(chunk, dict) else None
    return model if isinstance(model, str) and model else None


def _has_artefacts(delta: Json) -> bool:
    return (
        bool(delta.get("thinking_blocks"))
        or bool(delta.get("reasoning_details"))
        or isinstance(delta.get("thinking"), dict)
    )


_PIECES = ("thinking", "signature", "data")  # string keys streamed in pieces


def merge_block(items: list[Json], item: Json) -> None:
    """Add a `thinking_blocks` item, or a streamed piece of one: pieces join
    by `index` when they have one, else a thinking piece continues the last
    thinking item until that item has its signature."""
    index = item.get("index")
    last = items[-1] if items else None
    target = None
    if index is not None:
        target = next((i for i in items if i.get("index") == index), None)
    elif last is not None and last.get("type") == item.get("type") == "thinking":
        target = None if last.get("signature") else last
    if target is None:
        items.append(dict(item))
        return
    for key, value in item.items():
        old = target.get(key)
        if key in _PIECES and isinstance(value, str) and isinstance(old, str):
            target[key] = old + value
        elif old is None:
            target[key] = value


def _collect(thinking: Thinking, delta: Json) -> None:
    """The upstream's own artefacts in a delta or message: its
    `thinking_blocks` items (kept whole, to go back verbatim), the signature
    of a `thinking` object, its `reasoning_details` items (merged per index)."""
    blocks = delta.get("thinking_blocks")
    if isinstance(blocks, list):
        for block in blocks:
            if isinstance(block, dict):
                merge_block(thinking.blocks, block)
    signed = delta.get("thinking")
    if isinstance(signed, dict) and isinstance(signed.get("signature"), str):
        thinking.signature.append(signed["signature"])
    details = delta.get("reasoning_details")
    if isinstance(details, list):
        if thinking.details is None:
            thinking.details = DetailsMerger()
        for item in details:
            if isinstance(item, dict):
                thinking.details.add(item)
