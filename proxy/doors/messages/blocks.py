"""The content blocks of one Messages stream, in Anthropic's order (sans-IO).

Anthropic never interleaves blocks: each is `content_block_start`, its
deltas, `content_block_stop`, and the next one starts only after that. A
Chat upstream may interleave: parallel tool calls whose argument pieces
alternate (index 0, index 1, index 0 again), or text that comes while a
tool call's arguments are unfinished. `BlockOrder` keeps Anthropic's order:

- one block at a time is *live*: started, its deltas sent as they come;
- a block that begins while the live one cannot close yet is *held*: its
  pieces are kept, and once every block before it has closed it goes out
  whole (its start and one delta with all it has), then is live itself;
- a tool call whose first piece has no name (some servers send the name in
  a later piece) is held until the name comes, or until `drain()`;
- a thinking or text block closes as soon as the next block begins; a tool
  call once its arguments are a whole JSON object (after which only
  whitespace can follow), else when `drain()` says the blocks are complete
  (the choice's `finish_reason`, an error, [DONE]).

So when the model produces its blocks one after another (thinking, text,
tool calls) every block streams live; only what would interleave waits,
and only while a block before it is open. Blocks go out in the order they
began. Argument pieces for a tool call that has closed are not sent (by the
rules above: whitespace after a whole object, or what an upstream sends
after its own `finish_reason`).

A tool_use block's `input` is a JSON object, and clients parse the joined
`input_json_delta` pieces as one. Arguments that do not begin with `{` (a
model's array, `null`, or a JSON string holding the object) are sent as one
piece when the block closes, as `tool_input` makes them an object (the
same object a whole answer holds); until their first other character,
leading whitespace waits.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson

from proxy.reasoning.native import DetailsMerger

Json = dict[str, Any]
# (reasoning text, the upstream's artefacts) -> the sealed signature
Seal = Callable[[str, Json], str]

THINKING, TEXT, TOOL = "thinking", "text", "tool_use"
# the delta type and its key, per block kind
_DELTAS = {
    THINKING: (b"thinking_delta", b"thinking"),
    TEXT: (b"text_delta", b"text"),
    TOOL: (b"input_json_delta", b"partial_json"),
}
HELD = -1  # a block's index before it starts
# how a tool call's arguments go out: undecided (whitespace so far), live
# (an object: each piece as it comes), whole (anything else: once, at close)
UNDECIDED, LIVE, WHOLE = 0, 1, 2


def event(name: str, data: Json) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def delta_event(index: int, kind: bytes, key: bytes, value: str) -> bytes:
    return (
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":'
        + str(index).encode()
        + b',"delta":{"type":"'
        + kind
        + b'","'
        + key
        + b'":'
        + orjson.dumps(value)
        + b"}}\n\n"
    )


def _stop_event(index: int) -> bytes:
    return (
        b'event: content_block_stop\ndata: {"type":"content_block_stop","index":'
        + str(index).encode()
        + b"}\n\n"
    )


class Thinking:
    """A thinking block's text and the upstream's own artefacts (its
    `thinking_blocks` items, a signature, `reasoning_details` items), sealed
    into its signature when it closes."""

    __slots__ = ("blocks", "details", "signature", "text")

    def __init__(self) -> None:
        self.text: list[str] = []
        self.signature: list[str] = []
        self.blocks: list[Json] = []
        self.details: DetailsMerger | None = None

    def artefacts(self) -> Json:
        out: Json = {}
        if self.blocks:
            # kept whole but for the `index` a stream numbered their pieces
            # by (no key of a block: LiteLLM's and Anthropic's blocks have
            # none, and the latter refuse one)
            out["thinking_blocks"] = [unnumbered(b) for b in self.blocks]
        if self.signature:
            out["signature"] = "".join(self.signature)
        if self.details is not None and self.details.items:
            out["reasoning_details"] = self.details.items
        return out


def unnumbered(block: Json) -> Json:
    """A `thinking_blocks` item without the `index` its streamed pieces
    were joined by."""
    return {k: v for k, v in block.items() if k != "index"}


class Block:
    """One content block: its kind, the `content_block` of its start, the
    pieces of its text (or arguments) so far, where it stands."""

    __slots__ = ("arguments", "closed", "head", "index", "kind", "parts", "thinking")

    def __init__(self, kind: str, head: Json, thinking: Thinking | None = None) -> None:
        self.kind = kind
        self.head = head
        self.thinking = thinking
        self.parts: list[str] = thinking.text if thinking is not None else []
        self.index = HELD
        self.closed = False
        self.arguments = UNDECIDED if kind == TOOL else LIVE


def tool_input(arguments: str) -> Json:
    """A tool call's arguments as a tool_use `input`, which must be an object:
    an object as it is (or written as a JSON string, as some servers send
    it), nothing as `{}`, another JSON value as `{"value": ...}`, text that
    is not JSON as `{"arguments": ...}`."""
    if not arguments.strip():
        return {}
    try:
        parsed = orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return {"arguments": arguments}
    if isinstance(parsed, str) and parsed.lstrip().startswith("{"):
        try:
            inner = orjson.loads(parsed)
        except orjson.JSONDecodeError:
            inner = None
        parsed = inner if isinstance(inner, dict) else parsed
    return parsed if isinstance(parsed, dict) else {"value": parsed}


def _ready(block: Block) -> bool:
    """A block can start: a tool call once it has a name (a server may send
    the name after the call's first piece; a `content_block_start` cannot
    take it back)."""
    return block.kind != TOOL or bool(block.head.get("name"))


def whole_object(parts: list[str]) -> bool:
    """The arguments so far are a whole JSON object (a cheap look at the
    last piece first: an object ends with `}`)."""
    last = next((p for p in reversed(parts) if p.strip()), "")
    if not last.rstrip().endswith("}"):
        return False
    try:
        return isinstance(orjson.loads("".join(parts)), dict)
    except orjson.JSONDecodeError:
        return False


class BlockOrder:
    """The blocks of one stream (see the module docstring): `begin()` a
    block, `add()` its pieces, `drain()` when the choice is complete,
    `close()` at the end. Each writes the events it causes to `out`."""

    def __init__(self, seal: Seal, show_thinking: bool) -> None:
        self.seal = seal
        self.show_thinking = show_thinking
        self.started = 0  # blocks started so far
        self.live: Block | None = None
        self.held: list[Block] = []

    def last(self) -> Block | None:
        """The block that began last (held or live), if any."""
        return self.held[-1] if self.held else self.live

    def begin(self, block: Block, out: list[bytes]) -> Block:
        if not self.held and _ready(block) and (self.live is None or self._closable(self.live)):
            self._close_live(out)
            self._start(block, out)
        else:
            self.held.append(block)
        return block

    def named(self, out: list[bytes]) -> None:
        """A held tool call got its name: what waited for it may go out."""
        self._advance(out, force=False)

    def add(self, block: Block, text: str, out: list[bytes]) -> None:
        if block.closed:
            return
        block.parts.append(text)
        if block is self.live:
            self._delta(block, text, out)
            if self.held and block.kind == TOOL:
                self._advance(out, force=False)

    def drain(self, out: list[bytes]) -> None:
        """The blocks are complete: the held ones go out, in order; the last
        one stays open."""
        self._advance(out, force=True)

    def close(self, out: list[bytes]) -> None:
        self._advance(out, force=True)
        self._close_live(out)

    def _advance(self, out: list[bytes], *, force: bool) -> None:
        while self.held and (
            force or (_ready(self.held[0]) and (self.live is None or self._closable(self.live)))
        ):
            self._close_live(out)
            self._start(self.held.pop(0), out)

    def _closable(self, block: Block) -> bool:
        return block.kind != TOOL or whole_object(block.parts)

    def _start(self, block: Block, out: list[bytes]) -> None:
        block.index = self.started
        self.started += 1
        start = {"type": "content_block_start", "index": block.index, "content_block": block.head}
        out.append(event("content_block_start", start))
        if block.parts:
            self._delta(block, "".join(block.parts), out)
        self.live = block

    def _delta(self, block: Block, text: str, out: list[bytes]) -> None:
        if block.kind == THINKING and not self.show_thinking:
            return
        if block.arguments == UNDECIDED:
            text = "".join(block.parts)  # nothing of it went out yet
            head = text.lstrip()[:1]
            if not head:
                return
            block.arguments = LIVE if head == "{" else WHOLE
        if block.arguments == WHOLE:
            return  # sent whole, as an object, when the block closes
        kind, key = _DELTAS[block.kind]
        out.append(delta_event(block.index, kind, key, text))

    def _close_live(self, out: list[bytes]) -> None:
        block = self.live
        if block is None:
            return
        if block.thinking is not None:
            thinking = block.thinking
            signature = self.seal("".join(thinking.text), thinking.artefacts())
            out.append(delta_event(block.index, b"signature_delta", b"signature", signature))
        if block.arguments == WHOLE:
            whole = orjson.dumps(tool_input("".join(block.parts))).decode()
            out.append(delta_event(block.index, b"input_json_delta", b"partial_json", whole))
        out.append(_stop_event(block.index))
        block.closed = True
        self.live = None
