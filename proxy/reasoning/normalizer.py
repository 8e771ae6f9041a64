"""Normalize an upstream chat completion into separate channels (sans-IO).

`StreamNormalizer.feed(bytes) -> bytes` takes what one upstream read returned
and gives back the bytes to write to the client for it: every event completed
by that read, normalized, in one buffer (one write per read, no added
latency). `finish()` is called at upstream EOF, `abort()` when the proxy stops
the stream (idle timeout, client gone). `turn()` gives the accumulated Turn of
the first choice at any time.

Per choice, reasoning is separated from the answer: native fields are
authoritative from their first delta on; otherwise delimited bodies in
`content` become reasoning. The client gets the answer in `content` and the
reasoning in the shape `output` names (by default `reasoning_content`, with
`reasoning`/`thinking` folded into it; see output.py for the others), or no
reasoning at all when `include_in_response` is false. An event nothing was
changed in is forwarded as the upstream's own bytes (no re-encoding). The
quick path and the learned chunk shapes serve the default shape only.

Until the first data event, `seen_data` is False and comments alone do not
change that; when that first event is an error object (`{"error": ...}`, or
an `event: error`), it is kept in `first_error`, so the caller can still
answer with a real HTTP status instead of a 200 and an error event.

Stream states: OPEN until `[DONE]` (DONE) or a failure (FAILED): a malformed
event, an over-long line, a close while a choice has no `finish_reason`, an
abort. After DONE or FAILED, input is ignored. A failure sends one error
event and no `[DONE]`; the turn is then incomplete.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from proxy.reasoning.blocks import Json, Turn, index_key
from proxy.reasoning.builder import TurnBuilder, utf8_size
from proxy.reasoning.channels import (
    UNCHANGED,
    ChoiceSeparator,
    NormalizeOptions,
    V,
    in_order,
    visible_tokens,
)
from proxy.reasoning.shapes import Shape, learn
from proxy.reasoning.sse import (
    DONE_EVENT,
    SSEComment,
    SSEDecoder,
    SSEEvent,
    SSELineTooLong,
    encode_comment,
    encode_event,
)
from proxy.reasoning.tap import Tap

OPEN, DONE, FAILED = "open", "done", "failed"
_NO_MATCH = object()  # _shaped: not a chunk of a known shape
_NOT_QUICK = object()  # _shaped: a known shape, but the quick path cannot take it
_CHUNK_OBJECT = "chat.completion.chunk"
_LEARN_CALLS = 16  # parsed chunks per stream that may teach a shape
_MAX_SHAPES = 4

__all__ = [
    "DONE",
    "FAILED",
    "OPEN",
    "NormalizeOptions",
    "StreamFailure",
    "StreamNormalizer",
    "error_body",
    "error_event",
    "normalize_completion",
]


@dataclass(frozen=True, slots=True)
class StreamFailure:
    """Why a stream failed; rendered as an OpenAI-shaped error event."""

    code: str
    message: str
    type: str = "upstream_error"


def chunk_usage(chunk: Json) -> Json | None:
    """A stream chunk's usage: `usage`, or inside `x_groq` (where Groq streams it)."""
    usage = chunk.get("usage")
    if not usage:
        groq = chunk.get("x_groq")
        usage = groq.get("usage") if type(groq) is dict else None
    return usage if usage and type(usage) is dict else None


# The finish_reasons of an answer that failed: OpenRouter's "error", and
# vLLM's "abort" (the request aborted on the server: the answer is cut)
FAILED_FINISHES = ("error", "abort")


def may_fail(data: bytes) -> bool:
    """An event's data may carry an error (`answer_error`): a quick look
    before it is parsed for one."""
    return b"error" in data or b"abort" in data


def finished_with(reason: str) -> Json:
    """What a choice that ended with a FAILED_FINISHES reason failed with,
    when neither the chunk nor the choice says."""
    return {
        "message": f'The upstream ended the answer with finish_reason "{reason}".',
        "type": "upstream_error",
        "code": "upstream_error",
    }


