r"""Masking configured route keys in what upstreams send back to clients.

An upstream that refuses a key often quotes it ("Incorrect API key provided:
rk-..."). The key is the operator's, not the client's, so every configured
route key is replaced by `MASK` in the response headers and bodies the proxy
passes on: whole bodies, and streams read by read. A key is matched as
written and in the forms an upstream's encoders write it (`encoded_forms`):
JSON-escaped (`\/`, `\uXXXX`) and percent-encoded (either hex case), which
differ from the key itself when it holds `/`, `+`, `=` or the like (a base64
credential in a route's `Authorization: Basic` header).

Sans-IO: `KeyMask.stream()` gives a `StreamMask` whose `feed(data)` returns
the bytes safe to send now and holds back only a tail that could be the start
of a key (a few bytes at most, and only when the tail looks like one);
`flush()` returns what is held at the end. `KeyMask.deltas()` gives a
`DeltaMask`, the same for the text of a chat-completion stream's deltas: a key
the upstream splits across two deltas is in no one event whole, so it holds a
delta's tail that could begin a key and sends it with that field's next delta,
where the key is whole and masked (the native doors' readers do the same
for their own events with `KeyMask.split_tail`). Nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import quote, quote_plus

import orjson

MASK = "[REDACTED]"
_MASK_BYTES = MASK.encode()
MIN_KEY_CHARS = 8  # shorter "keys" would mask ordinary text


# route headers whose values are credentials (x-api-key, api-key, authorization,
# cookie, ...)
_CREDENTIAL_HEADER = re.compile(r"(?i)(authorization|key|token|secret|password|cookie)")


def credential_values(
    api_keys: Iterable[str],
    headers: Iterable[tuple[str, str]],
    proxies: Iterable[str | None] = (),
) -> list[str]:
    """The values to mask: route keys, the credential-like headers a route adds
    (an `Authorization: Bearer x` header counts as `x`; a `Cookie` header as
    itself and each of its cookies' values, which an upstream may quote alone),
    and the `Proxy-Authorization` values of routes' egress proxies."""
    values = list(api_keys)
    proxied = [("proxy-authorization", p) for p in proxies if p is not None]
    for name, value in [*headers, *proxied]:
        if _CREDENTIAL_HEADER.search(name):
            values += header_credentials(name, value)
    return values


def header_credentials(name: str, value: str) -> list[str]:
    """The credentials one credential header carries: an `Authorization:
    Bearer x` (or `Basic x`) header's `x`, a `Cookie` header whole and each of
    its cookies' values, any other header's value."""
    if "cookie" in name.lower():
        return [value, *(c.partition("=")[2].strip() for c in value.split(";"))]
    scheme, _, rest = value.partition(" ")
    return [rest.strip() if rest and scheme.lower() in ("bearer", "basic") else value]


# characters some JSON encoders escape beyond what JSON requires (Go's
# encoding/json writes <, > and & as \u003c..., PHP's json_encode writes \/)
_HTML_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}
# what encodeURIComponent leaves as it is, beyond quote()'s unreserved set
_URI_COMPONENT_SAFE = "!'()*"
# what encodeURI leaves as it is (a whole URL's reserved characters)
_URI_SAFE = ";/?:@&=+$,#!'()*"


def _lower_hex(text: str) -> str:
    return re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), text)


def encoded_forms(key: str) -> set[str]:
    """`key` and the forms an upstream may quote it in: JSON-escaped (as
    Python, Go, PHP or JavaScript encoders write strings) and percent-encoded
    (as a URL, a query string or a form carries it, with upper- or lower-case
    hex). For a key of letters, digits, `-`, `_`, `.` and `~` (most API keys)
    that is the key alone."""
    json_forms = set()
    for ascii_only in (True, False):
        form = json.dumps(key, ensure_ascii=ascii_only)[1:-1]
        for html in (form, "".join(_HTML_ESCAPES.get(c, c) for c in form)):
            json_forms |= {html, html.replace("/", "\\/")}
    url_forms = {
        quote(key, safe=""),
        quote(key, safe="/"),
        quote(key, safe=_URI_COMPONENT_SAFE),
        quote(key, safe=_URI_SAFE),
        quote_plus(key, safe=""),
    }
    url_forms |= {_lower_hex(form) for form in url_forms}
    return {key} | json_forms | url_forms


