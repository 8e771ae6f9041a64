"""The shapes a client can receive reasoning in, besides the default (pure).

`reasoning_content` (the default, written by `channels.rewrite`) and `none`
(no reasoning at all, like include-in-response false) need no state. The
others are written here, one `ShapeWriter` per choice, from the segments the
separator found in a delta or message, in order:

- `reasoning`: the text in `reasoning` (newer vLLM, OpenRouter, Groq clients);
- `think_tags`: `<think>\\n...\\n</think>\\n\\n` inline in `content`, the
  tags never split across deltas: a block opens with its first reasoning and
  closes before the answer text, a tool call or the end that follows it (a
  block after answer text closes with no blank line: the answer without
  its blocks is the answer);
- `reasoning_details`: OpenRouter's typed list, one `reasoning.text` item
  index per block; `thinking_blocks` become `reasoning.text` items with their
  signature and `reasoning.encrypted` items (redacted blocks). One choice's
  items never share an index unless they are pieces of one item: the
  upstream's own items keep theirs, unless an item the writer numbered has
  it already (then they move to a free one, all their pieces alike).

Under every shape the other reasoning text fields are removed (nothing
arrives twice); `reasoning_details` and `thinking_blocks` pass through
unchanged for clients that round-trip them, except under
`reasoning_details`, which takes them in.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from proxy.reasoning.blocks import Json, index_key
from proxy.reasoning.native import details_text

Output = Literal["reasoning_content", "reasoning", "think_tags", "reasoning_details", "none"]
OUTPUTS: tuple[Output, ...] = (
    "reasoning_content",
    "reasoning",
    "think_tags",
    "reasoning_details",
    "none",
)

THINK_OPEN = "<think>\n"
THINK_CLOSE = "\n</think>"
# a `</think>` the reasoning itself holds (a model reasoning about the tag):
# written with a zero-width space after its `<`, so no tag parser (a
# client's, or this proxy's when the content comes back) ends the block there
_INNER_CLOSE = re.compile(r"</(think)>", re.IGNORECASE)
_ESCAPED = "<\u200b/\\1>"
_ESCAPED_CLOSE = re.compile("<\u200b/(think)>", re.IGNORECASE)
_CLOSE_TAG = "</think>"
# between a block that leads the answer and the answer (Qwen3's and
# DeepSeek-R1's templates write it so); a block in the middle of the answer
# gets nothing there, so that the answer without its blocks is the answer
_AFTER_CLOSE = "\n\n"
_TEXT_FIELDS = ("reasoning_content", "reasoning", "thinking")
V, R = 0, 1  # segment kinds, as channels writes them


def unescape_inner_close(reasoning: str) -> str:
    """Reasoning read back from a `think_tags` block this proxy wrote, as the
    model wrote it: the escaped `</think>` it holds without its zero-width
    space."""
    return _ESCAPED_CLOSE.sub(r"</\1>", reasoning) if "\u200b" in reasoning else reasoning


class ShapeWriter:
    """Writes one choice's reasoning in a shape other than the default."""

    __slots__ = (
        "answered",
        "gap",
        "held",
        "index",
        "moved",
        "open",
        "sealed",
        "shape",
        "taken",
        "used",
    )

    def __init__(self, shape: Output) -> None:
        self.shape = shape
        self.open = False  # think_tags: a <think> block is open on the wire
        self.held = ""  # think_tags: reasoning that may begin a `</think>` (next delta decides)
        self.answered = False  # think_tags: answer text was written (a block is mid-answer)
        # reasoning_details: the index of the current block, whether one was
        # written, whether something else came since (a new block follows),
        # and whether the last thinking block was sealed by its signature
        self.index = 0
        self.used = False
        self.gap = False
        self.sealed = False
        # every index written in this choice, and where each upstream item's
        # index went (its own, or a free one when the writer had used it)
        self.taken: set[Any] = set()
        self.moved: dict[tuple[str, Any], Any] = {}

    @property
    def pending(self) -> bool:
        """Something must still be written at the end (a <think> to close)."""
        return self.open

    def write(
        self, obj: Json, segments: list[tuple[int, str]], source: str | None, final: bool
    ) -> bool:
        """Write the segments into a delta or message; True if it changed."""
        content = obj.get("content")
        calls = bool(obj.get("tool_calls"))
        if self.shape == "think_tags":
            text = self._inline(segments, final or calls)
            changed = text != (content or "")
            if changed:
                obj["content"] = text
            return _drop(obj, _TEXT_FIELDS) or changed
        visible = "".join(t for k, t in segments if k == V)
        reasoning = "".join(t for k, t in segments if k == R)
        changed = visible != (content or "")
        if changed and (visible or type(content) is str):
            obj["content"] = visible
        if self.shape == "reasoning":
            if reasoning and not (source == "reasoning" and obj.get("reasoning") == reasoning):
                obj["reasoning"] = reasoning
                changed = True
            changed = _drop(obj, ("reasoning_content", "thinking")) or changed
        else:
            changed = self._details(obj, reasoning, source) or changed
        if visible or calls:
            self.gap = True
        return changed

    def _inline(self, segments: list[tuple[int, str]], closing: bool) -> str:
        out: list[str] = []
        for kind, text in segments:
            if kind == R:
                if not self.open:
                    self.open = True
                    out.append(THINK_OPEN)
                    text = text.lstrip("\n")  # a block separator: the tag separates now
                out.append(self._escaped(text))
            else:
                if self.open:
                    self.open = False
                    out += (self._release(), THINK_CLOSE)
                    if not self.answered:  # the block leads the answer, as templates write it
                        out.append(_AFTER_CLOSE)
                if text and not text.isspace():
                    self.answered = True
                out.append(text)
        if self.open and closing:
            self.open = False
            out += (self._release(), THINK_CLOSE)
        return "".join(out)

    def _escaped(self, text: str) -> str:
        """Reasoning with its own `</think>`s escaped; a tail that may begin
        one is held for the next delta."""
        text = _INNER_CLOSE.sub(_ESCAPED, self.held + text)
        self.held = ""
        start = text.rfind("<", max(0, len(text) - len(_CLOSE_TAG) + 1))
        if start >= 0 and _CLOSE_TAG.startswith(text[start:].lower()):
            self.held = text[start:]
            return text[:start]
        return text

    def _release(self) -> str:
        held, self.held = self.held, ""
        return held

    def _details(self, obj: Json, reasoning: str, source: str | None) -> bool:
        upstream = obj.get("reasoning_details")
        items: list[Any] = (
            [self._renumbered(i, "reasoning_details") for i in upstream]
            if type(upstream) is list
            else []
        )
        blocks = obj.get("thinking_blocks")
        converted = (
            [self._convert(b) for b in blocks if type(b) is dict] if type(blocks) is list else []
        )
        carried = source == "thinking_blocks" or (items and details_text(items))
        if reasoning and not carried:  # no item carries the text yet
            item: Json = {
                "type": "reasoning.text",
                "text": reasoning,
                "index": self._next(self.gap),
            }
            items.append(item)
        items += converted
        changed = _drop(obj, (*_TEXT_FIELDS, "thinking_blocks"))
        if items and items != upstream:
            obj["reasoning_details"] = items
            changed = True
        return changed

    def _convert(self, block: Json) -> Json:
        """A thinking block (or a streamed piece of one) as a details item."""
        if block.get("type") == "redacted_thinking":
            self.sealed = True
            return {
                "type": "reasoning.encrypted",
                "data": block.get("data"),
                "index": self._next(True),
            }
        index = block.get("index")
        new = self.gap or self.sealed
        item: Json = {
            "type": "reasoning.text",
            "text": block.get("thinking") or "",
            "index": self._wire("thinking_blocks", index) if index is not None else self._next(new),
        }
        if block.get("signature"):
            item["signature"] = block["signature"]
            self.sealed = True
        else:
            self.sealed = False
        return item

    def _next(self, new: bool) -> int:
        if new or not self.used:
            self.index = self._free()
            self.taken.add(self.index)
        self.used = True
        self.gap = False
        return self.index

    def _free(self) -> int:
        """An index after every one written in this choice."""
        return 1 + max((i for i in self.taken if type(i) is int), default=-1)

    def _wire(self, kind: str, index: Any) -> Any:
        """The index an upstream item (or a piece of one) of `kind` is written at."""
        key = (kind, index_key(index))
        wire = self.moved.get(key)
        if wire is None:
            wire = key[1] if key[1] not in self.taken else self._free()
            self.moved[key] = wire
            self.taken.add(wire)
        return wire

    def _renumbered(self, item: Any, kind: str) -> Any:
        if type(item) is not dict or "index" not in item:
            return item
        wire = self._wire(kind, item["index"])
        return item if wire == index_key(item["index"]) else {**item, "index": wire}


def _drop(obj: Json, keys: tuple[str, ...]) -> bool:
    changed = False
    for key in keys:
        if key in obj:
            del obj[key]
            changed = True
    return changed
