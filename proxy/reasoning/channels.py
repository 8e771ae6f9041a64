"""Separate one choice of a response into answer and reasoning (sans-IO).

`ChoiceSeparator` takes the deltas (or the message) of one choice index in
order: native reasoning fields are authoritative from their first delta on;
without them, tag bodies in `content` become reasoning. It feeds the Turn
builder and returns the client's segments; `rewrite` writes them back into
the delta. `quick` handles the common deltas without the general path.
`visible_tokens` tells which tokens of a whole answer's logprobs are its
visible text's.
"""

from __future__ import annotations

from dataclasses import dataclass

from proxy.reasoning.blocks import Json
from proxy.reasoning.builder import TurnBuilder
from proxy.reasoning.calls import as_chat_call
from proxy.reasoning.native import (
    REASONING_FIELDS,
    content_parts_as_fields,
    native_text,
    thinking_signature,
)
from proxy.reasoning.output import Output, ShapeWriter
from proxy.reasoning.sse import DEFAULT_MAX_LINE_BYTES
from proxy.reasoning.tags import DEFAULT_TAG_SET, Reasoning, TagEvent, TagSet, TagSplitter, Visible

NOT_HANDLED, UNCHANGED, CHANGED = 0, 1, 2  # results of ChoiceSeparator.quick
# keys of a delta that the quick path can handle
_PLAIN_KEYS = frozenset({"role", "content", "reasoning_content", "refusal"})
_plain_delta = _PLAIN_KEYS.issuperset  # (a bound method: the check runs per event)
# the key of chat's legacy `function_call` among the builder's tool calls
# (which chat numbers by `index`): one call, without an id
LEGACY_CALL = "function_call"
V = 0  # segment kinds: visible text, reasoning text
R = 1
_FOLDED = ("reasoning", "thinking")
_ALL_REASONING = REASONING_FIELDS


@dataclass(frozen=True, slots=True, init=False)
class NormalizeOptions:
    tags: TagSet = DEFAULT_TAG_SET
    implicit_open_tag: bool = False
    include_in_response: bool = True
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES
    max_reasoning_bytes: int = 1 << 24
    # recognize a stream's repeated chunk shape instead of parsing each chunk
    # (off: every chunk parsed; the two must agree, which the tests check)
    shapes: bool = True
    # how the client receives the reasoning (see output.py)
    output: Output = "reasoning_content"

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(
        self,
        tags: TagSet = DEFAULT_TAG_SET,
        implicit_open_tag: bool = False,
        include_in_response: bool = True,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
        max_reasoning_bytes: int = 1 << 24,
        shapes: bool = True,
        output: Output = "reasoning_content",
    ) -> None:
        object.__setattr__(self, "tags", tags)
        object.__setattr__(self, "implicit_open_tag", implicit_open_tag)
        object.__setattr__(self, "include_in_response", include_in_response)
        object.__setattr__(self, "max_line_bytes", max_line_bytes)
        object.__setattr__(self, "max_reasoning_bytes", max_reasoning_bytes)
        object.__setattr__(self, "shapes", shapes)
        object.__setattr__(self, "output", output)

    @property
    def include(self) -> bool:
        """Does any reasoning reach the client? (`none` is like include false)"""
        return self.include_in_response and self.output != "none"

    @property
    def default_shape(self) -> bool:
        """Reasoning goes out as `reasoning_content` (or not at all): the
        shape the quick path and the learned chunk shapes write."""
        return self.output in ("reasoning_content", "none")


