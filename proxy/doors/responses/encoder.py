"""Normalized chat completions -> the Responses API's wire (sans-IO).

`ResponsesEncoder.feed(bytes) -> bytes` takes the normalized chat SSE the
exchange path relays (whole events, read by read; any split works) and
returns the Responses events for them at once: each delta goes out as soon
as it comes in. `flush()` ends the stream; `whole()` turns a whole chat
completion into a Response object (an error body passes as it is: the
Responses API's HTTP errors have chat's shape).

The stream's states: NEW until the first event (then `response.created` and
`response.in_progress`), OPEN while output items open and close, ENDED after
`response.completed` / `response.incomplete` (at `[DONE]`) or
`response.failed` (an error event, a stream that ends without `[DONE]`, or
a `[DONE]` after no answer at all: no item, no finish_reason, as when an
upstream sends a usage chunk or a role alone; `upstream_empty_response`).
A failed Response holds the items the client was sent: those that ended,
and those still open, as they stood, `incomplete` (no done events for them).
One output item is open at a time, except tool calls, which stay open
together until something else comes (chat streams their arguments by
index): reasoning text opens a `reasoning` item (its summary text streamed),
answer text a `message` item, a tool call a `function_call` or
`custom_tool_call` item; whatever comes next closes the open ones, in order.
Chat's legacy `function_call` (older compatible servers answer with it, and
`finish_reason: "function_call"`) is one more tool call; having no id, its
`call_id` is made from the response's id, as for any call without one.

A reasoning item's `encrypted_content` is an envelope sealed by the `seal`
callable: the reasoning text and the upstream's own artefacts
(`reasoning_details` items, signatures) as they streamed. When the settings
hide reasoning from the client, the stream carries none: the item is then
made from the turn the normalizer is building (`turn`, set by the door),
with an empty summary, and only when the client asked for the envelope.
Every closed item is kept (with its envelope) for `final`, the Response as
it ended, which the door stores; the client's copy has the envelope only
when its request's `include` asked for it.

With `include_logprobs` (the request's `message.output_text.logprobs`), the
tokens' logprobs of each chunk (chat's `choice.logprobs.content`) go out
with the answer text that chunk brought, and the output_text part keeps
them all; a chunk whose text became reasoning brings none. A whole answer
whose `content` held tagged reasoning keeps the tokens of its visible text
alone: each token is read as a chunk of its own would be (`separation`, the
door's separation options). Without it, the events carry `logprobs: []` and
the part none, whatever the upstream sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import orjson

from proxy.doors.responses.objects import (
    Echo,
    call_item,
    error_of,
    event_logprobs,
    logprobs_of,
    message_item,
    new_id,
    output_text,
    reasoning_item,
    refusal_part,
    response_object,
    usage_of,
)
from proxy.doors.responses.tools import ClientTool, ToolNames
from proxy.reasoning.blocks import (
    Json,
    Part,
    TextPart,
    ThinkingBlock,
    ToolCall,
    Turn,
    blocks_for_context,
    join_reasoning,
)
from proxy.reasoning.calls import CallSlots, arguments_text
from proxy.reasoning.channels import LEGACY_CALL, NormalizeOptions, visible_tokens
from proxy.reasoning.native import DetailsMerger
from proxy.reasoning.normalizer import answer_error, chunk_usage, may_fail
from proxy.reasoning.sse import SSEComment, SSEDecoder, SSEEvent, encode_comment
from proxy.sealing import Sealed

NEW, OPEN, ENDED = "new", "open", "ended"
_EMPTY = "The upstream ended the stream without sending an answer."
# finish_reason -> a Response's incomplete_details.reason
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}

Seal = Callable[[Sealed], str]


class _Reasoning:
    __slots__ = ("details", "head", "id", "index", "started", "texts", "thinking_blocks")

    def __init__(self, item_id: str, index: int) -> None:
        self.id = item_id
        self.index = index
        at = {"item_id": item_id, "output_index": index, "summary_index": 0}
        self.head = _head("response.reasoning_summary_text.delta", at)
        self.texts: list[str] = []
        self.started = False  # its summary part was announced
        self.details = DetailsMerger()
        self.thinking_blocks: list[Json] = []


class _Message:
    __slots__ = ("head", "id", "index", "logprobs", "refusal", "texts")

    def __init__(self, item_id: str, index: int, refusal: bool, logprobs: bool) -> None:
        self.id = item_id
        self.index = index
        self.refusal = refusal  # its one part is a refusal, not output_text
        # its tokens' logprobs, when the request included them
        self.logprobs: list[Json] | None = [] if logprobs and not refusal else None
        at = {"item_id": item_id, "output_index": index, "content_index": 0}
        if refusal:
            self.head = _head("response.refusal.delta", at)
        else:
            self.head = _head("response.output_text.delta", at, b',"logprobs":[]')
        self.texts: list[str] = []

    def part(self, text: str) -> Json:
        return refusal_part(text) if self.refusal else output_text(text, self.logprobs)


class _Call:
    __slots__ = ("call_id", "head", "id", "index", "name", "parts", "tool")

    def __init__(self, item_id: str, index: int, call_id: str, tool: ClientTool) -> None:
        self.id = item_id
        self.index = index
        at = {"item_id": item_id, "output_index": index}
        self.head = _head("response.function_call_arguments.delta", at)
        self.call_id = call_id
        self.tool = tool
        self.parts: list[str] = []


class ResponsesEncoder:
    def __init__(
        self,
        echo: Echo,
        names: ToolNames,
        seal: Seal,
        *,
        include_encrypted: bool,
        include_logprobs: bool = False,
        hidden: bool = False,
        response_id: str | None = None,
        created_at: int | None = None,
    ) -> None:
        self.echo = echo
        self.names = names
        self.seal = seal
        self.include_encrypted = include_encrypted
        self.include_logprobs = include_logprobs  # the answer's tokens' logprobs
        self.hidden = hidden  # the settings keep reasoning from the client
        self.response_id = response_id or new_id("resp")
        self._stem = self.response_id.partition("_")[2] or self.response_id
        self.created_at = created_at if created_at is not None else int(time.time())
        # the turn so far (the normalizer's, then the stored one): set by the door
        self.turn: Callable[[], Turn | None] = lambda: None
        self.final: Json | None = None  # the Response as it ended, envelopes included
        self.state = NEW
        self._decoder = SSEDecoder()
        self._seq = 0
        self._output: list[Json | None] = []  # by output_index; None while open
        self._reasoning: _Reasoning | None = None
        self._message: _Message | None = None
        self._calls: dict[Any, _Call] = {}  # by tool-call slot (or LEGACY_CALL)
        self._slots = CallSlots()
        # a call whose name has not come yet: its `output_item.added` waits,
        # its arguments kept, until the name or the next item (`_flush_unnamed`)
        self._unnamed: _Call | None = None
        # text that came while a call was open, waiting for the call to end
        self._held: list[tuple[str, bool, Any]] = []
        self._finish: str | None = None
        self._usage: Any = None
        self._model: str | None = None
        # the status of the items closing now: incomplete at an incomplete end
        self._closing = "completed"
        self._blocks_seen = 0  # (hidden reasoning) thinking blocks already in an item
        # how the answer was separated (set by the door): a whole answer's
        # logprobs are then told apart as its text was
        self.separation: NormalizeOptions | None = None
        self._details_seen = 0

    # -- the Encoder protocol ----------------------------------------------------------

    def start_headers(self, headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
        return headers

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        for ev in self._decoder.feed(data):
            self._event(ev, out)
        return b"".join(out)

    def flush(self) -> bytes:
        out: list[bytes] = []
        for ev in self._decoder.flush():
            self._event(ev, out)
        if self.state != ENDED:
            self._start(out)
            self._fail(out, "stream_ended", "The stream ended before the response was complete.")
        return b"".join(out)

    def whole(self, status: int, body: bytes) -> bytes:
        if status >= 300:
            return body
        try:
            completion = orjson.loads(body)
        except orjson.JSONDecodeError:
            completion = None
        choices = completion.get("choices") if isinstance(completion, dict) else None
        choice = choices[0] if isinstance(choices, list) and choices else None
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict):
            self._fail([], "malformed_upstream_response", "The upstream's answer has no message.")
            return self._client_body()
        assert isinstance(completion, dict)
        assert isinstance(choice, dict)
        self._finish = choice.get("finish_reason")
        self._model = completion.get("model") if isinstance(completion.get("model"), str) else None
        if self.hidden:
            self._hidden_reasoning([], rest=True)
        else:
            self._whole_reasoning(message)
        # what was being written when the answer stopped short: the tool
        # calls, else the message (as a stream leaves them open at its end)
        calls = message.get("tool_calls")
        calls = list(calls) if isinstance(calls, list) else []
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            calls.append({"function": legacy})
        cut = "incomplete" if self._finish in _INCOMPLETE else "completed"
        text_status = "completed" if calls else cut
        content = message.get("content")
        if isinstance(content, str) and content:
            logprobs = self._answer_logprobs(choice.get("logprobs"))
            item = message_item(self._id("msg"), content, text_status, False, logprobs)
            self._output.append(item)
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            self._output.append(message_item(self._id("msg"), refusal, text_status, True))
        for call in calls:
            function = call.get("function") if isinstance(call, dict) else None
            if not isinstance(function, dict):
                continue
            assert isinstance(call, dict)
            tool = self.names.client(str(function.get("name") or ""))
            arguments = arguments_text(function.get("arguments")) or ""
            payload = self.names.custom_input(arguments) if tool.custom else arguments
            call_id = _call_id(call) or self._id("call", len(self._output))
            item_id = self._id("ctc" if tool.custom else "fc")
            self._output.append(call_item(item_id, call_id, tool, payload, cut))
        self._usage = completion.get("usage")
        self._end([])
        return self._client_body()

    def _answer_logprobs(self, chat: Any) -> list[Json] | None:
        """A whole answer's logprobs, those of its visible text alone (the
        tokens of tags and reasoning in `content` left out, as the stream
        leaves them out with the chunks that became reasoning)."""
        if not self.include_logprobs:
            return None
        tokens = logprobs_of(chat)
        if self.separation is None or not tokens:
            return tokens
        turn = self.turn()
        native = turn is not None and any(b.source_field != "think_tag" for b in turn.thinking)
        return visible_tokens(tokens, self.separation, native)

    def _whole_reasoning(self, message: Json) -> None:
        text = message.get("reasoning_content")
        if not isinstance(text, str):
            text = message.get("reasoning") if isinstance(message.get("reasoning"), str) else ""
        assert isinstance(text, str)
        artefacts: Json = {}
        for key in ("reasoning_details", "thinking_blocks"):
            value = message.get(key)
            if isinstance(value, list) and value:
                artefacts[key] = value
        envelope = self._from_turn(rest=True)
        if text or artefacts or envelope is not None:
            envelope = envelope or Sealed(text.strip(), artefacts)
            self._output.append(reasoning_item(self._id("rs"), text, self.seal(envelope)))

    # -- events in -----------------------------------------------------------------------

    def _event(self, ev: SSEEvent | SSEComment, out: list[bytes]) -> None:
        if type(ev) is SSEComment:
            out.append(encode_comment(ev.text))  # keep-alives stay keep-alives
            return
        assert type(ev) is SSEEvent
        if self.state != OPEN:
            if self.state == ENDED:
                return
            self._start(out)
        data = ev.data
        if ev.event == "error":
            self._error(data, out)
            return
        if data[:1] != b"{":
            if data.strip() == b"[DONE]":
                self._end(out)
            return  # the normalizer lets no other such event through
        try:
            chunk = orjson.loads(data)
        except orjson.JSONDecodeError:
            return
        if type(chunk) is not dict:
            return
        error = answer_error(chunk) if may_fail(data) else None
        if error is None:
            self._chunk(chunk, out)
            return
        self._chunk(chunk, out)  # what came with the error, then the failure
        self._error(orjson.dumps({"error": error}), out)

    def _chunk(self, chunk: Json, out: list[bytes]) -> None:
        if self._model is None and isinstance(chunk.get("model"), str):
            self._model = chunk["model"]
        usage = chunk_usage(chunk)
        if usage is not None:
            self._usage = usage
        choices = chunk.get("choices")
        if type(choices) is not list:
            return
        for choice in choices:
            if type(choice) is not dict or choice.get("index", 0) != 0:
                continue  # the first choice is the response (n > 1 is not a Responses notion)
            delta = choice.get("delta")
            if type(delta) is dict:
                self._delta(delta, out, choice.get("logprobs"))
            if choice.get("finish_reason") is not None:
                self._finish = choice["finish_reason"]

    def _delta(self, delta: Json, out: list[bytes], logprobs: Any = None) -> None:
        if not self.hidden:
            reasoning = delta.get("reasoning_content")
            if type(reasoning) is not str:
                reasoning = delta.get("reasoning")
            if reasoning and type(reasoning) is str:
                self._reasoning_text(reasoning, out)
            details = delta.get("reasoning_details")
            if details and type(details) is list:
                item = self._open_reasoning(out)
                for detail in details:
                    if isinstance(detail, dict):
                        item.details.add(detail)
            blocks = delta.get("thinking_blocks")
            if blocks and type(blocks) is list:
                self._open_reasoning(out).thinking_blocks.extend(
                    b for b in blocks if isinstance(b, dict)
                )
        content = delta.get("content")
        if content and type(content) is str:
            self._text(content, out, logprobs=logprobs)
        refusal = delta.get("refusal")
        if refusal and type(refusal) is str:
            self._text(refusal, out, refusal=True)
        calls = delta.get("tool_calls")
        if calls and type(calls) is list:
            for n, call in enumerate(calls):
                if isinstance(call, dict):
                    self._tool_call(call, self._slots.slot(call, n), out)
        legacy = delta.get("function_call")
        if legacy and type(legacy) is dict:
            self._tool_call({"function": legacy}, LEGACY_CALL, out)

    def _error(self, data: bytes, out: list[bytes]) -> None:
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            obj = None
        error = obj.get("error", obj) if isinstance(obj, dict) else None
        if not isinstance(error, dict):
            error = {"message": data.decode(errors="replace")}
        code = error.get("code") if isinstance(error.get("code"), str) else error.get("type")
        self._fail(out, code, error.get("message"))

    # -- items ---------------------------------------------------------------------------

    def _reasoning_text(self, text: str, out: list[bytes]) -> None:
        item = self._open_reasoning(out)
        if not item.started:
            item.started = True
            part = {"type": "summary_text", "text": ""}
            self._emit(out, "response.reasoning_summary_part.added", **self._at(item), part=part)
        item.texts.append(text)
        self._delta_event(out, item.head, text)

    def _open_reasoning(self, out: list[bytes]) -> _Reasoning:
        if self._reasoning is not None:
            return self._reasoning
        self._close_visible(out)
        index = self._add()
        item = self._reasoning = _Reasoning(self._id("rs", index), index)
        self._added(out, item.index, reasoning_item(item.id, "", None))
        return item

    def _close_reasoning(self, out: list[bytes]) -> None:
        item, self._reasoning = self._reasoning, None
        if item is None:
            return
        text = "".join(item.texts)
        if item.started:
            part = {"type": "summary_text", "text": text}
            self._emit(out, "response.reasoning_summary_text.done", **self._at(item), text=text)
            self._emit(out, "response.reasoning_summary_part.done", **self._at(item), part=part)
        self._done(out, item.index, self._reasoning_item(item))

    def _reasoning_item(self, item: _Reasoning) -> Json:
        """A reasoning item as it ends, with its envelope."""
        text = "".join(item.texts)
        envelope = self._from_turn()
        if envelope is None:  # no turn to read (or nothing new in it): what streamed
            artefacts: Json = {}
            if item.details.items:
                artefacts["reasoning_details"] = item.details.items
            if item.thinking_blocks:
                artefacts["thinking_blocks"] = item.thinking_blocks
            envelope = Sealed(text.strip(), artefacts)
        return reasoning_item(item.id, text, self.seal(envelope))

    def _from_turn(self, *, rest: bool = False) -> Sealed | None:
        """What the envelope of the reasoning since the last one holds, from
        the turn so far: the text of its new blocks up to the answer text or
        tool call that follows them (the turn can be ahead of the events,
        and a later run of reasoning is an item of its own; `rest`: all of
        them), a differing tagged copy left out, and the upstream's own
        artefacts as the normalizer merged them (`reasoning_details` items,
        `thinking_blocks` with signatures). None when there is no turn, or
        nothing new in it."""
        turn = self.turn()
        if turn is None:
            return None
        blocks = turn.thinking
        details = turn.reasoning_details or ()
        new = blocks[self._blocks_seen :] if rest else _next_run(turn.parts, self._blocks_seen)
        self._blocks_seen += len(new)
        new_details, self._details_seen = details[self._details_seen :], len(details)
        if not (new or new_details):
            return None
        artefacts: Json = {}
        if new_details:
            artefacts["reasoning_details"] = list(new_details)
        thinking_blocks = [
            dict(i) for b in new if b.source_field == "thinking_blocks" for i in b.encrypted or ()
        ]
        if thinking_blocks:
            artefacts["thinking_blocks"] = thinking_blocks
        text = join_reasoning(blocks_for_context(Turn(parts=tuple(new))))
        return Sealed(text, artefacts)

    def _hidden_reasoning(self, out: list[bytes], *, rest: bool = False) -> None:
        """The reasoning the settings keep from the client, from the turn so
        far: one item with an empty summary, when the client keeps envelopes
        (`rest`: at the end, all that is left)."""
        envelope = self._from_turn(rest=rest)
        if envelope is None or not self.include_encrypted:
            return
        index = self._add()
        item = reasoning_item(self._id("rs", index), "", self.seal(envelope))
        self._added(out, index, reasoning_item(item["id"], "", None))
        self._done(out, index, item)

    def _text(
        self, text: str, out: list[bytes], refusal: bool = False, logprobs: Any = None
    ) -> None:
        item = self._message
        if item is None and self._calls:
            # a call is open and its arguments may go on (text held back as a
            # possible tag start comes out late): the text waits for its end,
            # so the call is never cut in two
            self._held.append((text, refusal, logprobs))
            return
        if item is not None and item.refusal != refusal:
            self._close_message(out)  # answer and refusal are parts of their own
            item = None
        if item is None:
            self._close_reasoning(out)
            self._close_calls(out)
            if self.hidden:
                self._hidden_reasoning(out)
            index = self._add()
            item = self._message = _Message(
                self._id("msg", index), index, refusal, self.include_logprobs
            )
            self._added(out, item.index, message_item(item.id, None, "in_progress"))
            at = {**self._at(item), "content_index": 0}
            self._emit(out, "response.content_part.added", **at, part=item.part(""))
        item.texts.append(text)
        tokens = logprobs_of(logprobs) if item.logprobs is not None and logprobs else None
        if not tokens:
            self._delta_event(out, item.head, text)
            return
        assert item.logprobs is not None
        item.logprobs += tokens
        at = {**self._at(item), "content_index": 0, "delta": text}
        self._emit(out, "response.output_text.delta", **at, logprobs=event_logprobs(tokens))

    def _close_message(self, out: list[bytes]) -> None:
        item, self._message = self._message, None
        if item is None:
            return
        text = "".join(item.texts)
        at = {**self._at(item), "content_index": 0}
        if item.refusal:
            self._emit(out, "response.refusal.done", **at, refusal=text)
        else:
            shown = event_logprobs(item.logprobs) if item.logprobs else []
            self._emit(out, "response.output_text.done", **at, text=text, logprobs=shown)
        self._emit(out, "response.content_part.done", **at, part=item.part(text))
        done = message_item(item.id, text, self._closing, item.refusal, item.logprobs)
        self._done(out, item.index, done)

    def _tool_call(self, delta: Json, key: Any, out: list[bytes]) -> None:
        """A piece of the tool call at `key` (its slot, proxy/reasoning/calls.py)."""
        function = delta.get("function") if isinstance(delta.get("function"), dict) else {}
        assert isinstance(function, dict)
        arguments = arguments_text(function.get("arguments"))
        name = function.get("name")
        name = name if isinstance(name, str) else ""
        call = self._calls.get(key)
        if call is None:
            self._release_held(out)
            self._close_reasoning(out)
            self._close_message(out)
            if self.hidden:
                self._hidden_reasoning(out)
            self._flush_unnamed(out)  # the calls go out in the order they began
            index = self._add()
            call_id = _call_id(delta) or self._id("call", index)
            call = self._calls[key] = self._call(index, call_id, name)
            if name:
                self._announce(out, call)
            else:
                self._unnamed = call
        elif name and call is self._unnamed:  # its name came after its first piece
            self._unnamed = None
            call = self._calls[key] = self._call(call.index, call.call_id, name, call.parts)
            self._announce(out, call)
        if arguments:
            call.parts.append(arguments)
            if call is not self._unnamed and not call.tool.custom:  # custom: once whole
                self._delta_event(out, call.head, arguments)

    def _call(self, index: int, call_id: str, name: str, parts: list[str] | None = None) -> _Call:
        tool = self.names.client(name)
        call = _Call(self._id("ctc" if tool.custom else "fc", index), index, call_id, tool)
        if parts:
            call.parts = parts
        return call

    def _announce(self, out: list[bytes], call: _Call) -> None:
        """`output_item.added` for a call, with the arguments it has so far."""
        item = call_item(call.id, call.call_id, call.tool, "", "in_progress")
        self._emit(out, "response.output_item.added", output_index=call.index, item=item)
        if call.parts and not call.tool.custom:
            self._delta_event(out, call.head, "".join(call.parts))

    def _flush_unnamed(self, out: list[bytes]) -> None:
        """Announce the call waiting for its name, as it stands."""
        call, self._unnamed = self._unnamed, None
        if call is not None:
            self._announce(out, call)

    def _close_calls(self, out: list[bytes]) -> None:
        self._flush_unnamed(out)  # its name never came
        calls, self._calls = self._calls, {}
        for call in calls.values():
            arguments = "".join(call.parts)
            if call.tool.custom:
                payload = self.names.custom_input(arguments)
                event = "response.custom_tool_call_input"
                self._emit(out, event + ".delta", **self._at(call), delta=payload)
                self._emit(out, event + ".done", **self._at(call), input=payload)
            else:
                payload = arguments
                event = "response.function_call_arguments.done"
                at = self._at(call)
                self._emit(out, event, **at, name=call.tool.name, arguments=payload)
            item = call_item(call.id, call.call_id, call.tool, payload, self._closing)
            self._done(out, call.index, item)

    def _close_visible(self, out: list[bytes]) -> None:
        self._release_held(out)
        self._close_message(out)
        self._close_calls(out)

    def _release_held(self, out: list[bytes]) -> None:
        """The open calls end; the text that came while they were open follows."""
        if not self._held:
            return
        held, self._held = self._held, []
        self._close_calls(out)
        for text, refusal, logprobs in held:
            self._text(text, out, refusal, logprobs)

    # -- the response --------------------------------------------------------------------

    def _start(self, out: list[bytes]) -> None:
        if self.state != NEW:
            return
        self.state = OPEN
        response = self._response("in_progress", [])
        self._emit(out, "response.created", response=response)
        self._emit(out, "response.in_progress", response=response)

    def _end(self, out: list[bytes]) -> None:
        if self._nothing_came():
            self._fail(out, "upstream_empty_response", _EMPTY)
            return
        incomplete = _INCOMPLETE.get(self._finish or "")
        self._close_reasoning(out)
        if incomplete:  # the answer stopped short in what was open
            self._closing = "incomplete"
        self._close_visible(out)
        if self.hidden:
            self._hidden_reasoning(out, rest=True)
        status = "incomplete" if incomplete else "completed"
        self._finalize(out, status, incomplete=incomplete)

    def _nothing_came(self) -> bool:
        """True for an answer that is none: no output item, no finish_reason,
        nothing in the turn (a stream of a usage chunk or a role alone)."""
        if self._finish is not None or self._output:
            return False
        turn = self.turn()
        return turn is None or not turn.parts

    def _fail(self, out: list[bytes], code: Any, message: Any) -> None:
        self._release_held(out)  # nothing the upstream sent is dropped
        self._left_open()
        self._finalize(out, "failed", error=error_of(code, message))

    def _left_open(self) -> None:
        """The items the client saw open when the response failed, as they
        stood, `incomplete`, into the output (no done events: they did not
        end). A call whose name never came was never shown: it stays out."""
        reasoning, self._reasoning = self._reasoning, None
        if reasoning is not None:
            item = self._reasoning_item(reasoning)
            self._output[reasoning.index] = {**item, "status": "incomplete"}
        message, self._message = self._message, None
        if message is not None:
            text = "".join(message.texts)
            self._output[message.index] = message_item(
                message.id, text, "incomplete", message.refusal, message.logprobs
            )
        calls, self._calls = self._calls, {}
        unnamed, self._unnamed = self._unnamed, None
        for call in calls.values():
            if call is not unnamed:
                arguments = "".join(call.parts)
                payload = self.names.custom_input(arguments) if call.tool.custom else arguments
                item = call_item(call.id, call.call_id, call.tool, payload, "incomplete")
                self._output[call.index] = item

    def _finalize(
        self,
        out: list[bytes],
        status: str,
        error: Json | None = None,
        incomplete: str | None = None,
    ) -> None:
        streaming, self.state = self.state == OPEN, ENDED
        done = [item for item in self._output if item is not None]
        turn = self.turn()
        estimate = sum(b.tokens or 0 for b in turn.thinking) if turn is not None else None
        self.final = self._response(
            status,
            done,
            usage=usage_of(self._usage, estimate),
            error=error,
            incomplete=incomplete,
            completed_at=int(time.time()) if status == "completed" else None,
        )
        if streaming:  # (whole() sends the object alone)
            event = {"completed": "response.completed", "failed": "response.failed"}.get(
                status, "response.incomplete"
            )
            self._emit(out, event, response=self._for_client(self.final))

    def _response(self, status: str, output: list[Json], **extra: Any) -> Json:
        return response_object(
            self.echo,
            response_id=self.response_id,
            created_at=self.created_at,
            status=status,
            output=output,
            model=self._model,
            **extra,
        )

    def _for_client(self, response: Json) -> Json:
        if self.include_encrypted:
            return response
        return {**response, "output": [self._plain(item) for item in response["output"]]}

    def _plain(self, item: Json) -> Json:
        if "encrypted_content" not in item or self.include_encrypted:
            return item
        return {k: v for k, v in item.items() if k != "encrypted_content"}

    def _client_body(self) -> bytes:
        assert self.final is not None
        return orjson.dumps(self._for_client(self.final))

    # -- writing events --------------------------------------------------------------------

    def _id(self, prefix: str, index: int | None = None) -> str:
        """An item's id: the response's, with the item's output index."""
        return f"{prefix}_{self._stem}_{len(self._output) if index is None else index}"

    def _add(self) -> int:
        self._output.append(None)
        return len(self._output) - 1

    def _at(self, item: _Reasoning | _Message | _Call) -> Json:
        at: Json = {"item_id": item.id, "output_index": item.index}
        if type(item) is _Reasoning:
            at["summary_index"] = 0
        return at

    def _added(self, out: list[bytes], index: int, item: Json) -> None:
        self._flush_unnamed(out)  # the items go out in the order they began
        self._emit(out, "response.output_item.added", output_index=index, item=item)

    def _done(self, out: list[bytes], index: int, item: Json) -> None:
        self._output[index] = item
        self._emit(out, "response.output_item.done", output_index=index, item=self._plain(item))

    def _delta_event(self, out: list[bytes], head: tuple[bytes, bytes, bytes], text: str) -> None:
        """A delta event of an open item: its bytes around the text were made
        when the item opened (the same bytes `_emit` would write)."""
        seq = self._seq
        self._seq = seq + 1
        out += (head[0], str(seq).encode(), head[1], orjson.dumps(text), head[2])

    def _emit(self, out: list[bytes], kind: str, **fields: Any) -> None:
        data = orjson.dumps({"type": kind, "sequence_number": self._seq, **fields})
        self._seq += 1
        out += (b"event: ", kind.encode(), b"\ndata: ", data, b"\n\n")


def _next_run(parts: Sequence[Part], seen: int) -> list[ThinkingBlock]:
    """The thinking blocks after the first `seen` of `parts`, up to the
    answer text (not whitespace alone) or tool call that follows them."""
    run: list[ThinkingBlock] = []
    for part in parts:
        if type(part) is ThinkingBlock:
            if seen:
                seen -= 1
            else:
                run.append(part)
        elif run and (type(part) is ToolCall or (type(part) is TextPart and part.text.strip())):
            break
    return run


def _call_id(call: Json) -> str | None:
    """The upstream's tool-call id: the key its stored turn is found by."""
    value = call.get("id")
    return value if isinstance(value, str) and value else None


def _head(kind: str, at: Json, tail: bytes = b"") -> tuple[bytes, bytes, bytes]:
    """The bytes of an item's delta event around its sequence number and its
    text, in `_emit`'s key order: type, sequence_number, `at`, delta, tail."""
    name = kind.encode()
    before = b"event: " + name + b'\ndata: {"type":"' + name + b'","sequence_number":'
    return before, b"," + orjson.dumps(at)[1:-1] + b',"delta":', tail + b"}\n\n"