def answer_error(obj: Json) -> Any:
    """The error a chunk or a whole completion carries instead of an answer,
    else None: its `error` when it has no choices (OpenAI's and vLLM's error
    events), or when a choice ends with `finish_reason: "error"` (how
    OpenRouter fails mid-stream, with the error at the top, and in a whole
    answer, with the error in the choice) or `"abort"` (vLLM's answer cut by
    an abort on the server). An `error` beside choices that go on is data."""
    error = obj.get("error")
    choices = obj.get("choices")
    if not choices:
        return error
    if type(choices) is not list:
        return None
    for choice in choices:
        reason = choice.get("finish_reason") if type(choice) is dict else None
        if reason in FAILED_FINISHES:
            if error is None:
                error = choice.get("error")
            return error if error is not None else finished_with(reason)
    return None


def error_body(failure: StreamFailure) -> bytes:
    """The failure as an OpenAI error object (JSON)."""
    body = {
        "error": {
            "message": failure.message,
            "type": failure.type,
            "param": None,
            "code": failure.code,
        }
    }
    return orjson.dumps(body)


def error_event(failure: StreamFailure) -> bytes:
    return b"data: " + error_body(failure) + b"\n\n"


def _encode_unchanged(events: list[bytes | SSEEvent | SSEComment]) -> list[bytes]:
    """The events before the first changed one, as the upstream sent them
    (all plain data events: anything else ends the unchanged run)."""
    out: list[bytes] = []
    for ev in events:
        assert type(ev) is bytes
        out += (b"data: ", ev, b"\n\n")
    return out


