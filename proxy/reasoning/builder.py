"""Accumulate one choice of a response into a Turn (pure).

The normalizer reports what it separated, in order: reasoning text (with its
source), the end of a tagged block, visible text (a refusal's marked),
tool-call deltas, `reasoning_details` items, `thinking_blocks` items and
signatures. The
builder keeps them as ordered parts and turns them into a frozen `Turn` at
the end: block texts trimmed, empty blocks dropped, opaque detail items
attached to the block they follow. Each thinking block is a block of its
own, its items kept whole for verbatim round trips (without the `index`
their streamed pieces were joined by). Reasoning past the
per-turn bound is cut there (the turn says `reasoning_truncated`).
"""

from __future__ import annotations

from typing import Any

from proxy.reasoning.blocks import (
    Json,
    Part,
    SourceField,
    TextPart,
    ThinkingBlock,
    ToolCall,
    Turn,
    index_key,
)
from proxy.reasoning.calls import CallSlots, arguments_text
from proxy.reasoning.native import DetailsMerger, is_opaque_detail, merge_piece


class _Block:
    __slots__ = ("details", "shadow", "signature", "source", "texts")

    def __init__(self, source: SourceField, shadow: bool = False) -> None:
        self.source = source
        self.texts: list[str] = []
        self.details: list[Json] = []
        # a tagged copy of reasoning that also came natively (kept hidden if it differs)
        self.shadow = shadow
        self.signature: str | None = None  # of a `thinking` object


class _Text:
    __slots__ = ("texts",)

    def __init__(self) -> None:
        self.texts: list[str] = []


class _Tool:
    __slots__ = ("args", "id", "name", "type")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name = ""
        self.type = "function"
        self.args: list[str] = []