class ChoiceSeparator:
    """Separation state of one choice index."""

    __slots__ = (
        "builder",
        "finished",
        "include",
        "mark",
        "native",
        "plain",
        "rewrote",
        "splitter",
        "writer",
    )

    def __init__(self, options: NormalizeOptions) -> None:
        self.splitter = TagSplitter(options.tags, implicit_open=options.implicit_open_tag)
        self.include = options.include
        self.builder = TurnBuilder(
            hidden=not self.include,
            max_reasoning_bytes=options.max_reasoning_bytes,
        )
        # None: the default shape, written by `rewrite`
        self.writer = None if options.default_shape else ShapeWriter(options.output)
        self.native = False
        self.finished = False
        # a tool call was put in OpenAI's shape (`as_chat_call`): what it
        # came in goes out re-encoded; the normalizer resets it
        self.rewrote = False
        # the character every delimiter starts with: content without it is
        # plain ("" when the delimiters start with several: never plain here)
        self.mark = options.tags.mark or ""
        # the splitter is outside any block with nothing held (kept current
        # after every splitter call, so the per-event check is one attribute)
        self.plain = self.splitter.plain

    def quick(self, delta: Json, include: bool) -> int:
        """Handle the common deltas without the general machinery: plain
        answer text or native `reasoning_content` alone (UNCHANGED), and text
        inside a tagged block (CHANGED: moved to `reasoning_content`).
        NOT_HANDLED means nothing was done: take `separate`."""
        if not _plain_delta(delta) or delta.get("refusal"):
            return NOT_HANDLED
        content = delta.get("content")
        rc = delta.get("reasoning_content")
        if rc:
            if content or not self.native or not include or type(rc) is not str:
                return NOT_HANDLED
            self.builder.reasoning(rc, "reasoning_content")
            return UNCHANGED
        if not content:
            return UNCHANGED if include or "reasoning_content" not in delta else NOT_HANDLED
        if type(content) is not str or self.mark in content:
            return NOT_HANDLED
        if self.plain:
            self.builder.text(content)
            self.splitter.tail_ws = content[-1].isspace()
            return UNCHANGED
        splitter = self.splitter
        if self.native or not splitter.inside_plain:
            return NOT_HANDLED
        text = splitter.reasoning_text(content)
        delta["content"] = ""
        if text:
            self.builder.reasoning(text, "think_tag")
            if include:
                delta["reasoning_content"] = text
        return CHANGED

    def separate(
        self, obj: Json, final: bool, delta: bool = True
    ) -> tuple[list[tuple[int, str]], str | None]:
        """Feed one delta (or, `delta` False, a whole message); return the
        client segments in order and the reasoning source field when the
        delta carried native reasoning."""
        segments: list[tuple[int, str]] = []
        builder = self.builder
        source: str | None = None
        if content_parts_as_fields(obj):  # Mistral's chunks (proxy/reasoning/native.py)
            self.rewrote = True
        blocks = obj.get("thinking_blocks")
        if blocks and type(blocks) is list:
            # each thinking block is a block; the same text in another field
            # of this delta (LiteLLM's reasoning_content) counts once
            text, separate = builder.thinking_blocks(blocks)
            if text:
                source = "thinking_blocks"
                self._native()
                segments.append((R, "\n\n" + text if separate else text))
            else:  # redacted, or a signature alone
                self.splitter.leave_implicit()
        found = native_text(obj) if source is None else None
        if found is not None:
            text, source = found
            self._native()
            builder.reasoning(text, found[1])
            segments.append((R, text))
        thinking = obj.get("thinking")
        if thinking and type(thinking) is dict:
            signature = thinking_signature(thinking)
            if signature:
                builder.signature(signature)
                self.splitter.leave_implicit()
        details = obj.get("reasoning_details")
        if details and type(details) is list:
            builder.details(details)
            # encrypted items are native reasoning too, though without text
            self.splitter.leave_implicit()
        content = obj.get("content")
        if content and type(content) is str:
            self._tags(self.splitter.feed(content), segments)
        refusal = obj.get("refusal")
        if refusal and type(refusal) is str:
            # the answer the model gave instead (never tagged): stored as the
            # turn's text, marked; the client gets it in `refusal`, as it came
            builder.refusal(refusal)
        calls = obj.get("tool_calls")
        legacy = obj.get("function_call")  # chat's older form of one tool call
        if final:
            self._tags(self.splitter.flush(), segments)
            self.finished = True
        elif calls or legacy:
            # text held as a possible tag start goes out before the call it precedes
            self._tags(self.splitter.release(), segments)
        self.plain = self.splitter.plain
        if calls and type(calls) is list:
            for n, call in enumerate(calls):
                if type(call) is dict:
                    wire = builder.tool_call(call, n)
                    # in OpenAI's shape for the client (proxy/reasoning/calls.py)
                    if as_chat_call(call, wire if delta else None):
                        self.rewrote = True
        if legacy and type(legacy) is dict:
            builder.tool_call({"index": LEGACY_CALL, "function": legacy})
        return segments, source

    def write(
        self, obj: Json, segments: list[tuple[int, str]], source: str | None, final: bool
    ) -> bool:
        """Write the separated channels into a delta or message in the
        client's shape; True if it changed."""
        if self.writer is None or not self.include:
            return rewrite(obj, segments, source, self.include)
        return self.writer.write(obj, segments, source, final)

    @property
    def pending(self) -> bool:
        """The shape still has something to write at the end."""
        return self.writer is not None and self.writer.pending

    def _native(self) -> None:
        if not self.native:
            self.native = True
            self.splitter.leave_implicit()

    def _tags(self, events: list[TagEvent], segments: list[tuple[int, str]]) -> None:
        builder = self.builder
        for ev in events:
            kind = type(ev)
            if kind is Visible:
                builder.text(ev.text)  # type: ignore[union-attr]
                segments.append((V, ev.text))  # type: ignore[union-attr]
            elif kind is Reasoning:
                if self.native:  # native is authoritative: a tagged copy stays off the wire
                    builder.shadow(ev.text)  # type: ignore[union-attr]
                elif builder.reasoning(ev.text, "think_tag"):  # type: ignore[union-attr]
                    segments.append((R, "\n\n" + ev.text))  # type: ignore[union-attr]
                else:
                    segments.append((R, ev.text))  # type: ignore[union-attr]
            elif self.native:
                builder.end_shadow()
            else:
                builder.end_block()