class KeyMask:
    """The set of keys to mask; immutable, shared by every request."""

    __slots__ = ("_keys", "_starts", "_tails", "_text_keys")

    def __init__(self, keys: Iterable[str]) -> None:
        # longest first, so a key that contains another is masked whole
        forms = {f for k in keys if len(k) >= MIN_KEY_CHARS for f in encoded_forms(k)}
        text = sorted(forms, key=len, reverse=True)
        self._text_keys = tuple(text)
        self._keys = tuple(k.encode("utf-8") for k in text)
        self._tails = _value_tails(self._keys)
        self._starts = _key_starts(self._keys)

    @classmethod
    def of(cls, keys: Iterable[str]) -> KeyMask | None:
        """A mask, or None when there is nothing to mask (so callers pay nothing)."""
        mask = cls(keys)
        return mask if mask._keys else None

    def text(self, value: str) -> str:
        for key in self._text_keys:
            if key in value:
                value = value.replace(key, MASK)
        return value

    def data(self, value: bytes) -> bytes:
        for key in self._keys:
            if key in value:
                value = value.replace(key, _MASK_BYTES)
        return value

    def json(self, value: Any) -> Any:
        """A JSON value with every string in it masked (dict keys included)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {self.text(k): self.json(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v) for v in value]
        return value

    def headers(self, pairs: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        return [(name, self.text(value)) for name, value in pairs]

    def stream(self) -> StreamMask:
        return StreamMask(self._keys)

    def deltas(self) -> DeltaMask:
        return DeltaMask(self)

    def split_tail(self, text: str) -> tuple[str, str]:
        """`text` masked, cut before its longest tail that could begin a key:
        (what can go now, what must wait for the text that follows it). For
        a stream's text deltas, one field at a time (the native doors')."""
        text = self.text(text)
        cut = _key_start(text, self._text_keys)
        return text[:cut], text[cut:]


class StreamMask:
    """Masks keys in a body that arrives in pieces, also across two pieces."""

    __slots__ = ("_held", "_keys")

    def __init__(self, keys: tuple[bytes, ...]) -> None:
        self._keys = keys
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        if self._held:
            data = self._held + data
            self._held = b""
        for key in self._keys:
            if key in data:
                data = data.replace(key, _MASK_BYTES)
        cut = _key_start(data, self._keys)
        if cut < len(data):
            self._held = data[cut:]
            return data[:cut]
        return data

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held


# the delta fields whose text a client joins (reasoning in its shapes, the answer)
_DELTA_TEXT = ("reasoning_content", "reasoning", "content", "refusal")
# the text of a `reasoning_details` item, by its type (OpenRouter's shape)
_DETAIL_TEXT = {"reasoning.text": "text", "reasoning.summary": "summary"}
_EVENT_END = b"\n\n"


def _key_starts(keys: tuple[bytes, ...]) -> tuple[re.Pattern[bytes], ...]:
    """Per first byte of the keys, where a JSON string value may end with a
    key's start: that byte, then the quote that ends a value (`s",`, `s"}`,
    `s"]`, `s" `: a one-byte start) or a second byte of a key beginning with it (a
    longer start). A plain byte first, so the regex engine skips ahead to it;
    one pattern per first byte, as an alternation of several would not."""
    seconds: dict[bytes, set[bytes]] = {}
    for key in keys:
        seconds.setdefault(key[:1], set()).add(key[1:2])
    return tuple(
        re.compile(
            re.escape(first) + b'(?:"[,}\\] \t]|[' + b"".join(map(re.escape, sorted(more))) + b"])"
        )
        for first, more in sorted(seconds.items())
    )


_NESTED = 48  # bytes of a key the pattern follows one by one; past them, its start alone


def _value_tails(keys: tuple[bytes, ...]) -> re.Pattern[bytes]:
    """Where a JSON string value may end with the start of a key: some key's
    first bytes (as written in JSON: the forms are the key as its encoders
    write it), then a closing quote that no colon follows (a value, not a
    field name). One nested pattern per form, `a(?:b(?:c)?)?"`; a key's first
    `_NESTED` bytes anywhere match too (a longer start of a long key)."""
    forms = []
    for key in keys:
        pattern = b""
        for byte in reversed(key[:_NESTED]):
            pattern = re.escape(bytes([byte])) + (b"(?:" + pattern + b")?" if pattern else b"")
        forms.append(pattern)
    ends = b"(?:" + b"|".join(forms) + b')"(?!\\s*:)'
    long = [re.escape(key[:_NESTED]) for key in keys if len(key) > _NESTED]
    return re.compile(b"|".join([ends, *long]))


class DeltaMask:
    """Masks keys split across the text deltas of a chat-completion stream.

    Each chunk is JSON of its own, so a key the upstream splits across two
    deltas is whole in no event, and `StreamMask` (which reads the bytes)
    cannot see it; a client joining the deltas would. `feed()` takes whole
    SSE events (the normalizer's output) and holds back, per choice, the
    tail of a delta's last text (a text field, or a tool call's arguments)
    that could begin a key; that text's next delta gets it in front, so the
    key is whole there and masked. What is held goes out before anything
    else of its choice: another text or a finish reason comes after it (in
    a chunk of its own, made like the stream's last chunk), and so do
    `[DONE]`, an error event and the end (`flush()`). A chunk with a finish
    reason holds nothing back, nor does text before another in the same
    delta. Events that need no change go out as they came, and without a
    JSON parse when no string value in them ends like a key begins."""

    __slots__ = ("_held", "_last", "_mask", "_rest", "_starts", "_tails")

    def __init__(self, mask: KeyMask) -> None:
        self._mask = mask
        self._tails = mask._tails  # exact, for one event
        self._starts = mask._starts  # quick, for a read: see `_candidate`
        # choice index -> (field, index of its tool call or details item or -1,
        # the text's key there, text)
        self._held: dict[int, tuple[str, int, str, str]] = {}
        self._last: dict[str, Any] | None = None  # the latest chunk, a held text's frame
        self._rest = b""  # an event not yet ended (the normalizer sends none)

    def feed(self, data: bytes) -> bytes:
        if self._rest:
            data, self._rest = self._rest + data, b""
        last = data.rfind(_EVENT_END) + 2
        if last < len(data):  # an event not yet ended waits for its end
            if last < 2:
                self._rest = data
                return b""
            data, self._rest = data[:last], data[last:]
        if not self._held and self._candidate(data, 0) < 0:
            return data  # the usual read: a few scans, no event looked at
        out: list[bytes] = []
        pos = 0
        size = len(data)
        while pos < size:
            if self._held:  # every event, until what is held goes out
                start = pos
            else:  # only the events where a value may end like a key begins
                found = self._candidate(data, pos)
                if found < 0:
                    break
                before = data.rfind(_EVENT_END, pos, found)
                start = before + 2 if before >= 0 else pos
                out.append(data[pos:start])
            end = data.find(_EVENT_END, start)
            self._event(data[start:end], out)
            pos = end + 2
        out.append(data[pos:])
        return b"".join(out)

    def _candidate(self, data: bytes, pos: int) -> int:
        """Where, from `pos` on, a string value may end with a key's start
        (-1: nowhere); one quick scan per first byte of the keys, cheaper over
        a whole read than the exact pattern (`_key_starts`)."""
        best = -1
        for start in self._starts:
            found = start.search(data, pos)
            if found is not None and (best < 0 or found.start() < best):
                best = found.start()
        return best

    def _event(self, block: bytes, out: list[bytes]) -> None:
        """Add one event to `out`, and before it what held text must precede it."""
        if block[:7] == b"data: {" and b"\n" not in block:
            if self._held or self._tails.search(block, block.find(b'"choices"')) is not None:
                new = self._chunk(block[6:], out)
                if new is not None:
                    out.append(new)
                    return
        elif block[:1] != b":" and self._held:  # [DONE], an error event: held text first
            out.append(self._release())
        out += (block, _EVENT_END)

    def flush(self) -> bytes:
        rest, self._rest = self._rest, b""
        return self._release() + rest

    def _chunk(self, payload: bytes, out: list[bytes]) -> bytes | None:
        """The event for a chunk when it changed (None: as it came); a held
        text that goes before it is added to `out`."""
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            obj = None
        if type(obj) is not dict:
            return None
        choices = obj.get("choices")
        if type(choices) is not list or not choices:
            if self._held:  # the usage chunk: what was held comes before it
                out.append(self._release())
            return None
        self._last = obj
        edited = False
        for choice in choices:
            if type(choice) is not dict:
                continue
            index = choice.get("index", 0)
            index = index if type(index) is int else 0
            delta = choice.get("delta")
            slots = _text_slots(delta) if type(delta) is dict else []
            held = self._held.pop(index, None)
            if held is not None:
                field, tool, name, text = held
                for place, key, at_field, at_tool in slots:
                    if (at_field, at_tool, key) == (field, tool, name):
                        place[key] = self._mask.text(text + place[key])
                        edited = True
                        break
                else:  # another text comes first: the held text goes before it
                    out.append(self._frame(index, *held))
            if not slots or choice.get("finish_reason") is not None:
                continue  # nothing held back: no more of this text follows
            if type(delta) is dict and "function_call" in delta:
                continue
            place, key, field, tool = slots[-1]  # only the delta's last text can go on
            now, tail = self._mask.split_tail(place[key])
            if tail:
                self._held[index] = (field, tool, key, tail)
            if tail or now != place[key]:
                place[key] = now
                edited = True
        return b"data: " + orjson.dumps(obj) + _EVENT_END if edited else None

    def _release(self) -> bytes:
        """Everything held, each as a chunk of its own."""
        held, self._held = self._held, {}
        return b"".join(self._frame(index, *place) for index, place in held.items())

    def _frame(self, index: int, field: str, tool: int, key: str, text: str) -> bytes:
        """A chunk carrying `text` in `field` of choice `index` (in the
        arguments of tool call `tool`, or in item `tool` of the reasoning
        details), framed like the latest chunk (its id, model, created)."""
        last = self._last or {"object": "chat.completion.chunk"}
        chunk = {k: v for k, v in last.items() if k != "choices" and k != "usage"}
        delta: dict[str, Any] = {field: text}
        if field == "tool_calls":
            delta[field] = [{"index": tool, "function": {"arguments": text}}]
        elif field == "reasoning_details":
            kind = "reasoning.text" if key == "text" else "reasoning.summary"
            delta[field] = [{"type": kind, key: text, "index": tool}]
        chunk["choices"] = [{"index": index, "delta": delta, "finish_reason": None}]
        return b"data: " + orjson.dumps(chunk) + _EVENT_END


def _text_slots(delta: dict[str, Any]) -> list[tuple[dict[str, Any], str, str, int]]:
    """The texts of a delta a client joins with the same texts of later
    deltas, in order: (the dict holding it, its key there, the field, the
    index of the tool call or `reasoning_details` item, else -1). The
    reasoning items' texts first, then the text fields, then each tool
    call's arguments."""
    slots: list[tuple[dict[str, Any], str, str, int]] = []
    details = delta.get("reasoning_details")
    if type(details) is list:
        for item in details:
            kind = item.get("type") if type(item) is dict else None
            key = _DETAIL_TEXT.get(kind) if type(kind) is str else None
            if key is not None and type(item.get(key)) is str and type(item.get("index")) is int:
                slots.append((item, key, "reasoning_details", item["index"]))
    slots += [(delta, name, name, -1) for name in _DELTA_TEXT if type(delta.get(name)) is str]
    calls = delta.get("tool_calls")
    if type(calls) is list:
        for call in calls:
            function = call.get("function") if type(call) is dict else None
            tool = call.get("index") if type(call) is dict else None
            if (
                type(function) is dict
                and type(tool) is int
                and type(function.get("arguments")) is str
            ):
                slots.append((function, "arguments", "tool_calls", tool))
    return slots


def _key_start(text: Any, keys: Sequence[Any]) -> int:
    """Where the longest tail of `text` that begins some key starts
    (len(text) when no tail does); str or bytes, keys of the same type (not
    spelled `AnyStr`: mypyc compiles a value-restricted type variable as
    their union, and refuses the calls)."""
    size = len(text)
    cut = size
    for key in keys:
        first = key[:1]
        at = text.find(first, max(0, size - len(key) + 1))
        while 0 <= at < cut:
            if key.startswith(text[at:]):
                cut = at
                break
            at = text.find(first, at + 1)
    return cut