def utf8_size(text: str) -> int:
    """The length of `text` in UTF-8 (an ASCII text's is its length: no copy)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


class TurnBuilder:
    __slots__ = (
        "_block",
        "_bytes",
        "_calls",
        "_details",
        "_hidden",
        "_max_bytes",
        "_parts",
        "_refused",
        "_shadow",
        "_texts",
        "_thinking",
        "_tools",
        "truncated",
    )

    def __init__(self, *, hidden: bool = False, max_reasoning_bytes: int = 1 << 24) -> None:
        self._parts: list[_Block | _Text | _Tool] = []
        self._block: _Block | None = None  # the block receiving reasoning now
        self._texts: list[str] | None = None  # the text part receiving text now, if last
        self._shadow: _Block | None = None
        self._tools: list[_Tool] = []  # by slot
        self._calls: CallSlots | None = None  # made at the first tool call
        self._details = DetailsMerger()
        # thinking blocks: by index when the upstream numbers them, and the last
        self._thinking: dict[Any, tuple[_Block, Json]] = {}
        self._hidden = hidden
        self._max_bytes = max_reasoning_bytes
        self._bytes = 0  # UTF-8 bytes of reasoning kept
        self.truncated = False
        self._refused = False

    def reasoning(self, text: str, source: SourceField) -> bool:
        """Add reasoning text; True when it starts a new block after an
        earlier block that had text (the client may want a separator)."""
        block = self._block
        if block is not None and block.source == source:  # the usual case, kept short
            size = self._bytes + utf8_size(text)
            if size <= self._max_bytes:
                self._bytes = size
                block.texts.append(text)
            else:
                self._cut(block, text)
            return False
        block = self._block = _Block(source)
        self._add(block)
        self._keep(block, text)
        return self._has_text_before(block)

    def signature(self, signature: str) -> None:
        """A `thinking` object's signature (streamed ones arrive in pieces):
        it belongs to the block receiving reasoning now, else to a block of
        its own (a signature whose text was withheld)."""
        block = self._block
        if block is None:
            block = self._block = _Block("thinking")
            self._add(block)
        block.signature = (block.signature or "") + signature

    def thinking_blocks(self, items: list[Any]) -> tuple[str, bool]:
        """Add `thinking_blocks` items (whole, or streamed pieces of them).
        Returns their readable text and whether it starts a new block after
        an earlier block that had text (the client may want a separator)."""
        texts: list[str] = []
        separate = False
        for item in items:
            if type(item) is not dict:
                continue
            block, new = self._thinking_block(item)
            text = item.get("thinking") if item.get("type") == "thinking" else None
            if not text or type(text) is not str:
                continue
            if new and self._has_text_before(block):
                if texts:
                    texts.append("\n\n")
                else:
                    separate = True
            self._keep(block, text)
            texts.append(text)
        return "".join(texts), separate

    def _thinking_block(self, item: Json) -> tuple[_Block, bool]:
        """The block an item (or a piece of one) belongs to, and whether it
        is new. Pieces are joined by their `index` when they have one; else
        a `thinking` piece continues the open thinking block, until that
        block has its signature or something else came between."""
        index = item.get("index")
        key = ("index", index_key(index)) if index is not None else "last"
        found = self._thinking.get(key)
        if found is not None:
            block, merged = found
            if index is not None or (
                block is self._block
                and item.get("type") == "thinking" == merged.get("type")
                and not merged.get("signature")
            ):
                merge_piece(merged, item)
                return block, False
        block = self._block = _Block("thinking_blocks")
        merged = dict(item)
        block.details.append(merged)
        self._add(block)
        self._thinking[key] = (block, merged)
        return block, True

    def room(self) -> int:
        """Reasoning bytes (UTF-8) that can still be added before truncation."""
        return self._max_bytes - self._bytes

    def end_block(self) -> None:
        self._block = None

    def shadow(self, text: str) -> None:
        if self._shadow is None:
            self._shadow = _Block("think_tag", shadow=True)
            self._add(self._shadow)
        self._keep(self._shadow, text)

    def end_shadow(self) -> None:
        self._shadow = None

    def text(self, text: str) -> None:
        texts = self._texts
        if texts is None:  # text after something else: a new text part
            self._block = None
            part = _Text()
            self._add(part)
            texts = self._texts = part.texts
        texts.append(text)

    def refusal(self, text: str) -> None:
        """Chat's `refusal`: the answer the model gave instead, the turn's
        text (the turn says `refusal`)."""
        self._refused = True
        self.text(text)

    def _add(self, part: _Block | _Text | _Tool) -> None:
        self._parts.append(part)
        self._texts = None

    def tool_call(self, delta: Json, position: int = 0) -> Any:
        """Add a piece of a tool call (`position`: its place in its chunk's
        list); return the `index` a chat client should see it at (see
        `CallSlots.wire`)."""
        self._block = None
        calls = self._calls
        if calls is None:
            calls = self._calls = CallSlots()
        slot = calls.slot(delta, position)
        if slot < len(self._tools):
            tool = self._tools[slot]
        else:
            tool = _Tool()
            self._tools.append(tool)
            self._add(tool)
        if delta.get("id"):
            tool.id = str(delta["id"])
        if delta.get("type"):
            tool.type = str(delta["type"])
        function = delta.get("function")
        if type(function) is dict:
            if function.get("name"):
                tool.name += str(function["name"])
            args = arguments_text(function.get("arguments"))
            if args is not None:
                tool.args.append(args)
        return calls.wire(slot)

    def details(self, items: list[Any]) -> None:
        for item in items:
            if type(item) is not dict:
                continue
            merged, new = self._details.add(item)
            if not new:
                continue
            last = self._parts[-1] if self._parts else None
            if type(last) is _Block and not last.shadow:
                last.details.append(merged)
            else:
                block = _Block("reasoning_details")
                block.details.append(merged)
                self._add(block)
                self._block = block

    def build(self, **fields: Any) -> Turn:
        parts: list[Part] = []
        native = ""
        if any(type(p) is _Block and p.shadow for p in self._parts):
            # native reasoning without whitespace, to compare the tagged copies with
            native = "".join(
                "".join("".join(p.texts).split())
                for p in self._parts
                if type(p) is _Block and not p.shadow
            )
        for p in self._parts:
            if type(p) is _Block:
                block = self._finish_block(p, native)
                if block is not None:
                    parts.append(block)
            elif type(p) is _Text:
                text = "".join(p.texts)
                if text:
                    parts.append(TextPart(text))
            elif type(p) is _Tool:
                parts.append(ToolCall(p.id, p.name, "".join(p.args), p.type))
        details = tuple(self._details.items) or None
        return Turn(
            parts=tuple(parts),
            reasoning_details=details,
            reasoning_truncated=self.truncated,
            refusal=self._refused,
            **fields,
        )

    def _finish_block(self, p: _Block, native: str) -> ThinkingBlock | None:
        thought = "".join(p.texts).strip()
        if p.shadow and (not thought or "".join(thought.split()) in native):
            return None  # the tagged copy says what the native reasoning said
        if p.source == "thinking_blocks":
            # the items are the block, kept whole but for the `index` a
            # stream numbered its pieces with (no key of a block: LiteLLM's
            # and Anthropic's blocks have none, and the latter refuse one)
            opaque = tuple({k: v for k, v in d.items() if k != "index"} for d in p.details)
        else:
            opaque = tuple(dict(d) for d in p.details if is_opaque_detail(d))
        if not thought and not opaque and not p.signature:
            return None
        signature = p.signature or next(
            (d["signature"] for d in opaque if d.get("signature")), None
        )
        return ThinkingBlock(
            thought=thought,
            source_field=p.source,
            is_hidden=self._hidden or p.shadow or not thought,
            signature=signature,
            encrypted=opaque or None,
        )

    def _keep(self, block: _Block, text: str) -> None:
        size = self._bytes + utf8_size(text)
        if size <= self._max_bytes:
            self._bytes = size
            block.texts.append(text)
        else:
            self._cut(block, text)

    def _cut(self, block: _Block, text: str) -> None:
        """Keep what fits of `text` under the bound (reasoning that arrives
        in one piece longer than the bound is cut, not dropped), at a
        character's boundary."""
        self.truncated = True
        room = self._max_bytes - self._bytes
        if room > 0:
            kept = text.encode("utf-8", "surrogatepass")[:room].decode("utf-8", "ignore")
            if kept:
                block.texts.append(kept)
        self._bytes = self._max_bytes  # nothing after the cut is kept

    def _has_text_before(self, block: _Block) -> bool:
        for p in self._parts:
            if p is block:
                break
            if type(p) is _Block and not p.shadow and p.texts:
                return True
        return False
