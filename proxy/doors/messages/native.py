"""An upstream that speaks Messages itself (route `api: messages`) (pure).

The request passes through with two changes: thinking blocks coming back
are opened from their sealed signatures and carry the upstream's own
signature again (an envelope that does not open, or holds no upstream
signature, is left out and counted; a signature that is no envelope goes
as it came, for the upstream to check), and the reasoning settings are written
as Messages parameters where the body does not set them itself
(`thinking`, `output_config.effort`). A tool-use turn sent without its
thinking gets the stored one back (`unsigned_tool_turns` finds them,
`stored_thinking` writes a stored turn's blocks with their signatures).
The body as sent is counted (X-Context-Tokens-*, count_tokens) on its
`counted_payload`.

The response passes through with one change: each thinking block's
signature becomes a sealed envelope of its text and the upstream's
signature (`signature_delta` events are held until the block ends, then one
carries the envelope). When the settings keep reasoning from the client
(`hidden`: include-in-response false, or output `none`), a thinking block
also loses its text (an empty `thinking`, no `thinking_delta` sent) and
keeps its place and its envelope, as `display: omitted` does on the
chat-upstream path: the client's tool loop sends the block back, and the
envelope gives the upstream its own text and signature again. With route
keys to mask, a text or thinking delta's tail that could begin a key waits
for the block's next delta (a key split across two deltas is then whole,
and masked, in one), or goes out alone before any other event.
`NativeReader` reads the stream (or a whole Message) into a Turn for the
store: thinking blocks with their signatures, text, tool calls, stop reason
and usage. Stream states: open until
`message_stop` (done) or an `error` event (failed); an upstream that closes
before `message_stop` gets an error event, and the turn is incomplete. For
the relay, `seen_data` says a data event other than `ping` came, and
`first_error` holds the error of a first event that is an `error`, so the
client can get a real status instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import orjson

from proxy.doors.messages.request import Opener, translate
from proxy.doors.messages.shapes import error_from_openai
from proxy.history.egress import AssistantMessage
from proxy.history.explain import NativeTurn
from proxy.keymask import KeyMask
from proxy.reasoning.blocks import TextPart, ThinkingBlock, ToolCall, Turn
from proxy.reasoning.normalizer import StreamFailure
from proxy.reasoning.sse import SSEComment, SSEDecoder, SSEEvent, SSELineTooLong, encode_event
from proxy.sealing import PREFIX as ENVELOPE_PREFIX
from proxy.sealing import Sealed
from proxy.settings import ReasoningSettings

Json = dict[str, Any]
Seal = Callable[[str, Json], str]

# the proxy's effort settings as Messages' output_config.effort
MESSAGES_EFFORT = {
    "minimal": "low",
    "low": "low",
    "medium": "medium",
    "high": "high",
    "xhigh": "xhigh",
}
OPEN, DONE, FAILED = "open", "done", "failed"
# Messages stop_reason -> the chat finish_reason a stored turn keeps
FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def native_request(
    body: Json, open_signature: Opener, params: Json
) -> tuple[Json, dict[int, NativeTurn]]:
    """The body to send a Messages upstream, and what went of each assistant
    message's thinking, by position (thinking blocks passed, envelopes
    opened, blocks left out because their signature did not open; the
    inspector's notes). `params` are the reasoning parameters (`thinking`,
    `output_config.effort`) the settings ask for; each goes where the body
    has none, or replaces the body's when `params["override"]` names it."""
    out = dict(body)
    turns: dict[int, NativeTurn] = {}
    messages = body.get("messages")
    if isinstance(messages, list):
        restored = []
        for position, message in enumerate(messages):
            if isinstance(message, dict) and message.get("role") == "assistant":
                message, turns[position] = _restore(position, message, open_signature)
            restored.append(message)
        out["messages"] = restored
    override = params.get("override", ())
    thinking = params.get("thinking")
    if thinking is not None and ("thinking" in override or "thinking" not in out):
        out["thinking"] = thinking
    effort = params.get("effort")
    if effort is not None:
        config = out.get("output_config")
        config = dict(config) if isinstance(config, dict) else {}
        if "effort" in override or "effort" not in config:
            config["effort"] = effort
            out["output_config"] = config
    return out, turns