class StreamNormalizer:
    __slots__ = (
        "_choices",
        "_decoder",
        "_envelope",
        "_failure",
        "_fast",
        "_hides_tags",
        "_include",
        "_learning",
        "_options",
        "_shapes",
        "_upstream_error",
        "_usage",
        "failed_after_data",
        "first_error",
        "seen_data",
        "state",
        "tap",
    )

    def __init__(self, options: NormalizeOptions | None = None) -> None:
        self._options = options or NormalizeOptions()
        self._include = self._options.include
        # the quick path and the learned shapes write the default shape only
        self._fast = self._options.default_shape
        # answer text that turns out reasoning takes its logprobs tokens along
        # (not where the client asked for the reasoning in `content`)
        self._hides_tags = self._options.output != "think_tags"
        self._decoder = SSEDecoder(self._options.max_line_bytes)
        self._choices: dict[Any, ChoiceSeparator] = {}
        self._envelope: Json = {}
        self._usage: Json | None = None
        self._upstream_error: Any = None
        self._failure: StreamFailure | None = None
        self._shapes: list[Shape] = []
        self._learning = _LEARN_CALLS if self._options.shapes and self._fast else 0
        self.state = OPEN
        self.seen_data = False  # a data event (not only comments) arrived
        self.first_error: Any = None  # the error object of a first event that is one
        # the proxy failed the stream at an event that came after a data event
        # (in the same read as the first one, too): the stream has begun
        self.failed_after_data = False
        # told what the first choice sends the client (`watch()`); None costs nothing
        self.tap: Tap | None = None

    def watch(self) -> Tap:
        """From now on, record what the client is sent, for the live feed."""
        self.tap = Tap(self._include)
        return self.tap

    @property
    def failure(self) -> StreamFailure | None:
        return self._failure

    @property
    def finished(self) -> bool:
        """[DONE], or a finish_reason on every choice begun (`n` > 1: one
        choice's end is not the others'): the answer is complete."""
        choices = self._choices.values()
        return self.state == DONE or (bool(choices) and all(c.finished for c in choices))

    def feed(self, data: bytes) -> bytes:
        if self.state != OPEN:
            return b""
        try:
            events = self._decoder.split(data)
        except SSELineTooLong as exc:
            return self._too_long(exc)
        return self._events(events, self._decoder.verbatim) if events else b""

    def finish(self) -> bytes:
        """The upstream closed the connection."""
        if self.state != OPEN:
            return b""
        try:
            events: list[bytes | SSEEvent | SSEComment] = list(self._decoder.flush())
        except SSELineTooLong as exc:
            return self._too_long(exc)
        if self.finished:
            # the answer is whole: an event the connection cut in half after
            # it (such as the usage chunk) is no failure, only lost
            events = [e for e in events if not _cut_short(e)]
        out = self._events(events, None)
        if self.state != OPEN:
            return out
        if self.finished:  # after a finish_reason, a close without [DONE] is a normal end
            return out + self._flush_choices() + self._done()
        if self._upstream_error is not None:  # its error event said why it ends: no second one
            self.state = FAILED
            return out
        return out + self._fail(
            StreamFailure("upstream_closed", "The upstream closed the stream before it finished.")
        )

    def _too_long(self, exc: SSELineTooLong) -> bytes:
        """An over-long line: the events before it in the same read go out
        first (they may end the stream themselves), then the failure."""
        out = self._events(exc.events, None) if exc.events else b""
        if self.state != OPEN:
            return out
        self.failed_after_data = self.seen_data
        return out + self._fail(StreamFailure("upstream_line_too_long", str(exc)))

    def abort(self, failure: StreamFailure) -> bytes:
        """The proxy stops the stream (idle timeout, upstream read error)."""
        if self.state != OPEN:
            return b""
        return self._fail(failure)

    def turn(self, index: int = 0) -> Turn:
        choice = self._choices.get(index) or next(iter(self._choices.values()), None)
        builder = choice.builder if choice else TurnBuilder()
        finish = self._envelope.get("finish_reason")
        complete = self.state == DONE and self._upstream_error is None
        error = None
        if self._failure is not None:
            error = self._failure.code
        elif self._upstream_error is not None:
            error = "upstream_error_event"
        elif self.state == OPEN:
            error = "interrupted"
        delimiters = sum(c.splitter.delimiters for c in self._choices.values())
        return builder.build(
            extra={"delimiters": delimiters} if delimiters else {},
            finish_reason=finish,
            usage=self._usage,
            complete=complete,
            model=self._envelope.get("model"),
            response_id=self._envelope.get("id"),
            error=error,
        )

    # -- internals ---------------------------------------------------------

    def _events(self, events: list[bytes | SSEEvent | SSEComment], verbatim: bytes | None) -> bytes:
        """Normalize the events of one read. `verbatim` is the read's own bytes
        for those events, when they can go out as they came: then, if nothing
        changed, no output is built at all (the common case)."""
        had_data = self.seen_data
        if not had_data:
            self._first_event(events)
        out: list[bytes] | None = None  # built from the first changed event on
        loads = orjson.loads
        count = len(events)
        # (a shape learned from this read's first chunks serves the rest of it)
        runs_from = 0 if self._options.shapes and self._include and self.tap is None else count
        n = -1
        while n + 1 < count:
            n += 1
            ev = events[n]
            if type(ev) is bytes and ev[:1] == b"{":  # a plain JSON data event
                if n >= runs_from and n + 1 < count and self._shapes:
                    run, result = self._run(events, n)
                    if result is None:  # taken, nothing changed
                        if out is not None:
                            out += _encode_unchanged(events[n : n + run])
                        n += run - 1
                        continue
                    if isinstance(result, bytes):  # taken, rewritten
                        if out is None:
                            out = _encode_unchanged(events[:n])
                        out.append(result)
                        n += run - 1
                        continue
                    runs_from = n + max(run, 1)  # a run not taken goes chunk by chunk
                changed = self._shaped(ev) if self._shapes else _NO_MATCH
                if changed is _NO_MATCH or changed is _NOT_QUICK:
                    try:
                        obj = loads(ev)
                    except orjson.JSONDecodeError:
                        obj = None
                    if type(obj) is dict:
                        if self._learning and changed is _NO_MATCH:
                            self._learn(ev, obj)
                        changed = self._chunk(obj)
                if changed is not _NO_MATCH and changed is not _NOT_QUICK:
                    if changed is None:
                        if out is not None:
                            out += (b"data: ", ev, b"\n\n")
                        continue
                    if out is None:
                        out = _encode_unchanged(events[:n])
                    out.append(changed)  # type: ignore[arg-type]
                    continue
            if ev == b"[DONE]" and out is None and n == count - 1:
                # the usual end: if no choice held text back, the read goes as it came
                flushed = self._flush_choices()
                ended = self._done()
                if ended is not DONE_EVENT:  # nothing came before it
                    return b"".join([*_encode_unchanged(events[:n]), ended])
                if not flushed and verbatim is not None:
                    return verbatim
                return b"".join([*_encode_unchanged(events[:n]), flushed, DONE_EVENT])
            if out is None:
                out = _encode_unchanged(events[:n])
            if not self._other(ev, out):
                if self._failure is not None:
                    self.failed_after_data = had_data or any(
                        type(e) is not SSEComment for e in events[:n]
                    )
                return b"".join(out)  # the stream ended (or failed) at this event
        if out is None:
            return verbatim if verbatim is not None else b"".join(_encode_unchanged(events))
        return b"".join(out)

    def _first_event(self, events: list[bytes | SSEEvent | SSEComment]) -> None:
        """Note whether the stream's first data event is an error object."""
        for ev in events:
            if type(ev) is SSEComment:
                continue
            self.seen_data = True
            if type(ev) is bytes:
                data, name = ev, None
            else:
                assert type(ev) is SSEEvent
                data, name = ev.data, ev.event
            if name != "error" and not may_fail(data):
                return  # the common first chunk: not parsed twice
            try:
                obj = orjson.loads(data)
            except orjson.JSONDecodeError:
                obj = None
            if name == "error":
                text = data.decode(errors="replace")
                error = obj.get("error", obj) if type(obj) is dict else text
                self.first_error = error if error is not None else text
            elif type(obj) is dict:
                self.first_error = answer_error(obj)
            return

    def _run(
        self, events: list[bytes | SSEEvent | SSEComment], start: int
    ) -> tuple[int, bytes | bool | None]:
        """Chunks of one learned shape in a row, from `start` on, handled
        together as the quick path would handle each. Returns the run's length
        and None (taken, nothing changed), the bytes to send for them (taken,
        rewritten) or False (not taken: each goes on its own).

        Unchanged runs, native reasoning or answer text outside any block,
        are one delta of their joined text (what the builder keeps is the
        same). Answer text inside a tagged block moves to reasoning chunk by
        chunk (the splitter holds trailing whitespace back per chunk)."""
        first = events[start]
        for shape in self._shapes:
            if not first.startswith(shape.prefix):  # type: ignore[union-attr]
                continue
            state = self._choices[shape.index]  # made by the chunk the shape came from
            if shape.field == "reasoning_content":  # (that chunk made the choice native)
                run, text = shape.run(events, start)
                if not (run > 1 and text and state.native):
                    return run, False
                if state.builder.room() < utf8_size(text):
                    return run, False
                state.builder.reasoning(text, "reasoning_content")
                return run, None
            if state.plain:
                run, text = shape.run(events, start)
                if run < 2 or not text or state.mark in text:
                    return run, False
                state.builder.text(text)
                state.splitter.tail_ws = text[-1].isspace()
                return run, None
            if not state.native and state.splitter.inside_plain and shape.head is not None:
                return self._tagged_run(shape, state, events, start)
        return 0, False

    def _tagged_run(
        self,
        shape: Shape,
        state: ChoiceSeparator,
        events: list[bytes | SSEEvent | SSEComment],
        start: int,
    ) -> tuple[int, bytes | bool]:
        """Answer chunks inside a tagged block: each one's text becomes its
        reasoning, as `ChoiceSeparator.quick` does, written into the learned
        bytes (the upstream's own string body when the text is unchanged)."""
        pieces = shape.pieces(events, start, state.mark)
        if len(pieces) < 2:
            return len(pieces), False
        before, after, emptied = shape.moved()
        reasoning_text = state.splitter.reasoning_text
        builder = state.builder
        out: list[bytes] = []
        for ev, body, text in pieces:
            if not text:  # an empty delta: unchanged
                out += (b"data: ", ev, b"\n\n")
                continue
            moved = reasoning_text(text)
            if not moved:
                out.append(emptied)
                continue
            builder.reasoning(moved, "think_tag")
            out += (before, body if moved == text else orjson.dumps(moved)[1:-1], after)
        return len(pieces), b"".join(out)

    def _shaped(self, ev: bytes) -> object:
        """A chunk of a learned shape, handled like `_chunk`'s quick path
        without parsing it: None (unchanged) or the bytes to send; _NO_MATCH
        when it is no such chunk, _NOT_QUICK when the quick path cannot take
        it (then it is parsed, but has no shape to teach)."""
        for shape in self._shapes:
            text = shape.text(ev)
            if text is None:
                continue
            delta = shape.with_text(text)
            handled = self._choices[shape.index].quick(delta, self._include)
            if not handled:
                return _NOT_QUICK
            if self.tap is not None:
                self.tap.delta(shape.index, delta)
            if handled == UNCHANGED:
                return None
            if shape.head is not None:
                return b"data: " + shape.head + orjson.dumps(delta) + shape.tail + b"\n\n"
            obj = orjson.loads(ev)
            obj["choices"][0]["delta"] = delta
            return b"data: " + orjson.dumps(obj) + b"\n\n"
        return _NO_MATCH

    def _learn(self, ev: bytes, obj: Json) -> None:
        """Let a parsed chunk teach its shape (before `_chunk` changes it)."""
        self._learning -= 1
        shape = learn(ev, obj)
        if shape is None or any(
            s.prefix == shape.prefix and s.suffix == shape.suffix for s in self._shapes
        ):
            return
        self._shapes.append(shape)
        if len(self._shapes) >= _MAX_SHAPES:
            self._learning = 0

    def _other(self, ev: bytes | SSEEvent | SSEComment, out: list[bytes]) -> bool:
        """Every event but a plain JSON chunk; False when the stream ends here."""
        if type(ev) is SSEComment:
            out.append(encode_comment(ev.text))
            return True
        last_id = b""  # the upstream's `id:`, kept on the event it came with
        if type(ev) is bytes:
            data, name = ev, None
        else:
            assert type(ev) is SSEEvent
            data, name = ev.data, ev.event
            if ev.id is not None:
                last_id = b"id: " + ev.id.encode() + b"\n"
        if name is not None and name != "message":
            if name == "error":
                self._upstream_error = data
            out.append(last_id + encode_event(data, name))
            return True
        if data.strip() == b"[DONE]":
            out.append(self._flush_choices())
            out.append(self._done())
            return False
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            out.append(
                self._fail(
                    StreamFailure(
                        "malformed_upstream_event", "The upstream sent an event that is not JSON."
                    )
                )
            )
            return False
        changed = self._chunk(obj) if type(obj) is dict else None
        out.append(last_id + (changed if changed is not None else encode_event(data)))
        return True

    def _chunk(self, obj: Json) -> bytes | None:
        """Normalize one chunk; None when it goes out as the upstream sent it."""
        choices = obj.get("choices")
        if self._fast and type(choices) is list and len(choices) == 1 and "usage" not in obj:
            # the common chunk: one choice, a delta, no finish_reason (the
            # envelope, usage and errors need no look on such a chunk)
            choice = choices[0]
            if type(choice) is dict and choice.get("finish_reason") is None:
                delta = choice.get("delta")
                index = index_key(choice.get("index", 0))
                state = self._choices.get(index)
                if state is not None and type(delta) is dict and "error" not in obj:
                    handled = state.quick(delta, self._include)
                    if handled:
                        if self.tap is not None:
                            self.tap.delta(index, delta)
                        if handled == UNCHANGED:
                            return None
                        hide_tokens(choice)  # its text went to the reasoning
                        return b"data: " + orjson.dumps(obj) + b"\n\n"
        if not self._envelope:
            self._envelope = {k: obj[k] for k in ("id", "object", "created", "model") if k in obj}
        usage = chunk_usage(obj)
        if usage is not None:
            self._usage = usage
        if "error" in obj:
            self._upstream_error = obj["error"]
        if type(choices) is not list:
            if choices is None and "error" not in obj and obj.get("object") == _CHUNK_OBJECT:
                # a chunk with no choices (usage only, a filter note) that says
                # `null` or nothing: clients iterate `choices`, so it is a list
                obj["choices"] = []
                return b"data: " + orjson.dumps(obj) + b"\n\n"
            return None
        if not choices:
            return None
        changed = False
        split: bytes | None = None
        for choice in choices:
            if type(choice) is not dict:
                continue
            index = index_key(choice.get("index", 0))
            state = self._choices.get(index)
            if state is None:
                state = self._choices[index] = ChoiceSeparator(self._options)
            finish = choice.get("finish_reason")
            if finish is not None:
                self._envelope["finish_reason"] = finish
                if finish in FAILED_FINISHES and self._upstream_error is None:
                    self._upstream_error = answer_error(obj)
            delta = choice.get("delta")
            if type(delta) is not dict:
                # a choice without a delta (Azure's content filter notes send
                # `delta: null`) gets an empty one: clients read `delta.content`
                delta = choice["delta"] = {}
                changed = True
                if finish is None or state.finished:
                    continue
                segments, source = state.separate(delta, True)
            else:
                content = delta.get("content")
                segments, source = state.separate(delta, finish is not None)
                if content and self._hides_tags and not any(k == V for k, _ in segments):
                    changed = hide_tokens(choice) or changed
            final = finish is not None
            if self._include and len(choices) == 1 and not in_order(segments):
                split = self._split(obj, choice, delta, segments, source, state, final)
                continue
            if state.rewrote:  # a tool call put in OpenAI's shape (proxy/reasoning/calls.py)
                state.rewrote = False
                changed = True
            if state.write(delta, segments, source, final):
                changed = True
            if self.tap is not None:
                self.tap.segments(index, segments)
                self.tap.refusal(index, delta)
        if split is not None:
            return split
        if changed:
            return b"data: " + orjson.dumps(obj) + b"\n\n"
        return None

    def _split(
        self,
        obj: Json,
        choice: Json,
        delta: Json,
        segments: list[tuple[int, str]],
        source: str | None,
        state: ChoiceSeparator,
        final: bool,
    ) -> bytes:
        """Reasoning after visible text in one delta: send one chunk per run,
        in order, so a client that renders as it reads sees the true order."""
        runs: list[tuple[int, str]] = []
        for kind, text in segments:
            if runs and runs[-1][0] == kind:
                runs[-1] = (kind, runs[-1][1] + text)
            else:
                runs.append((kind, text))
        head = {k: v for k, v in obj.items() if k not in ("choices", "usage")}
        index = index_key(choice.get("index", 0))
        out = []
        for n, run in enumerate(runs[:-1]):
            piece: Json = {}
            state.write(piece, [run], None, False)
            if n == 0 and "role" in delta:
                piece = {"role": delta.pop("role"), **piece}
            out.append(
                {**head, "choices": [{"index": index, "delta": piece, "finish_reason": None}]}
            )
        state.write(delta, runs[-1:], source, final)
        if runs[-1][0] == V:
            delta.pop("reasoning_content", None)
        out.append(obj)
        if self.tap is not None:
            for run in runs:
                self.tap.segments(index, [run])
            self.tap.refusal(index, delta)
        return b"".join(b"data: " + orjson.dumps(o) + b"\n\n" for o in out)

    def _flush_choices(self) -> bytes:
        """Release what the tag splitters hold when the stream ends without a
        finish_reason on some choice."""
        out = []
        for index, state in self._choices.items():
            if state.finished:
                continue
            segments, _ = state.separate({}, True)
            if not segments and not state.pending:
                continue
            delta: Json = {}
            state.write(delta, segments, None, True)
            if not delta:
                continue
            if self.tap is not None:
                self.tap.segments(index, segments)
            chunk = {
                **self._envelope,
                "choices": [{"index": index, "delta": delta, "finish_reason": None}],
            }
            chunk.pop("finish_reason", None)
            out.append(b"data: " + orjson.dumps(chunk) + b"\n\n")
        return b"".join(out)

    def _done(self) -> bytes:
        """[DONE]: the end, or a failure when the stream sent nothing before
        it (no chunk, no usage, no error: an empty answer is not an answer)."""
        if (
            not self._choices
            and not self._envelope
            and self._usage is None
            and self._upstream_error is None
        ):
            return self._fail(
                StreamFailure(
                    "upstream_empty_response",
                    "The upstream ended the stream without sending an answer.",
                )
            )
        self.state = DONE
        return DONE_EVENT

    def _fail(self, failure: StreamFailure) -> bytes:
        self.state = FAILED
        self._failure = failure
        for state in self._choices.values():
            if not state.finished:
                state.separate({}, True)  # keep what the splitter held, in the turn
        return error_event(failure)


