"""Incremental Server-Sent Events decoder and encoder (sans-IO).

`SSEDecoder.feed(bytes)` buffers and returns every event completed by those
bytes; `flush()` ends the stream. Lines end with LF, CR or CRLF (a CR at the
end of one read and the LF at the start of the next are one line end). Data
stays bytes: lines are cut on bytes, so a UTF-8 character split across reads
is whole again by the time a line is complete, and JSON decoders take bytes.
One UTF-8 byte-order mark at the very start of the stream is dropped, as the
SSE specification says, also when it arrives split across reads; anywhere
later it is data.

The only exception raised is `SSELineTooLong`, when an incomplete line or one
event's data grows past the bound: a peer that never ends a line cannot make
the decoder hold an unbounded buffer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

DEFAULT_MAX_LINE_BYTES = 1 << 20

_LINE_ENDS = (b"\n", b"\r")
BOM = b"\xef\xbb\xbf"


# Events are slotted dataclasses, not frozen ones: a frozen dataclass's
# __init__ costs about 1 us, an eighth of the whole per-event budget. Their
# `__init__` is written out, as proxy/reasoning/blocks.py says why.
@dataclass(slots=True, init=False)
class SSEEvent:
    """One dispatched event: its data lines joined with LF."""

    data: bytes
    event: str | None = None
    id: str | None = None
    retry: int | None = None

    def __init__(
        self,
        data: bytes,
        event: str | None = None,
        id: str | None = None,
        retry: int | None = None,
    ) -> None:
        self.data = data
        self.event = event
        self.id = id
        self.retry = retry


@dataclass(slots=True, init=False)
class SSEComment:
    """A comment line (`: ping`), kept so keep-alives can be forwarded."""

    text: bytes

    def __init__(self, text: bytes) -> None:
        self.text = text


class SSELineTooLong(Exception):
    """A line or an event's data exceeded the decoder's byte bound. `events`:
    the ones the same input completed before that line, which the stream
    still had (as `feed`, `split` or `flush` would have returned them)."""

    def __init__(
        self, limit: int, events: list[bytes | SSEEvent | SSEComment] | None = None
    ) -> None:
        super().__init__(
            "The upstream sent an SSE line or event longer than "
            f"limits.max_sse_line_bytes ({limit} bytes)."
        )
        self.limit = limit
        self.events: list[bytes | SSEEvent | SSEComment] = events or []


class SSEDecoder:
    """Turn a byte stream into `SSEEvent` and `SSEComment` items.

    State: `_buf` holds the bytes of the incomplete last line; `_data` the data
    lines of the event being built; `_skip_lf` is set when the previous read
    ended in CR, so an LF that starts the next read is not a second line end;
    `_start` is set until the stream's first bytes show whether it opens with
    a byte-order mark (until then `_buf` holds at most a prefix of one).
    """

    __slots__ = (
        "_buf",
        "_data",
        "_data_size",
        "_event",
        "_id",
        "_max",
        "_retry",
        "_skip_lf",
        "_start",
        "verbatim",
    )

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES) -> None:
        self._max = max_line_bytes
        self._buf = b""
        self._skip_lf = False
        self._start = True
        self._data: list[bytes] = []
        self._data_size = 0
        self._event: str | None = None
        self._id: str | None = None
        self._retry: int | None = None
        # After `split`: the input bytes of the events it returned, when every
        # one was a plain `data: ` event in LF framing (so they can be passed
        # on as they are); else None.
        self.verbatim: bytes | None = None

    def feed(self, chunk: bytes) -> list[SSEEvent | SSEComment]:
        """The events completed by `chunk`."""
        return self._feed(chunk, False)  # type: ignore[return-value]

    def split(self, chunk: bytes) -> list[bytes | SSEEvent | SSEComment]:
        """Like `feed`, for the hot path: a plain event (a single `data: `
        line and nothing else) comes back as its data bytes, no object built;
        `verbatim` says whether the input can be forwarded unchanged."""
        return self._feed(chunk, True)

    def _feed(self, chunk: bytes, plain: bool) -> list[bytes | SSEEvent | SSEComment]:
        self.verbatim = None
        if not chunk:
            return []
        if self._start:
            chunk = self._after_bom(chunk)
            if not chunk:
                return []
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._buf + chunk if self._buf else chunk
        if b"\r" not in buf and not self._data and self._event is None:
            return self._feed_lf(buf, plain)
        cut = max(buf.rfind(b"\n"), buf.rfind(b"\r"))
        if cut < 0:
            return self._keep(buf, [])
        if buf[cut] == 13:  # CR last: an LF may follow in the next read
            self._skip_lf = True
        return self._keep(buf[cut + 1 :], self._lines(buf[: cut + 1].splitlines()))

    def _feed_lf(self, buf: bytes, plain: bool) -> list[bytes | SSEEvent | SSEComment]:
        """The common case, LF line ends and no event half-built: cut whole
        events at blank lines; single `data: ` lines need no line parsing."""
        end = buf.rfind(b"\n\n")
        if end < 0:
            cut = buf.rfind(b"\n")
            if cut < 0:
                return self._keep(buf, [])
            return self._keep(buf[cut + 1 :], self._lines(buf[: cut + 1].splitlines()))
        limit = self._max
        rest = buf[end + 2 :]
        if plain and b"\n" not in rest and buf.startswith(b"data: "):
            # Every event one `data: ` line? Cut at each blank line that a
            # `data: ` follows: then the only line ends are those separators.
            datas = buf[6:end].split(b"\n\ndata: ")
            # (no line end inside any of them; a join and a memchr are far
            # cheaper than counting the read's line ends byte by byte)
            if b"\n" not in b"".join(datas) and (end <= limit or max(map(len, datas)) + 6 <= limit):
                self.verbatim = buf[: end + 2] if rest else buf
                return self._keep(rest, datas)  # type: ignore[arg-type]
        blocks = buf[:end].split(b"\n\n")
        out: list[bytes | SSEEvent | SSEComment] = []
        verbatim = True
        for block in blocks:
            if block.startswith(b"data: ") and b"\n" not in block and len(block) <= limit:
                out.append(block[6:] if plain else SSEEvent(block[6:], None, self._id))
            else:
                verbatim = False
                self._lines([*block.split(b"\n"), b""], out)
        cut = rest.rfind(b"\n")
        if cut < 0:
            if verbatim:
                self.verbatim = buf[: end + 2] if rest else buf
            return self._keep(rest, out)
        self._lines(rest[: cut + 1].splitlines(), out)
        return self._keep(rest[cut + 1 :], out)

    def _after_bom(self, chunk: bytes) -> bytes:
        """The stream's first bytes without a leading byte-order mark; b""
        while they are still a prefix of one (kept in `_buf`)."""
        head = self._buf + chunk if self._buf else chunk  # (no copy of a first read)
        self._buf = b""
        if len(head) < len(BOM) and BOM.startswith(head):
            self._buf = head
            return b""
        self._start = False
        return head[len(BOM) :] if head.startswith(BOM) else head

    def _keep(
        self, tail: bytes, out: list[bytes | SSEEvent | SSEComment]
    ) -> list[bytes | SSEEvent | SSEComment]:
        """Hold the incomplete last line, within the bound."""
        if len(tail) > self._max:
            self.verbatim = None
            raise SSELineTooLong(self._max, out)
        self._buf = tail
        return out

    def flush(self) -> list[SSEEvent | SSEComment]:
        """End of stream: a final line without its line end still counts, and
        an event whose blank line never came is dispatched (as browsers do not,
        but a proxy should not lose the last event of a cut stream)."""
        self.verbatim = None
        out: list[bytes | SSEEvent | SSEComment] = []
        if self._buf:
            out = self._lines([self._buf])
            self._buf = b""
        self._skip_lf = False
        if self._data:
            self._lines([b""], out)
        return cast(list[SSEEvent | SSEComment], out)  # _lines builds no plain items

    def _lines(
        self, lines: list[bytes], out: list[bytes | SSEEvent | SSEComment] | None = None
    ) -> list[bytes | SSEEvent | SSEComment]:
        """Parse whole lines; the events they complete are added to `out`
        (a new list when None), which is returned."""
        if out is None:
            out = []
        limit = self._max
        for line in lines:
            if not line:
                if self._data:
                    out.append(SSEEvent(b"\n".join(self._data), self._event, self._id, self._retry))
                    self._data = []
                    self._data_size = 0
                self._event = None
                self._retry = None
                continue
            if len(line) > limit:
                raise SSELineTooLong(limit, out)
            if line[:5] == b"data:":
                value = line[6:] if line[5:6] == b" " else line[5:]
                self._data_size += len(value)
                if self._data_size > limit:
                    raise SSELineTooLong(limit, out)
                self._data.append(value)
            elif line[:1] == b":":
                out.append(SSEComment(line[1:]))
            else:
                self._field(line)
        return out

    def _field(self, line: bytes) -> None:
        name, sep, value = line.partition(b":")
        if sep and value[:1] == b" ":
            value = value[1:]
        text = value.decode("utf-8", "replace")
        if name == b"event":
            self._event = text
        elif name == b"id":
            if "\0" not in text:
                self._id = text
        elif name == b"retry":
            if text.isdigit():
                self._retry = int(text)
        elif name == b"data":  # `data` with no colon: an empty data line
            self._data.append(b"")
        # other field names are ignored, as the SSE specification says


def encode_event(data: bytes, event: str | None = None) -> bytes:
    """Render one event; multi-line data becomes several `data:` lines."""
    head = b"event: " + event.encode() + b"\n" if event else b""
    if b"\n" in data or b"\r" in data:
        lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        return head + b"".join(b"data: " + line + b"\n" for line in lines) + b"\n"
    return head + b"data: " + data + b"\n\n"


def encode_comment(text: bytes) -> bytes:
    return b":" + text + b"\n\n"


DONE = b"[DONE]"
DONE_EVENT = b"data: [DONE]\n\n"
