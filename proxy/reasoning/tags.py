"""Split text with inline reasoning tags into visible and reasoning parts (sans-IO).

Theory of operation. The splitter is in one of two states:

- OUTSIDE: text is visible. An open tag of the configured set (`<think>`,
  `<thinking>`, `<reasoning>`, case-insensitive) enters INSIDE. A close tag
  here is stray: with `implicit_open` and no block seen yet it could not be
  (the splitter starts INSIDE then); otherwise it is removed and the text
  around it stays visible.
- INSIDE(name): text is reasoning. Only the close tag of the same name ends
  the block (`name is None` in implicit mode: any configured close tag). Tags
  do not nest: any other tag inside is reasoning text.

What is held back between calls is only a possible tag prefix (`<`, `</thi`,
at most the longest tag) and, inside a block, a short run of trailing
whitespace that would be trimmed if the close tag follows. Whitespace just
inside the tags and at the start of the text after a block is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_TAGS: tuple[str, ...] = ("think", "thinking", "reasoning")

# Trailing whitespace inside a block is held back (it is trimmed if the close
# tag follows); past this many characters it is released to keep the carry small.
_MAX_HELD_WHITESPACE = 64


# Not frozen, for speed (see sse.py); treat them as values.
@dataclass(slots=True)
class Visible:
    text: str


@dataclass(slots=True)
class Reasoning:
    text: str


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    """A reasoning block was closed by its tag (or the text ended inside it)."""


TagEvent = Visible | Reasoning | ReasoningEnd
REASONING_END = ReasoningEnd()


@dataclass(frozen=True, slots=True)
class TagSet:
    """The configured tag names, with their lower-case delimiters precomputed."""

    names: tuple[str, ...]
    opens: tuple[tuple[str, str], ...]  # ("<think>", "think")
    closes: tuple[tuple[str, str], ...]  # ("</think>", "think")
    longest: int

    @classmethod
    def of(cls, names: Iterable[str] = DEFAULT_TAGS) -> TagSet:
        clean = tuple(dict.fromkeys(n.strip().lower() for n in names if n.strip()))
        if not clean:
            raise ValueError("the reasoning tag set must not be empty")
        for name in clean:
            if not all(c.isalnum() or c in "_-:." for c in name):
                raise ValueError(f"invalid reasoning tag name: {name!r}")
        opens = tuple((f"<{n}>", n) for n in clean)
        closes = tuple((f"</{n}>", n) for n in clean)
        return cls(clean, opens, closes, max(len(t) for t, _ in closes))

    def delimiters(self) -> tuple[str, ...]:
        return tuple(t for t, _ in self.opens + self.closes)


DEFAULT_TAG_SET = TagSet.of(DEFAULT_TAGS)

_OUTSIDE = 0
_INSIDE = 1


class TagSplitter:
    """`feed(text) -> list[TagEvent]`, `flush() -> list[TagEvent]`."""

    __slots__ = (
        "_block",
        "_carry",
        "_fresh_implicit",
        "_held_ws",
        "_hold",
        "_skip_ws",
        "_state",
        "_tags",
        "delimiters",
    )

    def __init__(self, tags: TagSet = DEFAULT_TAG_SET, *, implicit_open: bool = False) -> None:
        self._tags = tags
        self._carry = ""
        self._held_ws = ""
        self._hold = ""  # visible text held across a block (see _emit_before_block)
        self._block: str | None = None
        self._state = _INSIDE if implicit_open else _OUTSIDE
        # In implicit mode, a leading explicit open tag is consumed, not reasoning.
        self._fresh_implicit = implicit_open
        self._skip_ws = implicit_open
        self.delimiters = 0  # tags removed from the text so far (for metrics)

    @property
    def plain(self) -> bool:
        """Outside any block with nothing held: text without `<` passes as is."""
        return self._state == _OUTSIDE and not self._carry and not self._skip_ws

    @property
    def inside_plain(self) -> bool:
        """Inside a block with nothing held but trailing whitespace: text
        without `<` is all reasoning (see `reasoning_text`)."""
        return self._state == _INSIDE and not self._carry and not self._skip_ws

    def reasoning_text(self, text: str) -> str:
        """`feed` for text without `<` while `inside_plain`: the reasoning to
        send now (trailing whitespace held back as usual)."""
        return self._reasoning(text)

    @property
    def carry_size(self) -> int:
        return len(self._carry) + len(self._held_ws) + len(self._hold)

    def leave_implicit(self) -> None:
        """Native reasoning arrived: an implicit block that has not been shown
        anything becomes visible text again (the response is not tag-based)."""
        if self._fresh_implicit and self._state == _INSIDE:
            self._state = _OUTSIDE
            self._fresh_implicit = False
            self._skip_ws = False

    def feed(self, text: str) -> list[TagEvent]:
        if self._carry:
            text = self._carry + text
            self._carry = ""
        elif "<" not in text and not self._skip_ws:
            if not text:
                return []
            if self._state == _OUTSIDE:
                return [Visible(text)]
            text = self._reasoning(text)
            return [Reasoning(text)] if text else []
        out: list[TagEvent] = []
        pos = scan = 0  # pos: start of text not yet emitted; scan: where to look for "<"
        n = len(text)
        longest = self._tags.longest
        while True:
            lt = text.find("<", scan)
            if lt < 0:
                if pos < n:
                    self._emit(text[pos:], out)
                return out
            window = text[lt : lt + longest].lower()
            match = self._match(window)
            if match is None:
                if lt + len(window) >= n and self._is_prefix(window):
                    if self._state == _OUTSIDE:
                        # `<thi` + `</th`: if that close tag completes and is cut
                        # out, the two join; hold both
                        lt = pos + self._prefix_start(text[pos:lt])
                    if lt > pos:
                        self._emit(text[pos:lt], out)
                    self._carry = text[lt:]
                    return out
                scan = lt + 1
                continue
            is_open, name, length = match
            end = lt + length
            if self._state == _OUTSIDE and not is_open:
                # A stray close tag is cut out; the text around it may now form
                # a tag, so look again from where one could start.
                self.delimiters += 1
                text = text[:lt] + text[end:]
                n = len(text)
                scan = max(pos, lt - longest + 1)
                continue
            if self._state == _OUTSIDE:
                self.delimiters += 1
                self._emit_before_block(text[pos:lt], out)
                self._open(name)
            elif not is_open and self._block in (None, name):
                self.delimiters += 1
                if lt > pos:
                    self._emit(text[pos:lt], out)
                self._close(out)
                if self._hold:
                    # the visible text held before the block joins what follows it
                    text = self._hold + text[end:]
                    self._hold = ""
                    n = len(text)
                    pos = scan = 0
                    continue
            elif is_open and self._fresh_implicit and not text[pos:lt].strip():
                # `<think>` at the start of an implicit block repeats the
                # prompt's open tag: consume it.
                self.delimiters += 1
                self._fresh_implicit = False
                self._block = name
            else:
                # tags do not nest: inside a block any other tag is reasoning text
                self._emit(text[pos:end], out)
            pos = scan = end

    def flush(self) -> list[TagEvent]:
        out: list[TagEvent] = []
        carry, self._carry = self._carry, ""
        if carry:
            self._emit(carry, out)
        self._held_ws = ""  # trailing whitespace at the end of a block is trimmed
        if self._state == _INSIDE:
            self._close(out)
        if self._hold:
            out.append(Visible(self._hold))
            self._hold = ""
        return out

    # -- internals ---------------------------------------------------------

    def _match(self, window: str) -> tuple[bool, str, int] | None:
        """(is_open, name, length) of the tag at the start of `window`."""
        if window[1:2] == "/":
            for delim, name in self._tags.closes:
                if window.startswith(delim):
                    return False, name, len(delim)
        else:
            for delim, name in self._tags.opens:
                if window.startswith(delim):
                    return True, name, len(delim)
        return None

    def _is_prefix(self, window: str) -> bool:
        return any(delim.startswith(window) for delim, _ in self._tags.opens + self._tags.closes)

    def _emit_before_block(self, text: str, out: list[TagEvent]) -> None:
        """Visible text just before an open tag. If it ends in what could be
        the start of a delimiter (`<thi`), that part is held until the block
        ends: the text after the block could complete it, and the answer
        channel must never contain a delimiter, even joined across a block."""
        cut = self._prefix_start(text)
        self._hold = text[cut:]
        if cut:
            self._emit(text[:cut], out)

    def _prefix_start(self, text: str) -> int:
        """Where a trailing possible delimiter start (`<thi`) begins, else len(text)."""
        cut = text.rfind("<")
        if (
            cut >= 0
            and len(text) - cut < self._tags.longest
            and self._is_prefix(text[cut:].lower())
        ):
            return cut
        return len(text)

    def _open(self, name: str) -> None:
        self._state = _INSIDE
        self._block = name
        self._skip_ws = True

    def _close(self, out: list[TagEvent]) -> None:
        self._held_ws = ""
        self._state = _OUTSIDE
        self._block = None
        self._fresh_implicit = False
        self._skip_ws = True
        out.append(REASONING_END)

    def _emit(self, text: str, out: list[TagEvent]) -> None:
        if self._skip_ws:
            stripped = text.lstrip()
            if not stripped:
                return
            self._skip_ws = False
            text = stripped
        if self._state == _OUTSIDE:
            out.append(Visible(text))
            return
        text = self._reasoning(text)
        if not text:
            return
        last = out[-1] if out else None
        if type(last) is Reasoning:
            out[-1] = Reasoning(last.text + text)
        else:
            out.append(Reasoning(text))

    def _reasoning(self, text: str) -> str:
        """Reasoning text, holding back a bounded run of trailing whitespace."""
        self._fresh_implicit = False
        if self._held_ws:
            text = self._held_ws + text
            self._held_ws = ""
        body = text.rstrip()
        tail = len(text) - len(body)
        if tail and tail <= _MAX_HELD_WHITESPACE:
            self._held_ws = text[len(body) :]
            text = body
        return text