def _cut_short(event: bytes | SSEEvent | SSEComment) -> bool:
    """A data event whose JSON is cut off (not [DONE], and does not parse)."""
    if type(event) is not SSEEvent or event.data.strip() == b"[DONE]":
        return False
    try:
        orjson.loads(event.data)
    except orjson.JSONDecodeError:
        return True
    return False


def hide_tokens(choice: Json) -> bool:
    """A streamed chunk whose `content` went to the reasoning (or nowhere)
    tells no token of the answer: its `logprobs.content` tokens were the
    reasoning's and its tags'. True when some were taken out."""
    logprobs = choice.get("logprobs")
    if type(logprobs) is not dict or not logprobs.get("content"):
        return False
    logprobs["content"] = []
    return True


def visible_logprobs(choice: Json, options: NormalizeOptions, native: bool) -> bool:
    """A whole answer whose `content` held tags: its `logprobs.content` keeps
    the tokens of the visible text only (`visible_tokens`). True when some
    were taken out."""
    logprobs = choice.get("logprobs")
    tokens = logprobs.get("content") if type(logprobs) is dict else None
    if type(tokens) is not list or not all(
        type(t) is dict and type(t.get("token")) is str for t in tokens
    ):
        return False
    kept = visible_tokens(tokens, options, native)
    if len(kept) == len(tokens):
        return False
    logprobs["content"] = kept  # type: ignore[index]
    return True