def rewrite(obj: Json, segments: list[tuple[int, str]], source: str | None, include: bool) -> bool:
    """Write the separated channels into a delta or message; True if changed."""
    visible = "".join(t for k, t in segments if k == V)
    reasoning = "".join(t for k, t in segments if k == R)
    content = obj.get("content")
    changed = False
    if visible != (content or ""):
        changed = True
        if visible or type(content) is str:
            obj["content"] = visible
    if include:
        if reasoning and (source != "reasoning_content" or reasoning != obj["reasoning_content"]):
            obj["reasoning_content"] = reasoning
            changed = True
        for key in _FOLDED:
            if key in obj:
                del obj[key]
                changed = True
    else:
        for key in _ALL_REASONING:
            if key in obj:
                del obj[key]
                changed = True
        extra = obj.get("provider_specific_fields")  # LiteLLM repeats thinking_blocks here
        if type(extra) is dict:
            for key in _ALL_REASONING:
                if key in extra:
                    del extra[key]
                    changed = True
    return changed


def visible_tokens(tokens: list[Json], options: NormalizeOptions, native: bool) -> list[Json]:
    """The tokens of a whole answer's logprobs (each with its `token` text)
    that its visible text is made of, as a stream would tell them: each
    token read as one chunk of `content`, kept when that chunk brings
    visible text. Tag and reasoning tokens are left out. `native`: the
    answer had native reasoning too (an implicit open tag then does not
    hold, as for the separator)."""
    splitter = TagSplitter(options.tags, implicit_open=options.implicit_open_tag)
    if native:
        splitter.leave_implicit()
    kept: list[Json] = []
    last = len(tokens) - 1
    for n, token in enumerate(tokens):
        events = splitter.feed(token["token"])
        if n == last:
            events += splitter.flush()
        if any(type(ev) is Visible and ev.text for ev in events):
            kept.append(token)
    return kept


def in_order(segments: list[tuple[int, str]]) -> bool:
    """True when no reasoning follows visible text (one delta can hold it)."""
    seen_visible = False
    for kind, _ in segments:
        if kind == V:
            seen_visible = True
        elif seen_visible:
            return False
    return True
