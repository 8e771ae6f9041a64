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
`flush()` returns what is held at the end. Nothing here does I/O.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

MASK = "[REDACTED]"
_MASK_BYTES = MASK.encode()
MIN_KEY_CHARS = 8  # shorter "keys" would mask ordinary text


# route headers whose values are credentials (x-api-key, api-key, authorization, ...)
_CREDENTIAL_HEADER = re.compile(r"(?i)(authorization|key|token|secret|password)")


def credential_values(api_keys: Iterable[str], headers: Iterable[tuple[str, str]]) -> list[str]:
    """The values to mask: route keys, and the credential-like headers a route adds
    (an `Authorization: Bearer x` header counts as `x`)."""
    values = list(api_keys)
    for name, value in headers:
        if _CREDENTIAL_HEADER.search(name):
            scheme, _, rest = value.partition(" ")
            values.append(rest.strip() if rest and scheme.lower() in ("bearer", "basic") else value)
    return values


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

    __slots__ = ("_keys", "_text_keys")

    def __init__(self, keys: Iterable[str]) -> None:
        # longest first, so a key that contains another is masked whole
        forms = {f for k in keys if len(k) >= MIN_KEY_CHARS for f in encoded_forms(k)}
        text = sorted(forms, key=len, reverse=True)
        self._text_keys = tuple(text)
        self._keys = tuple(k.encode("utf-8") for k in text)

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
        cut = self._partial_at(data)
        if cut < len(data):
            self._held = data[cut:]
            return data[:cut]
        return data

    def flush(self) -> bytes:
        held, self._held = self._held, b""
        return held

    def _partial_at(self, data: bytes) -> int:
        """Where the longest tail of `data` that begins some key starts
        (len(data) when no tail does)."""
        size = len(data)
        cut = size
        for key in self._keys:
            first = key[:1]
            at = data.find(first, max(0, size - len(key) + 1))
            while 0 <= at < cut:
                if key.startswith(data[at:]):
                    cut = at
                    break
                at = data.find(first, at + 1)
        return cut
