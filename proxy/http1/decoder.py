"""Content-Encoding gzip and deflate, decoded in bounded pieces (sans-IO)."""

from __future__ import annotations

import zlib
from typing import Any

from proxy.http1.errors import Truncated

DECODE_LIMIT = 256 * 1024  # decoded bytes one decode() returns at most


def decoder_for(encoding: str | None) -> Decoder | None:
    """The decoder of a Content-Encoding value; None for none, or for one
    this client does not decode (the body is passed on as it came)."""
    if encoding is None:
        return None
    encoding = encoding.strip().lower()
    if encoding in ("gzip", "x-gzip"):
        return Decoder(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return Decoder(None)
    return None


class Decoder:
    """A gzip or deflate body, decoded at most DECODE_LIMIT bytes per call
    (a small body that inflates to gigabytes costs one piece's worth of
    memory at a time).

    `feed()` hands over compressed bytes; `decode()` returns the next piece
    of output while `ready()` says one can come without more input: the
    input is not used up, or the last piece filled the limit (zlib may hold
    more output for input it already took). Once neither holds, the output
    so far is complete and `flush()` at the end of the body gives at most a
    few bytes. `Content-Encoding: deflate` is zlib-wrapped by the standard
    and raw deflate from some servers: its first two bytes decide.
    zlib.error for a corrupt body; Truncated from `flush()` when the body
    ended before its compressed data did (a body of no bytes is empty, not
    cut).
    """

    __slots__ = ("_fed", "_input", "_more", "_pos", "_zlib")

    def __init__(self, wbits: int | None) -> None:
        self._zlib: Any = None if wbits is None else zlib.decompressobj(wbits)
        self._input = b""
        self._pos = 0  # how much of _input went to zlib
        self._more = False
        self._fed = False  # a byte of the body came

    def feed(self, data: bytes) -> None:
        if data:
            self._fed = True
        rest = self._input[self._pos :]  # one byte of deflate, at most
        self._input = rest + data if rest else data
        self._pos = 0
        if self._zlib is None and len(self._input) >= 2:
            self._start(self._input)

    def ready(self) -> bool:
        return self._more or (self._zlib is not None and self._pos < len(self._input))

    def decode(self) -> bytes:
        inflate = self._zlib
        if inflate.eof:  # bytes after the end of the compressed data are ignored
            self._input, self._pos, self._more = b"", 0, False
            return b""
        # at most DECODE_LIMIT bytes of input too: zlib copies what it leaves
        piece = memoryview(self._input)[self._pos : self._pos + DECODE_LIMIT]
        data = bytes(inflate.decompress(piece, DECODE_LIMIT))
        self._pos += len(piece) - len(inflate.unconsumed_tail)
        if self._pos == len(self._input):
            self._input, self._pos = b"", 0
        self._more = len(data) == DECODE_LIMIT
        return data

    def flush(self) -> bytes:
        if not self._fed:
            return b""
        inflate = self._zlib
        data = b""
        if inflate is None:  # a body of one byte: too short to tell
            inflate = self._start(self._input)
            data = self.decode()
        data += bytes(inflate.flush())
        if not inflate.eof:
            raise Truncated("the upstream's compressed body ended before its end")
        return data

    def _start(self, head: bytes) -> Any:
        wrapped = len(head) >= 2 and head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
        self._zlib = zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)
        return self._zlib