def unsigned_tool_turns(messages: list[Any]) -> list[AssistantMessage]:
    """The assistant messages with tool_use blocks and no thinking block."""
    out = []
    for position, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") != "assistant":
            continue
        content = message.get("content")
        if not isinstance(content, list):
            continue
        blocks = [b for b in content if isinstance(b, dict)]
        kinds = {b.get("type") for b in blocks}
        if "tool_use" not in kinds or kinds & {"thinking", "redacted_thinking"}:
            continue
        calls = [b for b in blocks if b.get("type") == "tool_use"]
        ids = tuple(str(b.get("id")) for b in calls)
        named = tuple((str(b.get("name")), orjson.dumps(b.get("input")).decode()) for b in calls)
        text = "".join(b["text"] for b in blocks if isinstance(b.get("text"), str))
        out.append(AssistantMessage(position, text, ids, named, None))
    return out


def stored_thinking(turn: Turn) -> list[Json]:
    """A stored turn's thinking as Messages blocks: those with the upstream's
    signature, and redacted ones as they came."""
    out: list[Json] = []
    for block in turn.thinking:
        if block.signature:
            out.append(
                {"type": "thinking", "thinking": block.thought, "signature": block.signature}
            )
        for item in block.encrypted or ():
            if item.get("type") == "redacted_thinking":
                out.append(dict(item))
    return out


def native_params(settings: ReasoningSettings, from_headers: Json) -> Json:
    """The reasoning settings as Messages parameters (`thinking`, the effort):
    only those set somewhere (the defaults add nothing). Each replaces the
    body's own only when a client's X-Reasoning-* header set its setting
    (`override`): `thinking` for `enabled` and `max_tokens`, the effort for
    `effort`; a header for one leaves the body's other as it is."""
    override: list[str] = []
    params: Json = {"override": override}
    # effort `none`: Messages has no such effort, and its off switch says it
    if settings.enabled is False or settings.effort == "none":
        params["thinking"] = {"type": "disabled"}
        if "enabled" in from_headers or from_headers.get("effort") == "none":
            override.append("thinking")
        return params
    if settings.max_tokens is not None:
        params["thinking"] = {"type": "enabled", "budget_tokens": settings.max_tokens}
        if "max_tokens" in from_headers:
            override.append("thinking")
    effort = MESSAGES_EFFORT.get(str(settings.effort))
    if effort is not None:
        params["effort"] = effort
        if "effort" in from_headers:
            override.append("effort")
    return params


def _restore(position: int, message: Json, open_signature: Opener) -> tuple[Json, NativeTurn]:
    content = message.get("content")
    if not isinstance(content, list):
        return message, NativeTurn(position, False)
    calls = any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content)
    turn = NativeTurn(position, calls)
    blocks: list[Any] = []
    for block in content:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "redacted_thinking":
            turn.passed += 1
        elif kind == "thinking":
            given = block.get("signature")
            if isinstance(given, str) and given and not given.startswith(ENVELOPE_PREFIX):
                # not an envelope: the upstream's own signature (a session begun
                # without this proxy), which only the upstream can check
                turn.passed += 1
                blocks.append(block)
                continue
            sealed = open_signature(given)
            signature = sealed.artefacts.get("signature") if sealed is not None else None
            if sealed is None or not isinstance(signature, str) or not signature:
                turn.left_out += 1
                continue
            block = {**block, "thinking": sealed.reasoning, "signature": signature}
            turn.passed += 1
            turn.opened += 1
        blocks.append(block)
    return {**message, "content": blocks}, turn


def counted_payload(body: Json) -> Json:
    """The chat payload a body going to a Messages upstream is counted on
    (`proxy.history.context`, as a chat route's request is): `translate`'s
    for its system, messages and tools, each thinking block's own text (what
    goes upstream) as its assistant message's reasoning, counted once; a
    redacted block is opaque and counts nothing. (The body is one `translate`
    took already, with well-formed blocks restored.)"""
    texts: list[str] = []

    def marked(block: Any) -> Any:
        if isinstance(block, dict) and block.get("type") == "thinking":
            thought = block.get("thinking")
            texts.append(thought if isinstance(thought, str) else "")
            return {**block, "signature": len(texts) - 1}
        return block

    messages = body.get("messages")
    if isinstance(messages, list):
        messages = [
            {**m, "content": [marked(b) for b in m["content"]]}
            if isinstance(m, dict)
            and m.get("role") == "assistant"
            and isinstance(m.get("content"), list)
            else m
            for m in messages
        ]

    def opened(token: Any) -> Sealed | None:
        return Sealed(texts[token]) if type(token) is int and 0 <= token < len(texts) else None

    counted: Json = {k: body[k] for k in ("model", "system", "tools") if k in body}
    counted["messages"] = messages
    return translate(counted, opened, counting=True).payload


