"""Split text with inline reasoning delimiters into visible and reasoning parts (sans-IO).

A `TagSet` is the route's delimiters, as data: `<name>`/`</name>` tags,
open/close pairs that are not tags (`[THINK]`/`[/THINK]`, `◁think▷`/`◁/think▷`),
built-in presets (`harmony`, for gpt-oss served raw), answer wrappers that
are removed (`<answer>`, `<response>`) and tool-call markers that end an
unclosed block. Every delimiter has one kind:

- OPEN starts a block of its pair; CLOSE ends a block of a pair it belongs
  to (several pairs may share one);
- DROP is removed from the visible text (answer wrappers, stray markers);
- END (a tool-call marker) ends a block and stays in the visible text, with
  everything after it.

Theory of operation. The splitter is in one of two states:

- OUTSIDE: text is visible. An OPEN enters INSIDE. A CLOSE here is stray:
  with `implicit_open` and no block seen yet it could not be (the splitter
  starts INSIDE then); otherwise it is removed like a DROP and the text
  around it stays visible. An END is text.
- INSIDE(pair): text is reasoning. A CLOSE of the same pair ends the block
  (`pair is None` in implicit mode: any CLOSE), and so does an END. Blocks do
  not nest: any other delimiter inside is reasoning text.

With `only_at_start`, OPEN and CLOSE count only until the answer begins (the
first visible character that is not whitespace); from then on the splitter
uses the set's `after_start` (its DROPs alone), so an answer that writes
`<think>` in code stays whole.

What is held back between calls is only a possible delimiter prefix (`<`,
`</thi`, at most the longest delimiter) and, inside a block, a short run of
trailing whitespace that would be trimmed if the close follows. Whitespace
just inside the delimiters is dropped, and so is whitespace after a block
that leads the answer (templates write `</think>\n\n` before it); after
answer text, the whitespace that follows a block is the answer's. Until the
answer's first visible character that is not whitespace the splitter is
not `plain`, so the callers' fast paths, which pass plain text without it,
never pass that character unseen. Delimiters match case-insensitively;
where one delimiter is the start of a longer one (`<|channel|>`,
`<|channel|>final<|message|>`), the longer wins, and a read that ends
inside the longer one waits for more.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

DEFAULT_TAGS: tuple[str, ...] = ("think", "thinking", "reasoning")

# Trailing whitespace inside a block is held back (it is trimmed if the close
# tag follows); past this many characters it is released to keep the carry small.
_MAX_HELD_WHITESPACE = 64
_MAX_DELIMITER = 64  # characters of one configured delimiter, at most

OPEN, CLOSE, DROP, END = 0, 1, 2, 3


# Not frozen, for speed (see sse.py); treat them as values. (`__init__`
# written out, as proxy/reasoning/blocks.py says why.)
@dataclass(slots=True, init=False)
class Visible:
    text: str

    def __init__(self, text: str) -> None:
        self.text = text


@dataclass(slots=True, init=False)
class Reasoning:
    text: str

    def __init__(self, text: str) -> None:
        self.text = text


@dataclass(frozen=True, slots=True)
class ReasoningEnd:
    """A reasoning block was closed by its tag (or the text ended inside it)."""


TagEvent = Visible | Reasoning | ReasoningEnd
REASONING_END = ReasoningEnd()


@dataclass(frozen=True, slots=True)
class Preset:
    """Delimiters of a wire format that is not a simple pair."""

    pairs: tuple[tuple[str, tuple[str, ...]], ...]
    drops: tuple[str, ...] = ()


# gpt-oss served raw (OpenAI harmony): the analysis channel is the reasoning;
# it ends at `<|end|>`, or where the next message starts when a server drops
# `<|end|>` (llama.cpp); every other marker is removed from the answer.
PRESETS: dict[str, Preset] = {
    "harmony": Preset(
        pairs=(
            (
                "<|channel|>analysis<|message|>",
                ("<|end|>", "<|start|>assistant", "<|channel|>final<|message|>"),
            ),
        ),
        drops=(
            "<|start|>",
            "<|channel|>",
            "<|message|>",
            "<|constrain|>",
            "<|return|>",
            "<|call|>",
        ),
    ),
    "magistral": Preset(pairs=(("[THINK]", ("[/THINK]",)),)),
    "kimi_vl": Preset(pairs=(("◁think▷", ("◁/think▷",)),)),
}

Entry = tuple[str, int, frozenset[int]]  # (delimiter, kind, pairs it opens or closes)


@dataclass(frozen=True, slots=True)
class TagSet:
    """The configured delimiters, lower-cased, in a table longest first."""

    names: tuple[str, ...]  # `<name>` tags
    pairs: tuple[tuple[str, str], ...]  # other open/close pairs, as configured
    presets: tuple[str, ...]
    answer_tags: tuple[str, ...]
    tool_call_markers: tuple[str, ...]
    only_at_start: bool
    table: tuple[Entry, ...]
    longest: int
    # the one character every delimiter starts with (found with str.find);
    # None when they start with several (found with `starts`)
    mark: str | None
    starts: re.Pattern[str]
    extends: frozenset[str]  # delimiters that are the start of a longer one
    after_start: TagSet | None  # with only_at_start: what counts once the answer began

    @classmethod
    def of(
        cls,
        names: Iterable[str] = DEFAULT_TAGS,
        *,
        pairs: Iterable[tuple[str, str]] = (),
        presets: Iterable[str] = (),
        answer_tags: Iterable[str] = (),
        tool_call_markers: Iterable[str] = (),
        only_at_start: bool = False,
    ) -> TagSet:
        """Raises ValueError naming what is wrong."""
        clean = tuple(dict.fromkeys(_name(n) for n in names))
        answers = tuple(dict.fromkeys(_name(n) for n in answer_tags))
        other = tuple((str(o), str(c)) for o, c in pairs)
        known = tuple(dict.fromkeys(presets))
        markers = tuple(dict.fromkeys(_delimiter(m, "tool-call marker") for m in tool_call_markers))
        all_pairs: list[tuple[str, tuple[str, ...]]] = [(f"<{n}>", (f"</{n}>",)) for n in clean]
        for open_, close in other:
            open_, close = _delimiter(open_, "open"), _delimiter(close, "close")
            if open_.lower() == close.lower():
                raise ValueError(f"a reasoning pair's open and close must differ: {open_!r}")
            all_pairs.append((open_, (close,)))
        drops: list[str] = [d for n in answers for d in (f"<{n}>", f"</{n}>")]
        for name in known:
            preset = PRESETS.get(name)
            if preset is None:
                raise ValueError(f"unknown tag preset {name!r} (known: {', '.join(PRESETS)})")
            all_pairs += preset.pairs
            drops += preset.drops
        roles: dict[str, tuple[int, set[int]]] = {}

        def add(delim: str, kind: int, pair: int) -> None:
            key = delim.lower()
            role = roles.setdefault(key, (kind, set()))
            if role[0] != kind or (kind == OPEN and role[1]):
                raise ValueError(f"the delimiter {delim!r} is given two roles")
            role[1].add(pair)

        for index, (open_, closes) in enumerate(all_pairs):
            add(open_, OPEN, index)
            for close in closes:
                add(close, CLOSE, index)
        for delim in drops:
            if roles.get(delim.lower(), (DROP,))[0] != DROP:
                raise ValueError(f"the delimiter {delim!r} is given two roles")
            roles[delim.lower()] = (DROP, set())
        for marker in markers:
            add(marker, END, -1)
        table = tuple(
            sorted(
                ((d, kind, frozenset(p)) for d, (kind, p) in roles.items()),
                key=lambda e: -len(e[0]),
            )
        )
        after = None
        if only_at_start:
            after = cls._build(clean, other, known, answers, markers, False, _only_drops(table))
        return cls._build(clean, other, known, answers, markers, only_at_start, table, after)

    @classmethod
    def _build(
        cls,
        names: tuple[str, ...],
        pairs: tuple[tuple[str, str], ...],
        presets: tuple[str, ...],
        answers: tuple[str, ...],
        markers: tuple[str, ...],
        only_at_start: bool,
        table: tuple[Entry, ...],
        after: TagSet | None = None,
    ) -> TagSet:
        firsts = sorted({c for d, _, _ in table for c in (d[0], d[0].upper())})
        delims = [d for d, _, _ in table]
        return cls(
            names=names,
            pairs=pairs,
            presets=presets,
            answer_tags=answers,
            tool_call_markers=markers,
            only_at_start=only_at_start,
            table=table,
            longest=max((len(d) for d in delims), default=1),
            mark=firsts[0] if len(firsts) == 1 else ("<" if not firsts else None),
            starts=re.compile("[" + re.escape("".join(firsts) or "<") + "]"),
            extends=frozenset(d for d in delims if any(o != d and o.startswith(d) for o in delims)),
            after_start=after,
        )

    def delimiters(self) -> tuple[str, ...]:
        """What never reaches the answer: every delimiter but the tool-call
        markers (with `only_at_start`, the reasoning ones only before the
        answer begins)."""
        return tuple(d for d, kind, _ in self.table if kind != END)

    def describe(self) -> list[object]:
        """The `tags` entries as the config writes them."""
        out: list[object] = list(self.names)
        out += [{"open": o, "close": c} for o, c in self.pairs]
        out += [{"preset": p} for p in self.presets]
        return out

    def with_pair(self, name: str) -> TagSet:
        """This set with the `<name>` tag added (the history reader's set;
        on a route without delimiters, it counts only at the start)."""
        if name in self.names:
            return self
        return _with_pair(self, name)


@functools.lru_cache(maxsize=64)
def _with_pair(tags: TagSet, name: str) -> TagSet:
    return TagSet.of(
        (*tags.names, name),
        pairs=tags.pairs,
        presets=tags.presets,
        answer_tags=tags.answer_tags,
        tool_call_markers=tags.tool_call_markers,
        only_at_start=tags.only_at_start or not tags.table,
    )


def _name(name: str) -> str:
    clean = str(name).strip().lower()
    if not clean or not all(c.isalnum() or c in "_-:." for c in clean):
        raise ValueError(f"invalid reasoning tag name: {name!r}")
    return clean


def _delimiter(text: str, what: str) -> str:
    if not text.strip():
        raise ValueError(f"a reasoning {what} delimiter must not be empty")
    if len(text) > _MAX_DELIMITER:
        raise ValueError(f"a reasoning {what} delimiter is longer than {_MAX_DELIMITER} characters")
    return text


def _only_drops(table: tuple[Entry, ...]) -> tuple[Entry, ...]:
    return tuple(e for e in table if e[1] == DROP)


DEFAULT_TAG_SET = TagSet.of(DEFAULT_TAGS)

_OUTSIDE = 0
_INSIDE = 1
_ANY: frozenset[int] = frozenset()  # the implicit block: any close ends it


class TagSplitter:
    """`feed(text) -> list[TagEvent]`, `flush() -> list[TagEvent]`."""

    __slots__ = (
        "_answered",
        "_block",
        "_carry",
        "_fresh_implicit",
        "_held_ws",
        "_hold",
        "_skip_ws",
        "_state",
        "_tags",
        "_watch",
        "delimiters",
        "tail_ws",
    )

    def __init__(self, tags: TagSet = DEFAULT_TAG_SET, *, implicit_open: bool = False) -> None:
        self._tags = tags
        self._carry = ""
        self._held_ws = ""
        self._hold = ""  # visible text held across a block (see _emit_before_block)
        self._block: int | None = None  # the pair of the open block (-1: implicit)
        self._state = _INSIDE if implicit_open else _OUTSIDE
        # In implicit mode, a leading explicit open tag is consumed, not reasoning.
        self._fresh_implicit = implicit_open
        self._skip_ws = implicit_open
        # only_at_start: watching for the first visible character of the answer
        self._watch = tags.only_at_start
        self._answered = False  # a visible character that is not whitespace went out
        # the last visible character out was whitespace; callers that pass
        # plain text by (`plain`) keep it current: after a block in the
        # middle of the answer, whitespace goes only when none came before
        # it (`Intro.\n\n<think>..</think>\n\nOutro.`: one blank line)
        self.tail_ws = False
        if implicit_open:
            self._block = -1
        self.delimiters = 0  # delimiters removed from the text so far (for metrics)

    @property
    def plain(self) -> bool:
        """Outside any block with nothing held: text without a delimiter
        start passes as is."""
        return self._state == _OUTSIDE and not self._carry and not self._skip_ws and self._answered

    @property
    def inside_plain(self) -> bool:
        """Inside a block with nothing held but trailing whitespace: text
        without a delimiter start is all reasoning (see `reasoning_text`)."""
        return self._state == _INSIDE and not self._carry and not self._skip_ws

    def reasoning_text(self, text: str) -> str:
        """`feed` for text without a delimiter start while `inside_plain`:
        the reasoning to send now (trailing whitespace held back as usual)."""
        return self._reasoning(text)

    @property
    def carry_size(self) -> int:
        return len(self._carry) + len(self._held_ws) + len(self._hold)

    def leave_implicit(self) -> None:
        """Native reasoning arrived: an implicit block that has not been shown
        anything becomes visible text again (the response is not tag-based)."""
        if self._fresh_implicit and self._state == _INSIDE:
            self._state = _OUTSIDE
            self._block = None
            self._fresh_implicit = False
            self._skip_ws = False

    def feed(self, text: str) -> list[TagEvent]:
        if self._carry:
            text = self._carry + text
            self._carry = ""
        else:
            mark = self._tags.mark
            if (
                (mark not in text) if mark is not None else (self._tags.starts.search(text) is None)
            ) and not self._skip_ws:
                if not text:
                    return []
                if self._state == _OUTSIDE:
                    if not self._answered and not text.isspace():
                        self._begin()
                    self.tail_ws = text[-1].isspace()
                    return [Visible(text)]
                text = self._reasoning(text)
                return [Reasoning(text)] if text else []
        return self._scan(text, False)

    def flush(self) -> list[TagEvent]:
        out: list[TagEvent] = []
        carry, self._carry = self._carry, ""
        if carry:
            out = self._scan(carry, True)
        self._held_ws = ""  # trailing whitespace at the end of a block is trimmed
        if self._state == _INSIDE:
            self._close(out)
        if self._hold:
            out.append(Visible(self._hold))
            self._hold = ""
        return out

    def release(self) -> list[TagEvent]:
        """The answer text ends here (a tool call follows it): outside a
        block, a possible delimiter start held at its end (`<`, `<thi`) is
        answer text, sent now rather than after the call. Inside a block
        nothing changes: the block goes on after the call."""
        if self._state != _OUTSIDE or not self._carry:
            return []
        carry, self._carry = self._carry, ""
        return self._scan(carry, True)

    # -- internals ---------------------------------------------------------

    def _scan(self, text: str, final: bool) -> list[TagEvent]:
        """Split `text`; unless `final`, a possible delimiter start at its
        end is kept in the carry for the next call."""
        out: list[TagEvent] = []
        pos = scan = 0  # pos: start of text not yet emitted; scan: where to look next
        n = len(text)
        tags = self._tags
        while True:
            if tags.mark is not None:
                lt = text.find(tags.mark, scan)
            else:
                found = tags.starts.search(text, scan)
                lt = found.start() if found is not None else -1
            if lt < 0:
                if pos < n:
                    self._emit(text[pos:], out)
                return out
            window = text[lt : lt + tags.longest].lower()
            match = self._match(window)
            truncated = lt + len(window) >= n and len(window) < tags.longest
            if not final and truncated and self._may_grow(window, match):
                if self._state == _OUTSIDE:
                    # `<thi` + `</th`: if that close tag completes and is cut
                    # out, the two join; hold both
                    lt = pos + self._prefix_start(text[pos:lt])
                if lt > pos:
                    self._emit(text[pos:lt], out)
                self._carry = text[lt:]
                return out
            if match is None:
                scan = lt + 1
                continue
            kind, pairs, length = match
            end = lt + length
            if self._state == _OUTSIDE:
                if kind == END:
                    scan = lt + 1
                    continue
                if kind != DROP and self._watch and not text[pos:lt].isspace() and lt > pos:
                    # the answer began before this delimiter: from here on
                    # only the after-start set counts
                    self._emit(text[pos:lt], out)
                    pos = scan = lt
                    tags = self._tags
                    continue
                if kind != OPEN:
                    # A stray close or a dropped marker is cut out; the text
                    # around it may now form a delimiter, so look again from
                    # where one could start.
                    self.delimiters += 1
                    text = text[:lt] + text[end:]
                    n = len(text)
                    scan = max(pos, lt - tags.longest + 1)
                    continue
                self.delimiters += 1
                self._emit_before_block(text[pos:lt], out)
                self._open(pairs)
                pos = scan = end
                continue
            if (kind == CLOSE and (self._block == -1 or self._block in pairs)) or kind == END:
                if lt > pos:
                    self._emit(text[pos:lt], out)
                self._close(out)
                if kind == CLOSE:
                    self.delimiters += 1
                else:
                    end = lt  # a tool-call marker stays, as answer text
                if self._hold:
                    # the visible text held before the block joins what follows it
                    text = self._hold + text[end:]
                    self._hold = ""
                    n = len(text)
                    pos = scan = 0
                    continue
                pos = end
                scan = end if kind == CLOSE else end + length
                continue
            if kind == OPEN and self._fresh_implicit and not text[pos:lt].strip():
                # `<think>` at the start of an implicit block repeats the
                # prompt's open tag: consume it.
                self.delimiters += 1
                self._fresh_implicit = False
                self._block = next(iter(pairs))
            else:
                # blocks do not nest: inside a block any other delimiter is text
                self._emit(text[pos:end], out)
            pos = scan = end

    def _match(self, window: str) -> tuple[int, frozenset[int], int] | None:
        """(kind, pairs, length) of the delimiter at the start of `window`."""
        for delim, kind, pairs in self._tags.table:
            if window.startswith(delim):
                return kind, pairs, len(delim)
        return None

    def _may_grow(self, window: str, match: tuple[int, frozenset[int], int] | None) -> bool:
        """Could more text make `window` (cut short by the end of the text) a
        delimiter, or a longer one than it matches now?"""
        if match is None:
            return self._is_prefix(window)
        matched = window[: match[2]]
        if matched not in self._tags.extends:
            return False
        return any(len(d) > len(window) and d.startswith(window) for d, _, _ in self._tags.table)

    def _is_prefix(self, window: str) -> bool:
        return any(delim.startswith(window) for delim, _, _ in self._tags.table)

    def _begin(self) -> None:
        """The answer began; with only_at_start, reasoning delimiters no
        longer count."""
        self._answered = True
        if self._watch:
            self._watch = False
            after = self._tags.after_start
            assert after is not None
            self._tags = after

    def _emit_before_block(self, text: str, out: list[TagEvent]) -> None:
        """Visible text just before an open tag. If it ends in what could be
        the start of a delimiter (`<thi`), that part is held until the block
        ends: the text after the block could complete it, and the answer
        channel must never contain a delimiter, even joined across a block."""
        cut = self._prefix_start(text)
        self._hold = text[cut:]
        if cut:
            self._emit(text[:cut], out)
        if self._hold:
            self.tail_ws = False  # the held text goes on after the block

    def _prefix_start(self, text: str) -> int:
        """Where the earliest trailing possible delimiter start (`<thi`)
        begins, else len(text)."""
        n = len(text)
        starts = self._tags.starts
        at = max(0, n - self._tags.longest + 1)
        while True:
            found = starts.search(text, at)
            if found is None:
                return n
            at = found.start()
            if self._is_prefix(text[at:].lower()):
                return at
            at += 1

    def _open(self, pairs: frozenset[int]) -> None:
        self._state = _INSIDE
        self._block = next(iter(pairs))
        self._skip_ws = True

    def _close(self, out: list[TagEvent]) -> None:
        self._held_ws = ""
        self._state = _OUTSIDE
        self._block = None
        self._fresh_implicit = False
        # a block that leads the answer, or one after whitespace
        self._skip_ws = not self._answered or self.tail_ws
        out.append(REASONING_END)

    def _emit(self, text: str, out: list[TagEvent]) -> None:
        if self._skip_ws:
            stripped = text.lstrip()
            if not stripped:
                return
            self._skip_ws = False
            text = stripped
        if self._state == _OUTSIDE:
            if not self._answered and not text.isspace():
                self._begin()
            self.tail_ws = text[-1].isspace()
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
