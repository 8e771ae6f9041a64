"""Recognize the repeated shape of a stream's chunks without parsing them (pure).

A streaming upstream sends the same chunk again and again with only the delta
text changed: `{"id":"x",...,"delta":{"reasoning_content":"TEXT"},...}`. Once
one chunk of a stream has been parsed, `learn` records its bytes around that
text (a `Shape`); `Shape.text` then reads the text of a later chunk with two
byte comparisons, a scan and a decode, where a full JSON parse builds a dozen
objects.

Soundness: a chunk matches only when it starts with the shape's prefix (which
ends with the string's opening quote), ends with its suffix (which starts with
the closing quote) and what lies between is one valid JSON string body. Such
a chunk is the learned chunk with that one string changed. `learn` proves the
location by substitution: the learned bytes with another string put there
must parse to the learned object with only that field changed. Anything that
does not match exactly goes the general way, so a wrong guess costs time,
never correctness.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import Any

import orjson

from proxy.reasoning.blocks import Json, index_key

# bytes that end the fast decode: a quote, a backslash (an escape, decoded by
# orjson) or a control character (invalid raw in JSON; orjson rejects it).
# Deleting them and comparing lengths is the cheapest test measured.
_SPECIAL = bytes(range(32)) + b'"\\'
_FIELDS = ("content", "reasoning_content")
_KEYS = frozenset({"role", "content", "reasoning_content", "refusal"})  # as ChoiceSeparator.quick
_PROBE = "\x00probe"


class Shape:
    """The bytes of one chunk around its delta's text, and what it means."""

    __slots__ = (
        "_moved",
        "delta",
        "field",
        "head",
        "index",
        "min_len",
        "prefix",
        "skip",
        "suffix",
        "suffix_len",
        "tail",
    )

    def __init__(
        self,
        prefix: bytes,
        suffix: bytes,
        field: str,
        delta: Json,
        index: Any,
        head: bytes | None,
        tail: bytes,
    ) -> None:
        self.prefix = prefix
        self.suffix = suffix
        self.skip = len(prefix)
        self.suffix_len = len(suffix)
        self.min_len = len(prefix) + len(suffix)
        self.field = field
        self.delta = delta  # the learned delta, in the upstream's key order
        self.index = index
        # the chunk's bytes before and after its delta object, to re-encode a
        # changed delta without the rest (None: not found, re-encode it all)
        self.head = head
        self.tail = tail
        self._moved: tuple[bytes, bytes, bytes] | None = None

    def text(self, data: bytes) -> str | None:
        """The delta text of a chunk of this shape; None for any other chunk."""
        if len(data) < self.min_len or not data.startswith(self.prefix):
            return None
        if not data.endswith(self.suffix):
            return None
        return _decode(data[self.skip : len(data) - self.suffix_len])

    def bodies(self, events: Sequence[object], start: int) -> list[bytes]:
        """The string bodies of the events from `start` on that are chunks of
        this shape by their bytes, up to the first that is not (the bodies
        are not checked yet)."""
        prefix, suffix, skip, cut, min_len = (
            self.prefix,
            self.suffix,
            self.skip,
            self.suffix_len,
            self.min_len,
        )
        bodies = []
        for ev in islice(events, start, None):
            if (
                type(ev) is not bytes
                or len(ev) < min_len
                or not ev.startswith(prefix)
                or not ev.endswith(suffix)
            ):
                break
            bodies.append(ev[skip : len(ev) - cut])
        return bodies

    def run(self, events: Sequence[object], start: int) -> tuple[int, str]:
        """How many events from `start` on are chunks of this shape, and
        their texts joined: the bodies are checked and decoded together (one
        pass for the common run of plain ASCII)."""
        bodies = self.bodies(events, start)
        joined = b"".join(bodies)
        if joined.isascii() and len(joined.translate(None, _SPECIAL)) == len(joined):
            return len(bodies), joined.decode("ascii")
        texts = []
        for body in bodies:  # escapes or non-ASCII: each body on its own
            text = _decode(body)
            if text is None:
                break
            texts.append(text)
        return len(texts), "".join(texts)

    def pieces(
        self, events: Sequence[object], start: int, mark: str = "<"
    ) -> list[tuple[bytes, bytes, str]]:
        """The events from `start` on that are chunks of this shape and whose
        text has no `mark` (where a delimiter could start), each with its
        string body and text, up to the first that is not."""
        # The scan of `bodies`, but stopping at the first text with `<`: the
        # event there goes on its own, and a scan past it would be repeated
        # from the next event on (the loop is not shared for that reason).
        prefix, suffix, skip, cut, min_len = (
            self.prefix,
            self.suffix,
            self.skip,
            self.suffix_len,
            self.min_len,
        )
        out = []
        for ev in islice(events, start, None):
            if (
                type(ev) is not bytes
                or len(ev) < min_len
                or not ev.startswith(prefix)
                or not ev.endswith(suffix)
            ):
                break
            body = ev[skip : len(ev) - cut]
            text = _decode(body)
            if text is None or mark in text:
                break
            out.append((ev, body, text))
        return out

    def moved(self) -> tuple[bytes, bytes, bytes]:
        """The event bytes of this shape with its text moved to reasoning, as
        the quick path writes it (`content` emptied, `reasoning_content` set):
        the bytes before and after that reasoning's string body, and the
        whole event for when no reasoning is sent (all held back)."""
        if self._moved is None:
            assert self.head is not None
            delta = self.delta.copy()
            delta[self.field] = ""
            emptied = b"data: " + self.head + orjson.dumps(delta) + self.tail + b"\n\n"
            delta["reasoning_content"] = _PROBE
            before, after = orjson.dumps(delta).split(orjson.dumps(_PROBE)[1:-1])
            self._moved = (
                b"data: " + self.head + before,
                after + self.tail + b"\n\n",
                emptied,
            )
        return self._moved

    def with_text(self, text: str) -> Json:
        """A fresh delta of this shape carrying `text`."""
        delta = self.delta.copy()
        delta[self.field] = text
        return delta