def usage_as_chat(usage: Any) -> Json | None:
    if not isinstance(usage, dict):
        return None
    prompt = sum(
        v
        for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
        if isinstance(v := usage.get(k), int)
    )
    out: Json = {"prompt_tokens": prompt}
    if isinstance(usage.get("output_tokens"), int):
        out["completion_tokens"] = usage["output_tokens"]
        out["total_tokens"] = prompt + usage["output_tokens"]
    return out


class _Block:
    __slots__ = ("data", "id", "kind", "name", "signature", "text")

    def __init__(self, start: Json) -> None:
        self.kind = start.get("type")
        self.text: list[str] = []
        self.signature = start.get("signature") or ""
        self.id = start.get("id")
        self.name = start.get("name")
        self.data = start.get("data")
        for key in ("thinking", "text"):
            if isinstance(start.get(key), str) and start[key]:
                self.text.append(start[key])
        if self.kind == "tool_use" and start.get("input"):
            self.text.append(orjson.dumps(start["input"]).decode())

    def part(self) -> ThinkingBlock | TextPart | ToolCall | None:
        text = "".join(self.text)
        if self.kind == "thinking":
            return ThinkingBlock(text, "thinking", signature=self.signature or None)
        if self.kind == "redacted_thinking":
            item = {"type": "redacted_thinking", "data": self.data}
            return ThinkingBlock("", "thinking", is_hidden=True, encrypted=(item,))
        if self.kind == "text":
            return TextPart(text) if text else None
        if self.kind in ("tool_use", "server_tool_use"):
            return ToolCall(self.id, self.name or "", text or "{}")
        return None


# the deltas whose text a client joins, and their text field
_TEXT_DELTAS = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}


