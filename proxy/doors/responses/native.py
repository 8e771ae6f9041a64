"""What an upstream that speaks the Responses API itself gets, and what
comes back from it, normalized (sans-IO).

The request goes as it came, with the reasoning settings applied
(`native_request`): the effort the settings name becomes `reasoning.effort`
(the body's own stays unless an X-Reasoning-* header set one), mapped per
model as the dialect maps chat's `reasoning_effort` (gpt-5.1 takes no
`xhigh`: `high`), and `enabled: false` becomes the model's lowest effort
where the dialect's off switch is one (`none` on gpt-5.1); settings a
Responses upstream has no control for are named in `X-Reasoning-Ignored`;
reasoning items this proxy made (their `encrypted_content` is one of its
envelopes, which no upstream can read: items of responses it answered on a
chat route) are left out. An envelope this proxy cannot open goes on: an
upstream that is itself a reasoning-proxy sealed it, and opens it. An
earlier turn whose function calls come without reasoning items gets the
upstream's own back from the stored turn (`input_turns` finds them,
`stored_reasoning` writes a stored turn's items with their
`encrypted_content`, or by id alone when the upstream stored them and the
request lets it read its stored items, `with_reasoning` puts them before
the turn). The body as sent is counted (X-Context-Tokens-*) on its
`counted_payload`.

The answer (`NativeResponses`): models served raw put their reasoning in
the answer text as `<think>...</think>`. Tagged reasoning in a message's
output_text becomes a `reasoning` item of its own, before the message (its
text streamed as summary deltas), and the message keeps the answer alone,
each output_text part its own (text held back as a possible tag start goes
out as the part's last `output_text.delta` when the part ends).
Everything else passes as the upstream sent it, with `output_index`
shifted past the items the proxy added and `sequence_number` counted
afresh. Reasoning the settings keep from the client (include-in-response
false) loses its summary and reasoning text, and the events of its summary
and of its reasoning_text parts are not sent. The
turn (reasoning, text, tool calls, usage) is built from the output items
for the store. With route keys to mask, a text delta's tail that could
begin a key waits for the same text's next delta (`_unheld`), so a key the
upstream splits across two deltas is whole, and masked, in one of them.

For the relay, `seen_data` says a data event came (comments are keep-alives),
and `first_error` holds the error of a first event that is `error` or
`response.failed`, so the client can get a real status instead.

Stream states: OPEN until `response.completed` / `response.incomplete`
(DONE) or `response.failed` / `error` / an event that is not JSON / a line
over the bound / a close before the end (FAILED; the proxy's own failures
end with `response.failed`); after that, input is ignored. A message item's `added` events are held
until its first answer text or any other event of it (a refusal's deltas, a
part's end, the item's end), so a reasoning item split off its start comes
before it and everything else keeps the upstream's order; reasoning that
follows answer text (or those released events) inside one message goes into
a reasoning item after it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson

from proxy.dialects import DEFAULT_DIALECT, DIALECTS, SWITCH_ON, Dialect, plan_params
from proxy.doors.responses.objects import error_of
from proxy.doors.responses.request import TOOL_OUTPUTS, translate
from proxy.errors import BadRequest
from proxy.history.egress import AssistantMessage
from proxy.history.explain import NativeTurn
from proxy.keymask import KeyMask
from proxy.reasoning.blocks import Part, SourceField, TextPart, ThinkingBlock, ToolCall, Turn
from proxy.reasoning.normalizer import StreamFailure
from proxy.reasoning.sse import (
    SSEComment,
    SSEDecoder,
    SSEEvent,
    SSELineTooLong,
    encode_comment,
    encode_event,
)
from proxy.reasoning.tags import Reasoning, TagSet, TagSplitter, Visible
from proxy.sealing import PREFIX as ENVELOPE_PREFIX
from proxy.settings import ReasoningSettings

Json = dict[str, Any]
# the `format` of a stored reasoning item the upstream sent with encrypted_content
RESPONSES_FORMAT = "openai-responses-v1"
# a stored reasoning item the upstream keeps itself (made with `store` on),
# known there by its id alone: {"type": KEPT_UPSTREAM, "id": ..., "format": ...}
KEPT_UPSTREAM = "reasoning.stored"
Opens = Callable[[str], bool]  # an envelope this proxy sealed for the caller's tenant
OPEN, DONE, FAILED = "open", "done", "failed"
_ENDS = {
    "response.completed": DONE,
    "response.incomplete": DONE,
    "response.failed": FAILED,
    "error": FAILED,
}
# the events whose `delta` text a client joins (a route key split across two
# of them is held back until it is whole: `NativeResponses._unheld`)
_TEXT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    }
)
_TEXT_AT = ("type", "item_id", "output_index", "content_index", "summary_index")
# the deltas that grow an item begun, and the field of the item each grows
_PARTIAL_FIELDS = {
    "response.reasoning_summary_text.delta": "summary",
    "response.reasoning_text.delta": "content",
    "response.function_call_arguments.delta": "arguments",
    "response.custom_tool_call_input.delta": "input",
}
_SUMMARY_EVENTS = frozenset(
    {
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_part.done",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
    }
)
# a reasoning item's content parts (reasoning_text, as gpt-oss and vLLM
# stream it) begin and end with the events a message's parts use
_PART_EVENTS = frozenset({"response.content_part.added", "response.content_part.done"})
_REASONING_PART = "reasoning_text"


# -- the request ------------------------------------------------------------------------


def native_request(
    body: Json,
    settings: ReasoningSettings,
    from_headers: Json,
    ours: Opens,
    dialect: Dialect = DIALECTS[DEFAULT_DIALECT],
) -> tuple[Json, list[str]]:
    """The body for a Responses upstream, and the settings it cannot honour.
    `ours`: whether an `encrypted_content` is an envelope this proxy sealed
    (for the caller's tenant). `dialect`: the request's, whose per-model
    `reasoning_effort` values are Responses' `reasoning.effort` values too."""
    out = dict(body)
    reasoning = dict(out["reasoning"]) if isinstance(out.get("reasoning"), dict) else {}
    model = body.get("model")
    effort, ignored = responses_effort(dialect, settings, model if isinstance(model, str) else "")
    if effort is not None:
        setting = "effort" if settings.enabled else "enabled"
        if setting in from_headers or "effort" not in reasoning:
            reasoning["effort"] = effort
    if reasoning:
        out["reasoning"] = reasoning
    foreign = without_own_items(out, ours)
    if foreign is not None:
        out = foreign
    return out, ignored


def responses_effort(
    dialect: Dialect, settings: ReasoningSettings, model: str
) -> tuple[str | None, list[str]]:
    """The `reasoning.effort` the settings give this model, and the settings
    a Responses upstream cannot honour. The dialect's rules for chat's
    `reasoning_effort` say which efforts the model takes and what turns its
    reasoning off; an effort without such a rule goes as the settings name it."""
    plan = plan_params(dialect, settings, model)
    efforts = [
        value
        for setting, path, value in plan.params
        if path == ("reasoning_effort",) and setting != SWITCH_ON
    ]
    ignored = ["max_tokens"] if settings.max_tokens is not None else []
    if not settings.enabled:
        if not efforts:
            return None, ["enabled", *ignored]
        return efforts[0], ignored
    if efforts:
        return efforts[0], ignored
    return settings.effort, ignored


def without_own_items(body: Json, ours: Opens) -> Json | None:
    """The body without the reasoning items this proxy made in its `input`
    (None: it has none)."""
    items = body.get("input")
    if not isinstance(items, list):
        return None
    kept = [i for i in items if not _own_item(i, ours)]
    return {**body, "input": kept} if len(kept) < len(items) else None


@dataclass(slots=True)
class InputTurn:
    """An earlier assistant turn in a request's `input`: a run of output items
    (reasoning, assistant messages, calls) between the user's messages and
    the calls' outputs. `wanted`: how to find its stored turn, when it has
    function calls and none of the upstream's reasoning items (the client
    dropped them); None otherwise."""

    note: NativeTurn
    wanted: AssistantMessage | None


# the calls a stored turn is found again by (their call_id is its tool-call id)
_CALLS = frozenset(("function_call", "custom_tool_call"))


def input_turns(items: Any, ours: Opens) -> list[InputTurn]:
    """The assistant turns of a request's input (see `InputTurn`), each
    noted with the reasoning items it carries: the upstream's (passed) and
    this proxy's own (left out by `native_request`)."""
    if not isinstance(items, list):
        return []
    out: list[InputTurn] = []
    run: list[tuple[int, Json]] = []
    for position, item in enumerate([*items, None]):
        if isinstance(item, dict) and _output_item(item):
            run.append((position, item))
            continue
        if run:
            out.append(_input_turn(run, ours))
            run = []
    return out


def _output_item(item: Json) -> bool:
    kind = item.get("type")
    if kind == "reasoning" or kind in _CALLS or item.get("role") == "assistant":
        return True
    return isinstance(kind, str) and kind.endswith("_call")  # a hosted tool's call


def _input_turn(run: list[tuple[int, Json]], ours: Opens) -> InputTurn:
    calls = [i for _, i in run if i.get("type") in _CALLS and isinstance(i.get("call_id"), str)]
    note = NativeTurn(run[0][0], bool(calls))
    for _, item in run:
        if item.get("type") == "reasoning":
            if _own_item(item, ours):
                note.left_out += 1
            else:
                note.passed += 1
    if not calls or note.passed:
        return InputTurn(note, None)
    ids = tuple(str(c["call_id"]) for c in calls)
    named = tuple(
        (str(c.get("name")), str(c.get("arguments" if c["type"] == "function_call" else "input")))
        for c in calls
    )
    text = "".join(_message_text(i) for _, i in run if i.get("type") in (None, "message"))
    return InputTurn(note, AssistantMessage(note.position, text, ids, named, None))


def stored_reasoning(turn: Turn, ours: Opens, *, by_id: bool = False) -> list[Json]:
    """A stored turn's reasoning items as the upstream made them: those it
    sent with `encrypted_content` (asked for with `include`), with their ids;
    never this proxy's envelopes. `by_id`: the request has `store` on, so the
    items the upstream stored (made with `store` on) go by their id alone."""
    out: list[Json] = []
    for block in turn.thinking:
        for item in block.encrypted or ():
            if item.get("type") == KEPT_UPSTREAM:
                if by_id and isinstance(item.get("id"), str):
                    out.append({"type": "reasoning", "id": item["id"], "summary": []})
                continue
            data = item.get("data")
            if item.get("format") != RESPONSES_FORMAT or not isinstance(data, str) or not data:
                continue
            if data.startswith(ENVELOPE_PREFIX) and ours(data):
                continue
            restored: Json = {"type": "reasoning", "summary": [], "encrypted_content": data}
            if isinstance(item.get("id"), str):
                restored = {"id": item["id"], **restored}
            out.append(restored)
    return out


def with_reasoning(items: list[Any], before: dict[int, list[Json]]) -> list[Any]:
    """The input with reasoning items put back before the items at the
    positions `before` names, none whose id the input holds already."""
    present = {i.get("id") for i in items if isinstance(i, dict) and i.get("type") == "reasoning"}
    out: list[Any] = []
    for position, item in enumerate(items):
        for restored in before.get(position, ()):
            if restored.get("id") is None or restored["id"] not in present:
                present.add(restored.get("id"))
                out.append(restored)
        out.append(item)
    return out


def counted_payload(body: Json) -> Json:
    """The chat payload a body going to a Responses upstream is counted on
    (`proxy.history.context`, as a chat route's request is): `translate`'s,
    each reasoning item's own text (its summary and content parts, what goes
    upstream) as its turn's reasoning, counted once; an `encrypted_content`
    is opaque and counts nothing. The output of a call the request does not
    hold (the upstream has it, in a response it stored) counts as a user
    message of its text; a body that does not translate counts as one empty
    user message (the upstream judges it). (The body is one this proxy's own
    reasoning items left already: `native_request`.)"""
    items = body.get("input")
    if isinstance(items, list):
        calls: set[Any] = set()
        counted_items: list[Any] = []
        for item in items:
            if isinstance(item, dict):
                kind = item.get("type")
                if kind == "reasoning":
                    item = _counted_reasoning(item)
                elif kind in _CALLS:
                    calls.add(item.get("call_id"))
                elif kind in TOOL_OUTPUTS and item.get("call_id") not in calls:
                    item = {"type": "message", "role": "user", "content": item.get("output")}
            counted_items.append(item)
        items = counted_items
    counted: Json = {k: body[k] for k in ("model", "instructions", "tools") if k in body}
    counted["input"] = items
    try:
        return translate(counted, [], _opens_nothing).payload
    except BadRequest:
        return {"messages": [{"role": "user", "content": ""}]}


def _counted_reasoning(item: Json) -> Json:
    """A reasoning item as it is counted: every text of its summary and
    content, one summary (what `translate` reads), and no envelope."""
    texts: list[str] = []
    for key in ("summary", "content"):
        parts = item.get(key)
        if isinstance(parts, list):
            texts += [p["text"] for p in parts if isinstance(p, dict) and _text(p.get("text"))]
    summary = [{"type": "summary_text", "text": "\n\n".join(texts)}] if texts else []
    return {"type": "reasoning", "summary": summary}


def _text(value: Any) -> bool:
    return isinstance(value, str) and value != ""


def _opens_nothing(token: Any) -> None:
    return None


def _own_item(item: Any, ours: Opens) -> bool:
    """A reasoning item this proxy made (on a chat route: its envelope means
    nothing upstream). One sealed by another proxy of this kind (an upstream
    that is one) opens only there, and goes on."""
    if not isinstance(item, dict) or item.get("type") != "reasoning":
        return False
    sealed = item.get("encrypted_content")
    return isinstance(sealed, str) and sealed.startswith(ENVELOPE_PREFIX) and ours(sealed)


# -- the answer -------------------------------------------------------------------------


@dataclass(slots=True)
class _Message:
    """A message item whose text is being split."""

    item: Json
    splitter: TagSplitter
    held: list[Json]  # its added events, until its first answer text
    # the answer text of each output_text part split so far, by content_index
    visible: dict[int, list[str]]
    late: list[str]  # reasoning after the answer began
    part: int = 0  # the content_index of the text being split
    began: bool = False  # answer text went out

    def text(self, part: int) -> str:
        return "".join(self.visible.get(part, ()))


@dataclass(slots=True)
class _Split:
    """A reasoning item split off a message's start."""

    id: str
    index: int
    texts: list[str]


class NativeResponses:
    def __init__(
        self,
        tags: TagSet,
        *,
        hidden: bool = False,
        max_line_bytes: int = 4 * 1024 * 1024,
        mask: KeyMask | None = None,
        kept_upstream: bool = False,
    ) -> None:
        self.tags = tags
        self.hidden = hidden
        # the request had `store` on: the upstream keeps its reasoning items,
        # and the stored turn notes their ids (`stored_reasoning`)
        self.kept_upstream = kept_upstream
        # route keys: a text delta's tail that could begin one waits (`_unheld`)
        self._mask = mask
        self._held: Json | None = None
        self.state = OPEN
        self._decoder = SSEDecoder(max_line_bytes)
        self._seq = 0
        self._shift = 0  # items added before the upstream's next one
        self._messages: dict[str, _Message] = {}
        self._split: _Split | None = None
        # finished items by the client's output_index: as the client sees them,
        # and whole (hidden reasoning keeps its text), for the stored turn
        self._items: dict[int, Json] = {}
        self._full: dict[int, Json] = {}
        self._ours: set[str] = set()  # ids of the reasoning items the proxy split off
        # items begun and not done, by id: the client's output_index, the
        # item, the texts its deltas brought (a stream cut short stores them)
        self._open: dict[str, tuple[int, Json, dict[str, list[str]]]] = {}
        self._response: Json | None = None  # the latest response object seen
        # for the relay (proxy.api.relay.StreamReader): until the first data
        # event the client's status is still open
        self.seen_data = False
        self.first_error: Any = None  # the error of a first event that is one
        self.failure: StreamFailure | None = None  # why the proxy ended the stream
        self.failed_after_data = False  # ...after a data event went to the client
        self._wrote = False  # a data event went to the client
        self.tap = None  # the live view reads the chat path only

    @property
    def finished(self) -> bool:
        """Never before the stream's own last event: that event ends it."""
        return False

    # -- streams -----------------------------------------------------------------------

    def feed(self, data: bytes) -> bytes:
        out: list[bytes] = []
        try:
            events = self._decoder.feed(data)
        except SSELineTooLong as exc:
            return self._too_long(exc)
        for ev in events:
            self._event(ev, out)
        return b"".join(out)

    def _too_long(self, exc: SSELineTooLong) -> bytes:
        """An over-long line: the events before it go out first, then
        `response.failed` (unless those events ended the stream)."""
        out: list[bytes] = []
        for ev in cast(list[SSEEvent | SSEComment], exc.events):  # feed's: no plain items
            self._event(ev, out)
        if self.state == OPEN:
            self._failed(out, StreamFailure("upstream_line_too_long", str(exc)))
        return b"".join(out)

    def finish(self) -> bytes:
        """The upstream closed the stream."""
        out: list[bytes] = []
        try:
            events = self._decoder.flush()
        except SSELineTooLong as exc:
            return self._too_long(exc)
        for ev in events:
            self._event(ev, out)
        if self.state == OPEN:
            message = "The upstream closed the stream before the response ended."
            self._failed(out, StreamFailure("upstream_closed", message))
        return b"".join(out)

    def abort(self, failure: StreamFailure) -> bytes:
        """The proxy ends the stream (idle timeout, a broken connection);
        the Responses API's `response.failed` carries the message."""
        if self.state != OPEN:
            return b""
        out: list[bytes] = []
        self._failed(out, failure)
        return b"".join(out)

    def _event(self, ev: SSEEvent | SSEComment, out: list[bytes]) -> None:
        if type(ev) is SSEComment:
            out.append(encode_comment(ev.text))
            return
        assert type(ev) is SSEEvent
        if self.state != OPEN:
            return
        try:
            event = orjson.loads(ev.data)
        except orjson.JSONDecodeError:
            event = None
        if not self.seen_data:
            self._first(ev, event)
        if event is None:
            why = "The upstream sent an event that is not JSON."
            self._failed(out, StreamFailure("malformed_upstream_event", why))
            return
        if not isinstance(event, dict) or not isinstance(event.get("type"), str):
            self._unhold(out)
            out.append(encode_event(ev.data, ev.event))  # not ours to judge: as it came
            self._wrote = True
            return
        kind = event["type"]
        if isinstance(event.get("response"), dict):
            self._response = event["response"]
        item = event.get("item") if isinstance(event.get("item"), dict) else None
        message = self._messages.get(str(event.get("item_id") or (item or {}).get("id")))
        if kind == "response.output_item.added" and item is not None:
            if item.get("type") == "message" and isinstance(item.get("id"), str):
                splitter = TagSplitter(self.tags)
                self._messages[item["id"]] = _Message(event, splitter, [event], {}, [])
                return
            if isinstance(item.get("id"), str):
                self._open[item["id"]] = (self._index(event), item, {})
        elif message is not None:
            self._in_message(message, kind, event, out)
            return
        elif kind in _PARTIAL_FIELDS:
            self._grow(kind, event)
            if kind in _SUMMARY_EVENTS and self.hidden:
                return
        elif kind in _SUMMARY_EVENTS and self.hidden:
            return
        elif kind in _PART_EVENTS and self.hidden and _part_type(event) == _REASONING_PART:
            return  # (its `done` holds the whole text)
        elif kind == "response.output_item.done" and item is not None:
            self._open.pop(str(item.get("id")), None)
            event["item"] = self._keep(self._index(event), item)
        elif kind in _ENDS:
            self.state = _ENDS[kind]
            if isinstance(event.get("response"), dict):
                event["response"] = self._final(event["response"])
        self._emit(out, event)

    def _first(self, ev: SSEEvent, event: Any) -> None:
        """The stream's first data event: an `error` event, or a response that
        failed, is kept in `first_error` (the relay answers with its status)."""
        self.seen_data = True
        kind = event.get("type") if isinstance(event, dict) else None
        if ev.event == "error" or kind == "error":
            if not isinstance(event, dict):
                self.first_error = ev.data.decode(errors="replace")
            elif isinstance(event.get("error"), dict):
                self.first_error = event["error"]
            else:  # the Responses API's own: code, message and param beside its type
                drop = ("type", "sequence_number")
                self.first_error = {k: v for k, v in event.items() if k not in drop}
        elif kind == "response.failed":
            response = event.get("response")
            error = response.get("error") if isinstance(response, dict) else None
            self.first_error = error or "The upstream's response failed."

    def _in_message(self, m: _Message, kind: str, event: Json, out: list[bytes]) -> None:
        if kind == "response.content_part.added" and m.held:
            m.held.append(event)
        elif kind == "response.output_text.delta":
            self._text(m, str(event.get("delta") or ""), event, out)
        elif kind == "response.output_text.done":
            self._text(m, None, event, out)
            self._release(m, out)
            event["text"] = m.text(_content_index(event))
            self._emit(out, event)
        elif kind == "response.content_part.done":
            part = event.get("part")
            at = _content_index(event)
            if isinstance(part, dict) and part.get("type") == "output_text" and at in m.visible:
                m.part = at
                self._text(m, None, event, out)  # (no output_text.done came: the part ends)
                event["part"] = {**part, "text": m.text(at)}
            self._release(m, out)
            self._emit(out, event)
        elif kind == "response.output_item.done":
            self._text(m, None, event, out)
            self._release(m, out)
            texts = {at: m.text(at) for at in m.visible}
            item = _with_texts(event["item"], texts)
            event["item"] = self._keep(self._index(event), item)
            self._emit(out, event)
            del self._messages[str(item.get("id"))]
            if m.late:
                self._late(event, "\n\n".join(m.late), out)
        else:
            # a part without answer text (a refusal's deltas and end): the
            # message's added events go first, as the upstream sent them
            self._release(m, out)
            self._emit(out, event)

    def _text(self, m: _Message, text: str | None, event: Json, out: list[bytes]) -> None:
        """Split a delta's text (None: the end of the message's text), each
        output_text part's answer text kept apart."""
        if str(event.get("type")).startswith("response.output_text."):
            m.part = _content_index(event)
            m.visible.setdefault(m.part, [])
        pieces = m.splitter.feed(text) if text is not None else m.splitter.flush()
        for piece in pieces:
            if type(piece) is Reasoning and piece.text:
                if m.began or not m.held:  # the message went out: no room before it
                    m.late.append(piece.text)
                else:
                    self._reasoning(piece.text, event, out)
            elif type(piece) is Visible and piece.text:
                self._close_split(out)
                self._release(m, out)
                m.began = True
                m.visible.setdefault(m.part, []).append(piece.text)
                self._emit(out, {**_text_delta(m, event), "delta": piece.text})

    def _reasoning(self, text: str, event: Json, out: list[bytes]) -> None:
        split = self._split
        if split is None:
            index = int(event.get("output_index") or 0) + self._shift
            self._shift += 1
            split = self._split = _Split(f"rs_{event.get('item_id')}", index, [])
            self._ours.add(split.id)
            at = {"output_index": index}
            self._added(out, at, {"id": split.id, "type": "reasoning", "summary": []})
            if not self.hidden:
                part = {"type": "summary_text", "text": ""}
                self._summary(out, split, "response.reasoning_summary_part.added", part=part)
        split.texts.append(text)
        if not self.hidden:
            self._summary(out, split, "response.reasoning_summary_text.delta", delta=text)

    def _close_split(self, out: list[bytes]) -> None:
        split, self._split = self._split, None
        if split is None:
            return
        text = "".join(split.texts).strip()
        if not self.hidden:
            part = {"type": "summary_text", "text": text}
            self._summary(out, split, "response.reasoning_summary_text.done", text=text)
            self._summary(out, split, "response.reasoning_summary_part.done", part=part)
        item = self._keep(split.index, _reasoning_item(split.id, text))
        self._emit_raw(out, "response.output_item.done", output_index=split.index, item=item)

    def _release(self, m: _Message, out: list[bytes]) -> None:
        """The message's held `added` events go out (after any split reasoning)."""
        self._close_split(out)
        held, m.held = m.held, []
        for event in held:
            self._emit(out, event)

    def _late(self, event: Json, text: str, out: list[bytes]) -> None:
        index = int(event.get("output_index") or 0) + self._shift + 1
        self._shift += 1
        item_id = f"rs_{event['item'].get('id')}_after"
        self._ours.add(item_id)
        self._added(
            out, {"output_index": index}, {"id": item_id, "type": "reasoning", "summary": []}
        )
        item = self._keep(index, _reasoning_item(item_id, text))
        self._emit_raw(out, "response.output_item.done", output_index=index, item=item)

    def _failed(self, out: list[bytes], failure: StreamFailure) -> None:
        """The proxy ends the stream: `response.failed`, its own code in the
        message (as on the chat-upstream path)."""
        self.state = FAILED
        self.failure = failure
        self.failed_after_data = self._wrote
        base = self._response or {"id": "resp_unknown", "object": "response", "output": []}
        response = self._final({**base, "status": "failed"})
        left_open = self._unfinished(shown=True)
        if left_open:
            placed: list[tuple[float, Json]] = [*self._items.items(), *left_open]
            response["output"] = [item for _, item in sorted(placed, key=lambda p: p[0])]
        response["error"] = error_of(failure.code, failure.message)
        self._emit_raw(out, "response.failed", response=response)

    # -- writing events ------------------------------------------------------------------

    def _keep(self, index: int, item: Json) -> Json:
        """Record a finished item; returns it as the client sees it."""
        self._full[index] = item
        shown = self._items[index] = self._shown(item)
        return shown

    def _index(self, event: Json) -> int:
        return int(event.get("output_index") or 0) + self._shift

    def _added(self, out: list[bytes], at: Json, item: Json) -> None:
        self._emit_raw(out, "response.output_item.added", **at, item=item)

    def _summary(self, out: list[bytes], split: _Split, kind: str, **fields: Any) -> None:
        at = {"item_id": split.id, "output_index": split.index, "summary_index": 0}
        self._emit_raw(out, kind, **at, **fields)

    def _emit(self, out: list[bytes], event: Json) -> None:
        """An upstream event, its output_index shifted past the proxy's items."""
        if isinstance(event.get("output_index"), int):
            event = {**event, "output_index": event["output_index"] + self._shift}
        self._write(out, event)

    def _emit_raw(self, out: list[bytes], kind: str, **fields: Any) -> None:
        self._write(out, {"type": kind, **fields})

    def _write(self, out: list[bytes], event: Json) -> None:
        if self._mask is not None:
            unheld = self._unheld(out, event)
            if unheld is None:
                return
            event = unheld
        self._put(out, event)

    def _unheld(self, out: list[bytes], event: Json) -> Json | None:
        """A route key split across two text deltas would be whole in what
        the client joins (each event is JSON of its own): a delta's tail
        that could begin a key waits, and goes in front of the next delta of
        the same text; any other event first sends it as a delta of its own.
        The event to write now (None: nothing of it can go yet)."""
        assert self._mask is not None
        held, text = self._held, event.get("delta")
        if event.get("type") not in _TEXT_DELTAS or not isinstance(text, str):
            self._unhold(out)
            return event
        if held is not None:
            self._held = None
            if all(held.get(k) == event.get(k) for k in _TEXT_AT):
                text = held["delta"] + text
            else:
                self._put(out, held)
        now, tail = self._mask.split_tail(text)
        if tail:
            self._held = {**event, "delta": tail}
        return {**event, "delta": now} if now else None

    def _unhold(self, out: list[bytes]) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            self._put(out, held)

    def _put(self, out: list[bytes], event: Json) -> None:
        event["sequence_number"] = self._seq
        self._seq += 1
        self._wrote = True
        kind = str(event["type"]).encode()
        out += (b"event: ", kind, b"\ndata: ", orjson.dumps(event), b"\n\n")

    # -- the Response --------------------------------------------------------------------

    def _final(self, response: Json) -> Json:
        """The Response as the client sees it: its output as the events built it."""
        if self._items:
            output = [self._items[i] for i in sorted(self._items)]
        else:
            output = [self._shown(i) for i in response.get("output") or [] if isinstance(i, dict)]
        self._response = {**response, "output": output}
        return self._response

    def whole(self, response: Json) -> Json:
        """A whole Response, normalized."""
        index = 0
        for item in response.get("output") or []:
            if not isinstance(item, dict):
                continue
            if item.get("type") == "message":
                reasonings, visible = self._split_message(item)
                for n, text in enumerate(reasonings):
                    item_id = f"rs_{item.get('id')}_{n}"
                    self._ours.add(item_id)
                    self._keep(index, _reasoning_item(item_id, text))
                    index += 1
                item = _with_texts(item, visible)
            self._keep(index, item)
            index += 1
        self.state = DONE if response.get("status") != "failed" else FAILED
        return self._final(response)

    def _split_message(self, item: Json) -> tuple[list[str], dict[int, str]]:
        """A message's reasoning blocks, and the answer text of each of its
        output_text parts (by content index), each part split as a stream's
        part is: one splitter, flushed at the part's end."""
        splitter = TagSplitter(self.tags)
        blocks: list[str] = []
        visible: dict[int, str] = {}
        current: list[str] = []
        for at, text in _output_texts(item):
            shown: list[str] = []
            for piece in [*splitter.feed(text), *splitter.flush()]:
                if type(piece) is Reasoning:
                    current.append(piece.text)
                elif type(piece) is Visible:
                    shown.append(piece.text)
                elif current:
                    blocks.append("".join(current).strip())
                    current = []
            visible[at] = "".join(shown)
        if current:
            blocks.append("".join(current).strip())
        return [b for b in blocks if b], visible

    def _shown(self, item: Json) -> Json:
        """An upstream item as the client gets it (hidden reasoning: no text)."""
        if self.hidden and item.get("type") == "reasoning":
            return {**{k: v for k, v in item.items() if k != "content"}, "summary": []}
        return item

    def _grow(self, kind: str, event: Json) -> None:
        """A delta of an item begun: its text, for the turn of a stream cut short."""
        begun = self._open.get(str(event.get("item_id")))
        delta = event.get("delta")
        if begun is not None and isinstance(delta, str):
            begun[2].setdefault(_PARTIAL_FIELDS[kind], []).append(delta)

    def _unfinished(self, *, shown: bool = False) -> list[tuple[float, Json]]:
        """The items a stream cut short had begun, as far as they came, by
        where they stand: split reasoning, messages (answer text as the
        client got it, and reasoning after it), and the upstream's items.
        `shown`: those the client saw begun, as it saw them and `incomplete`
        (what `response.failed` lists: a message whose `added` events were
        still held, and reasoning after a message's answer, were not sent)."""
        items: list[tuple[float, Json]] = []
        if self._split is not None:
            text = "".join(self._split.texts).strip()
            items.append((self._split.index, _reasoning_item(self._split.id, text)))
        for m in self._messages.values():
            if shown and m.held:
                continue
            added = m.item.get("item")
            at = self._index(m.item)
            parts = [
                {"type": "output_text", "text": m.text(n), **({"annotations": []} if shown else {})}
                for n in sorted(m.visible)
            ]
            items.append((at, {**(added if isinstance(added, dict) else {}), "content": parts}))
            late = "".join(m.late).strip()
            if late and not shown:
                late_id = f"rs_{m.item.get('item', {}).get('id')}_after"
                self._ours.add(late_id)
                items.append((at + 0.5, _reasoning_item(late_id, late)))
        for at, item, texts in self._open.values():
            grown = dict(item)
            for field, pieces in texts.items():
                text = "".join(pieces)
                if field == "summary":
                    grown["summary"] = [{"type": "summary_text", "text": text}]
                elif field == "content":
                    grown["content"] = [{"type": "reasoning_text", "text": text}]
                else:
                    grown[field] = text
            items.append((at, grown))
        if shown:
            return [(at, {**self._shown(item), "status": "incomplete"}) for at, item in items]
        return items

    def turn(self) -> Turn:
        """The response as a stored turn (cut short: with what had begun)."""
        response = self._response or {}
        placed: list[tuple[float, Json]] = [(i, self._full[i]) for i in self._full]
        if self.state != DONE:
            placed += [(at, item) for at, item in self._unfinished() if at not in self._full]
        output = [item for _, item in sorted(placed, key=lambda p: p[0])]
        return turn_of(response, output, self.state, self._ours, self.kept_upstream)


def _text_delta(m: _Message, event: Json) -> Json:
    """The `output_text.delta` that carries answer text split from `event`:
    the event itself, or (text held back as a possible tag start, let go
    when the part or the message ends) a delta of the part being split."""
    if event.get("type") == "response.output_text.delta":
        return event
    item = m.item.get("item")
    return {
        "type": "response.output_text.delta",
        "item_id": item.get("id") if isinstance(item, dict) else event.get("item_id"),
        "output_index": event.get("output_index"),
        "content_index": m.part,
        "logprobs": [],
    }


def _part_type(event: Json) -> Any:
    """The type of the content part a `content_part` event carries."""
    part = event.get("part")
    return part.get("type") if isinstance(part, dict) else None


def _content_index(event: Json) -> int:
    at = event.get("content_index")
    return at if isinstance(at, int) and not isinstance(at, bool) else 0


def _output_texts(item: Json) -> list[tuple[int, str]]:
    """A message's output_text parts: (content index, text)."""
    content = item.get("content")
    if not isinstance(content, list):
        return []
    return [
        (at, str(p.get("text") or ""))
        for at, p in enumerate(content)
        if isinstance(p, dict) and p.get("type") == "output_text"
    ]


def _message_text(item: Json) -> str:
    return "".join(text for _, text in _output_texts(item))


def _with_texts(item: Json, texts: dict[int, str]) -> Json:
    """A message item whose output_text parts hold `texts` (by content
    index; a part not in it keeps its own)."""
    content = item.get("content")
    if not isinstance(content, list):
        return item
    parts: list[Any] = []
    for at, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "output_text" and at in texts:
            part = {**part, "text": texts[at]}
        parts.append(part)
    return {**item, "content": parts}


def _reasoning_item(item_id: str, text: str) -> Json:
    summary = [{"type": "summary_text", "text": text}] if text else []
    return {"id": item_id, "type": "reasoning", "summary": summary}


def _reasoning_text(item: Json) -> str:
    texts = [
        str(p.get("text") or "")
        for key in ("summary", "content")
        for p in item.get(key) or []
        if isinstance(p, dict)
    ]
    return "\n\n".join(t for t in texts if t)


_FINISH = {"completed": "stop", "incomplete": "length", "failed": None}


def _kept_upstream(item: Json, kept: bool) -> tuple[Json, ...] | None:
    """A reasoning item the upstream stored (`kept`), by its id."""
    item_id = item.get("id")
    if not kept or not isinstance(item_id, str) or not item_id:
        return None
    return ({"type": KEPT_UPSTREAM, "id": item_id, "format": RESPONSES_FORMAT},)


def turn_of(
    response: Json, output: list[Any], state: str, ours: set[str], kept: bool = False
) -> Turn:
    """A Response's output items as a Turn (`ours`: the ids of the reasoning
    items split off tagged text; `kept`: the upstream stored the response, so
    a reasoning item without `encrypted_content` is still known there by id)."""
    parts: list[Part] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "reasoning":
            encrypted = item.get("encrypted_content")
            opaque = (
                (
                    {
                        "type": "reasoning.encrypted",
                        "id": item.get("id"),
                        "data": encrypted,
                        "format": RESPONSES_FORMAT,
                    },
                )
                if isinstance(encrypted, str) and encrypted
                else _kept_upstream(item, kept and item.get("id") not in ours)
            )
            text = _reasoning_text(item)
            if text or opaque:
                source: SourceField = "think_tag" if item.get("id") in ours else "reasoning"
                parts.append(ThinkingBlock(text, source, encrypted=opaque))
        elif kind == "message":
            text = _message_text(item)
            if text:
                parts.append(TextPart(text))
        elif kind == "function_call":
            parts.append(
                ToolCall(item.get("call_id"), str(item.get("name")), str(item.get("arguments")))
            )
        elif kind == "custom_tool_call":
            parts.append(
                ToolCall(
                    item.get("call_id"), str(item.get("name")), str(item.get("input")), "custom"
                )
            )
    usage = response.get("usage")
    chat_usage = None
    if isinstance(usage, dict):
        details = usage.get("output_tokens_details")
        reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
        # as chat names them; what the upstream did not report is left out
        counts = {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "total_tokens": usage.get("total_tokens"),
        }
        chat_usage = {k: v for k, v in counts.items() if v is not None}
        if reasoning is not None:
            chat_usage["completion_tokens_details"] = {"reasoning_tokens": reasoning}
    finish = _FINISH.get(str(response.get("status")))
    if finish == "stop" and any(isinstance(p, ToolCall) for p in parts):
        finish = "tool_calls"
    return Turn(
        parts=tuple(parts),
        finish_reason=finish,
        usage=chat_usage,
        complete=state == DONE,
        model=response.get("model") if isinstance(response.get("model"), str) else None,
        response_id=response.get("id") if isinstance(response.get("id"), str) else None,
        error=None if state == DONE else "upstream_failed",
    )