def _decode(body: bytes) -> str | None:
    """The text of a JSON string body (the bytes between its quotes); None
    when the bytes are not exactly one string body."""
    if len(body.translate(None, _SPECIAL)) == len(body):
        try:
            return body.decode()
        except UnicodeDecodeError:
            return None
    try:
        text = orjson.loads(b'"' + body + b'"')
    except orjson.JSONDecodeError:  # an unescaped quote in it: another shape
        return None
    return text if type(text) is str else None


def learn(data: bytes, obj: Json) -> Shape | None:
    """The shape of one chunk (`data` its bytes, `obj` what they parse to),
    when it is a one-choice chunk whose delta is one non-empty string field
    (`content` or `reasoning_content`) and other fields that are null, all
    of them fields the normalizer's quick path takes."""
    choices = obj.get("choices")
    if type(choices) is not list or len(choices) != 1 or "usage" in obj or "error" in obj:
        return None
    choice = choices[0]
    if type(choice) is not dict or choice.get("finish_reason") is not None:
        return None
    delta = choice.get("delta")
    if type(delta) is not dict:
        return None
    field = None
    for key, value in delta.items():
        if key not in _KEYS:  # a key the quick path does not know: parse these
            return None
        if key in _FIELDS and type(value) is str and value and field is None:
            field = key
        elif value is not None:
            return None
    if field is None:
        return None
    text = delta[field]
    where = _locate(data, b'"' + field.encode() + b'":', orjson.dumps(text))
    if where is None:
        return None
    start, end = where
    prefix, suffix = data[: start + 1], data[end - 1 :]
    if not _proves(obj, delta, field, text, prefix + orjson.dumps(_PROBE)[1:-1] + suffix):
        return None
    head, tail = _delta_span(data, obj, choice, delta, prefix, suffix)
    index = index_key(choice.get("index", 0))
    return Shape(prefix, suffix, field, dict(delta), index, head, tail)


def _locate(data: bytes, key: bytes, encoded: bytes) -> tuple[int, int] | None:
    """Where the one occurrence of `key` followed by the string `encoded`
    (with or without a space after the colon) is: the string's span."""
    for sep in (b"", b" "):
        needle = key + sep + encoded
        at = data.find(needle)
        if at >= 0 and data.find(needle, at + 1) < 0:
            start = at + len(key) + len(sep)
            return start, start + len(encoded)
    return None


def _proves(obj: Json, delta: Json, field: str, text: str, probe: bytes) -> bool:
    """Does `probe` parse to `obj` with only delta[field] set to the probe text?"""
    try:
        parsed = orjson.loads(probe)
    except orjson.JSONDecodeError:
        return False
    delta[field] = _PROBE
    try:
        return bool(parsed == obj)
    finally:
        delta[field] = text


def _delta_span(
    data: bytes, obj: Json, choice: Json, delta: Json, prefix: bytes, suffix: bytes
) -> tuple[bytes | None, bytes]:
    """The bytes before and after the delta object, proven like the text."""
    encoded = orjson.dumps(delta)
    at = data.find(encoded)
    if at < 0 or data.find(encoded, at + 1) >= 0:
        return None, b""
    head, tail = data[:at], data[at + len(encoded) :]
    if not (prefix.startswith(head) and suffix.endswith(tail)):
        return None, b""
    probe: Json = {"content": "", "reasoning_content": _PROBE}
    try:
        parsed = orjson.loads(head + orjson.dumps(probe) + tail)
    except orjson.JSONDecodeError:
        return None, b""
    choice["delta"] = probe
    try:
        same = bool(parsed == obj)
    finally:
        choice["delta"] = delta
    return (head, tail) if same else (None, b"")