class NativeReader:
    """One Messages response from a Messages upstream, passed on with sealed
    signatures and read into a Turn (see the module docstring)."""

    def __init__(
        self,
        seal: Seal,
        max_line_bytes: int = 1 << 22,
        mask: KeyMask | None = None,
        *,
        hidden: bool = False,
    ) -> None:
        self.seal = seal
        self.hidden = hidden  # thinking text stays home (see the module docstring)
        self.state = OPEN
        # route keys: a text delta's tail that could begin one waits (`_delta`),
        # as (block index, delta type, text field, text)
        self._mask = mask
        self._held: tuple[Any, str, str, str] | None = None
        self._decoder = SSEDecoder(max_line_bytes)
        self._blocks: dict[Any, _Block] = {}
        self._order: list[Any] = []
        self._message: Json = {}
        self._stop: Any = None
        self._usage: Json = {}
        self.error: str | None = None
        # for the relay (proxy.api.relay.StreamReader): until the first data
        # event (pings are keep-alives) the client's status is still open
        self.seen_data = False
        self.first_error: Any = None  # the error of a first event that is one
        self.failure: StreamFailure | None = None  # why the proxy ended the stream
        self.failed_after_data = False  # ...after a data event went to the client
        self._wrote = False  # a data event (not a ping) went to the client
        self.tap = None  # the live view reads the chat path only

    @property
    def finished(self) -> bool:
        """Never before the stream's own last event: that event ends it."""
        return False

    def feed(self, data: bytes) -> bytes:
        if self.state != OPEN:
            return b""
        try:
            events = self._decoder.feed(data)
        except SSELineTooLong as exc:
            # the events before the line go out first, then the error event
            out = self._run(cast(list[SSEEvent | SSEComment], exc.events))
            if self.state == OPEN:
                out += self._fail(StreamFailure("upstream_line_too_long", str(exc)))
            return out
        return self._run(events)

    def _run(self, events: list[SSEEvent | SSEComment]) -> bytes:
        out: list[bytes] = []
        for ev in events:
            if self.state != OPEN:
                break
            if isinstance(ev, SSEComment):
                out.append(b":" + ev.text + b"\n\n")
                continue
            assert isinstance(ev, SSEEvent)
            if self._held is not None and ev.event != "ping" and not self._continues(ev):
                out.append(self._unhold())
            out.append(self._event(ev))
            self._wrote = self._wrote or ev.event != "ping"
        return b"".join(out)

    def finish(self) -> bytes:
        """The upstream closed the stream: what it sent without its last
        blank line still counts (a final `message_stop` ends it well)."""
        if self.state != OPEN:
            return b""
        try:
            events = self._decoder.flush()
        except SSELineTooLong as exc:
            out = [self._run(cast(list[SSEEvent | SSEComment], exc.events))]
            if self.state == OPEN:
                out.append(self._fail(StreamFailure("upstream_line_too_long", str(exc))))
            return b"".join(out)
        out = [self._run([ev for ev in events if isinstance(ev, SSEEvent)])]
        if self.state == OPEN:
            message = "The upstream closed the stream before it finished."
            out.append(self._fail(StreamFailure("upstream_closed", message)))
        return b"".join(out)

    def abort(self, failure: StreamFailure) -> bytes:
        """The proxy ends the stream (idle timeout, a broken connection)."""
        if self.state != OPEN:
            return b""
        return self._fail(failure)

    def whole(self, message: Json) -> Json:
        """A whole Message, its thinking signatures sealed; the turn is read."""
        content = message.get("content")
        out = dict(message)
        if isinstance(content, list):
            sealed = []
            for n, block in enumerate(content):
                if not isinstance(block, dict):
                    continue
                self._blocks[n] = _Block(block)
                self._order.append(n)
                if block.get("type") == "thinking":
                    thinking = block.get("thinking")
                    text = thinking if isinstance(thinking, str) else ""
                    block = {**block, "signature": self._sealed(text, block.get("signature"))}
                    if self.hidden:
                        block["thinking"] = ""
                sealed.append(block)
            out["content"] = sealed
        self._message = message
        self._stop = message.get("stop_reason")
        if isinstance(message.get("usage"), dict):
            self._usage = dict(message["usage"])
        self.state = DONE
        return out

    def turn(self) -> Turn:
        parts = [p for k in self._order if (p := self._blocks[k].part()) is not None]
        model = self._message.get("model")
        message_id = self._message.get("id")
        return Turn(
            parts=tuple(parts),
            finish_reason=FINISH_REASONS.get(self._stop, self._stop)
            if isinstance(self._stop, str)
            else None,
            usage=usage_as_chat(self._usage) if self._usage else None,
            complete=self.state == DONE,
            model=model if isinstance(model, str) else None,
            response_id=message_id if isinstance(message_id, str) else None,
            error=self.error if self.state != DONE else None,
        )

    # -- internals -------------------------------------------------------------------

    def _sealed(self, text: str, signature: Any) -> str:
        artefacts = {"signature": signature} if isinstance(signature, str) and signature else {}
        return self.seal(text, artefacts)

    def _first(self, ev: SSEEvent) -> None:
        """The stream's first data event: an error there is kept in
        `first_error` (the relay answers with its status)."""
        self.seen_data = True
        if ev.event != "error" and b"error" not in ev.data:
            return  # the usual message_start: not parsed twice
        try:
            data = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            data = ev.data.decode(errors="replace")
        if isinstance(data, dict) and (ev.event == "error" or data.get("type") == "error"):
            error = data.get("error")
            self.first_error = error if error is not None else data
        elif ev.event == "error":
            self.first_error = data

    def _event(self, ev: SSEEvent) -> bytes:
        passed = encode_event(ev.data, ev.event)
        if not self.seen_data and ev.event != "ping":
            self._first(ev)
        try:
            data = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            if ev.event == "ping":
                return passed
            message = "The upstream sent an event that is not JSON."
            return self._fail(StreamFailure("malformed_upstream_event", message))
        if not isinstance(data, dict):
            return passed
        kind = data.get("type")
        if kind == "message_start" and isinstance(data.get("message"), dict):
            self._message = data["message"]
            if isinstance(self._message.get("usage"), dict):
                self._usage = dict(self._message["usage"])
        elif kind == "content_block_start" and isinstance(data.get("content_block"), dict):
            index = data.get("index")
            start = data["content_block"]
            self._blocks[index] = _Block(start)
            self._order.append(index)
            if self.hidden and start.get("type") == "thinking" and start.get("thinking"):
                hidden = {**data, "content_block": {**start, "thinking": ""}}
                return encode_event(orjson.dumps(hidden), "content_block_start")
        elif kind == "content_block_delta" and isinstance(data.get("delta"), dict):
            block = self._blocks.get(data.get("index"))
            if block is not None:
                return self._delta(block, data, passed)
        elif kind == "content_block_stop":
            block = self._blocks.get(data.get("index"))
            if block is not None and block.kind == "thinking":
                signature = self._sealed("".join(block.text), block.signature)
                sign = {
                    "type": "content_block_delta",
                    "index": data.get("index"),
                    "delta": {"type": "signature_delta", "signature": signature},
                }
                return encode_event(orjson.dumps(sign), "content_block_delta") + passed
        elif kind == "message_delta":
            delta = data.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                self._stop = delta["stop_reason"]
            if isinstance(data.get("usage"), dict):
                self._usage.update({k: v for k, v in data["usage"].items() if v is not None})
        elif kind == "message_stop":
            self.state = DONE
        elif kind == "error" or ev.event == "error":
            self.state = FAILED
            error = data.get("error")
            self.error = error.get("type") if isinstance(error, dict) else "upstream_error"
        return passed

    def _delta(self, block: _Block, data: Json, passed: bytes) -> bytes:
        delta = data["delta"]
        kind = delta.get("type")
        if kind == "signature_delta":
            if isinstance(delta.get("signature"), str):
                block.signature += delta["signature"]
            return b""  # the block's envelope goes out when it ends
        for key in ("thinking", "text", "partial_json"):
            value = delta.get(key)
            if isinstance(value, str):
                block.text.append(value)
        if self.hidden and kind == "thinking_delta":
            return b""  # kept for the envelope and the store, not sent
        field = _TEXT_DELTAS.get(kind) if isinstance(kind, str) and self._mask else None
        text = delta.get(field) if field is not None else None
        if self._mask is None or field is None or not isinstance(text, str):
            return passed
        # A route key split across two deltas would be whole in what the client
        # joins: a tail that could begin one waits for the block's next delta
        # (`_run` sends it first when another event comes).
        held, self._held = self._held, None
        if held is not None:
            text = held[3] + text
        now, tail = self._mask.split_tail(text)
        if tail:
            self._held = (data.get("index"), str(kind), field, tail)
        if held is None and not tail and now == delta[field]:
            return passed
        if not now:
            return b""
        return encode_event(
            orjson.dumps({**data, "delta": {**delta, field: now}}), "content_block_delta"
        )

    def _continues(self, ev: SSEEvent) -> bool:
        """`ev` is the next text delta of the block whose tail is held."""
        assert self._held is not None
        try:
            data = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            return False
        delta = data.get("delta") if isinstance(data, dict) else None
        return (
            isinstance(delta, dict)
            and data.get("type") == "content_block_delta"
            and data.get("index") == self._held[0]
            and delta.get("type") == self._held[1]
        )

    def _unhold(self) -> bytes:
        """What was held, as a delta of its own: it began no key after all."""
        assert self._held is not None
        index, kind, field, text = self._held
        self._held = None
        delta = {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": kind, field: text},
        }
        return encode_event(orjson.dumps(delta), "content_block_delta")

    def _fail(self, failure: StreamFailure) -> bytes:
        """The proxy ends the stream: an error event whose type follows the
        failure's, as on the chat-upstream path (`timeout_error` for the idle
        timeout, `overloaded_error` for a shutdown, `api_error` for the rest)."""
        self.state = FAILED
        self.failure = failure
        self.failed_after_data = self._wrote
        self.error = failure.code
        error = error_from_openai(
            {"type": failure.type, "message": failure.message, "code": failure.code}
        )
        held = self._unhold() if self._held is not None else b""
        return held + encode_event(orjson.dumps(error), "error")