def normalize_completion(
    body: Json, options: NormalizeOptions | None = None
) -> tuple[bool, Turn | None]:
    """Normalize a non-streaming `chat.completion` body in place.

    Returns whether the body changed and the Turn of its first choice (None
    when the body has no choices, e.g. an error object passed through)."""
    options = options or NormalizeOptions()
    choices = body.get("choices")
    if not choices or type(choices) is not list:
        return False, None
    changed = False
    first: ChoiceSeparator | None = None
    for choice in choices:
        if type(choice) is not dict or type(choice.get("message")) is not dict:
            continue
        message = choice["message"]
        state = ChoiceSeparator(options)
        segments, source = state.separate(message, True, delta=False)
        if state.write(message, segments, source, True) or state.rewrote:
            changed = True
        if state.splitter.delimiters and options.output != "think_tags":
            changed = visible_logprobs(choice, options, state.native) or changed
        if first is None:
            first = state
            finish = choice.get("finish_reason")
    if first is None:
        return changed, None
    usage = body.get("usage")
    delimiters = first.splitter.delimiters
    turn = first.builder.build(
        extra={"delimiters": delimiters} if delimiters else {},
        finish_reason=finish,
        usage=usage if type(usage) is dict else None,
        complete=True,
        model=body.get("model"),
        response_id=body.get("id"),
    )
    return changed, turn
