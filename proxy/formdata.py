"""One field of a multipart/form-data body: where the pass-through finds the
`model` of an upload (`/v1/audio/transcriptions`), which it routes by.

Sans-IO: `form_values(content_types, body, name, limit)` takes the request's
Content-Type values and its body, whole (the pass-through reads a body
whole, within `limits.max_body_bytes`, before it routes), and returns the
values of the parts named `name`. Nothing is copied but part headers and
those values: the body is searched in place. A reader fed piece by piece
would add state and save nothing, since the body is in memory already.

The value of a field is only ever the content of a part whose own headers
name it: `name="model"` written inside a file's content, or in a preamble,
is content and does not count. Forms are read as RFC 7578 and RFC 2046 lay
them out; where servers read one differently, the reading here is the
wider one, so that a field some upstream sees is seen here too:

- A delimiter line is `--boundary` at the start of the body or of a line
  (after LF or CRLF), then spaces or tabs, then LF, CRLF or the end of the
  body; `--boundary--` closes the form. Parts after a close are still read
  (a close one parser takes for content must not hide them).
- Part header lines end in LF or CRLF; a line starting with a space or tab
  continues the one before (the header counts folded and unfolded). Header
  names are matched without case, spaces around them ignored.
- A Content-Disposition's `name` counts bare or quoted (with the backslash
  escapes undone and not, closed by the first quote or the last) and in
  RFC 2231 form (`name*=utf-8''model`, `name*0=`...); every
  Content-Disposition header of a part counts, whatever its disposition
  type. Parameters are split at the `;`s outside quotes, as every parser
  of note does (a `;` in a quoted file name is part of the name).
- Every boundary the Content-Type values may name is tried.

`UnreadableForm` is raised where an upstream may read a value this reader
cannot, and where a body would cost more work than any form needs: a
value longer than `limit`, not UTF-8, or under a Content-Transfer-Encoding
that changes it; part headers longer than MAX_PART_HEAD; more than
MAX_DELIMITERS lines that start with the delimiter, more than MAX_HEADERS
such headers in a part, more than MAX_PARAMS parameters in one, more than
MAX_BOUNDARIES boundaries. A body whose Content-Type names no boundary, or
in which the boundary starts no line, has no parts: no values, no error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from urllib.parse import unquote_to_bytes

# Bounds on what one body may make this reader do. Forms have a few parts
# of a few short headers; upstreams refuse more than 1000 parts themselves
# (Go's mime/multipart, Starlette's max_fields).
MAX_PART_HEAD = 64 * 1024  # bytes of one part's header lines
MAX_DELIMITERS = 1000  # lines starting with `--boundary`, per boundary
MAX_HEADERS = 8  # Content-Disposition and Content-Transfer-Encoding headers per part
MAX_PARAMS = 8  # `;`-separated parameters of one header
MAX_BOUNDARIES = 8  # boundaries the Content-Type values name, in all readings

# transfer encodings that leave the bytes as they are
_IDENTITY = frozenset((b"7bit", b"8bit", b"binary"))
# what may follow `--boundary` on a delimiter line: padding, then LF, CRLF or the end
_LINE_END = re.compile(rb"[ \t]*(?:\r?\n|\r?\Z)")
# the headers that matter, with their continuation lines
_HEADER = re.compile(
    rb"^[ \t]*(content-disposition|content-transfer-encoding)[ \t]*:([^\n]*(?:\n[ \t][^\n]*)*)",
    re.IGNORECASE | re.MULTILINE,
)
# a piece between `;`s, quoted strings kept whole
_PIECE = re.compile(rb'(?:"(?:[^"\\]|\\.)*(?:"|\\?\Z)|[^;"])+', re.DOTALL)
_QUOTED = re.compile(rb'"((?:[^"\\]|\\.)*)', re.DOTALL)
_ESCAPE = re.compile(rb"\\(.)", re.DOTALL)
_CONTINUED = re.compile(rb"(.+)\*(\d{1,2})(\*?)")


class UnreadableForm(ValueError):
    """The form may hold the field in a way this reader does not read."""


def form_values(content_types: Iterable[str], body: bytes, name: bytes, limit: int) -> list[str]:
    """The values of the parts named `name`, each once, in order of first
    appearance, under every boundary the Content-Type values name."""
    boundaries: set[bytes] = set()
    for content_type in content_types:
        if "boundary" in content_type.lower():
            boundaries |= param_values(content_type.encode("latin-1"), b"boundary")
    boundaries.discard(b"")
    if len(boundaries) > MAX_BOUNDARIES:
        raise UnreadableForm(f"more than {MAX_BOUNDARIES} boundaries")
    values: list[str] = []
    for boundary in sorted(boundaries):
        for value in field_values(body, boundary, name, limit):
            if value not in values:
                values.append(value)
    return values


def field_values(body: bytes, boundary: bytes, name: bytes, limit: int) -> list[str]:
    """The values of the parts named `name` in a body under `boundary`."""
    dash = b"--" + boundary
    values: list[str] = []
    start: int | None = None  # where the current part begins, None outside one
    for at, after, closes in _delimiter_lines(body, dash):
        if start is not None and (content := _content_of(body, start, at, name)) is not None:
            # the LF or CRLF before a delimiter is the delimiter's
            end = at - 2 if body[at - 2 : at] == b"\r\n" else at - 1
            values.append(_value(body, content, end, limit))
        start = None if closes else after
    if start is not None and (content := _content_of(body, start, len(body), name)) is not None:
        # a form cut short: its last part counts as far as it goes
        values.append(_value(body, content, len(body) - _cut_delimiter(body, dash, content), limit))
    return list(dict.fromkeys(values))


def _delimiter_lines(body: bytes, dash: bytes) -> Iterator[tuple[int, int, bool]]:
    """(where a delimiter line starts, where what follows it starts, whether
    it closes the form), in order."""
    seen = 0
    at = 0 if body.startswith(dash) else _line_start(body, dash, 0)
    while at >= 0:
        seen += 1
        if seen > MAX_DELIMITERS:
            raise UnreadableForm(f"more than {MAX_DELIMITERS} delimiter lines")
        end = at + len(dash)
        if body.startswith(b"--", end):
            yield at, end + 2, True
            at = _line_start(body, dash, end + 2)
            continue
        line_end = _LINE_END.match(body, end)
        if line_end is None:  # `--boundary` starts a longer token: content
            at = _line_start(body, dash, end)
            continue
        after = line_end.end()
        yield at, after, not line_end.group().endswith(b"\n")  # the end of the body closes
        at = _line_start(body, dash, after - 1)


def _cut_delimiter(body: bytes, dash: bytes, content: int) -> int:
    """How many bytes at the end of the body, after `content`, begin a
    delimiter line (CR, or LF or CRLF and the start of `dash` or of the
    close): a body cut there was cut in it."""
    newline = body.rfind(b"\n", max(content, len(body) - len(dash) - 3))
    if newline < 0 or not (dash + b"--").startswith(body[newline + 1 :]):
        return 1 if body.endswith(b"\r") and len(body) > content else 0
    return len(body) - newline + (1 if newline > content and body[newline - 1] == 0x0D else 0)


def _line_start(body: bytes, dash: bytes, pos: int) -> int:
    """Where the next line starting with `dash` starts, from `pos`; -1 if none."""
    found = body.find(b"\n" + dash, pos)
    return found + 1 if found >= 0 else -1


def _content_of(body: bytes, start: int, stop: int, name: bytes) -> int | None:
    """Where the content of the part at `start` starts, if its headers
    (which end by `stop`) name it `name`; None for another part, or one
    whose headers do not end."""
    if body.startswith(b"\n", start) or body.startswith(b"\r\n", start):
        return None  # no headers, so no name
    bound = min(stop, start + MAX_PART_HEAD)
    found = (body.find(b"\n\n", start, bound), body.find(b"\n\r\n", start, bound))
    ends = [i for i in found if i >= 0]
    if not ends and stop - start > MAX_PART_HEAD:
        raise UnreadableForm(f"part headers longer than {MAX_PART_HEAD} bytes")
    blank = min(ends) + 1 if ends else stop
    names, encodings = _part_headers(body[start:blank])
    if name not in names or not ends:
        return None
    if any(e not in _IDENTITY for e in encodings):
        raise UnreadableForm("a Content-Transfer-Encoding on the field")
    return blank + (2 if body.startswith(b"\r\n", blank) else 1)


def _value(body: bytes, content: int, end: int, limit: int) -> str:
    """body[content:end] as the field's value (empty if `end` comes first)."""
    if end - content > limit:
        raise UnreadableForm(f"the field's value is longer than {limit} bytes")
    try:
        return body[content:end].decode("utf-8")
    except UnicodeDecodeError:
        raise UnreadableForm("the field's value is not UTF-8") from None


def _part_headers(head: bytes) -> tuple[set[bytes], list[bytes]]:
    """The field names a part's header lines give it, and the transfer
    encodings they name (lower case)."""
    names: set[bytes] = set()
    encodings: list[bytes] = []
    for n, found in enumerate(_HEADER.finditer(head)):
        if n >= MAX_HEADERS:
            raise UnreadableForm(f"more than {MAX_HEADERS} such headers in a part")
        lines = [line.rstrip(b"\r").strip(b" \t") for line in found[2].split(b"\n")]
        readings = {lines[0], b" ".join(lines)}
        if found[1].lower() == b"content-disposition":
            for value in readings:
                names |= param_values(value, b"name")
        else:
            encodings += [value.lower() for value in readings]
    return names, encodings


def param_values(header: bytes, key: bytes) -> set[bytes]:
    """Every value the parameters of a header value (`type; key=value; ...`)
    may give `key`, in the readings the module docstring lists."""
    if header.count(b";") > MAX_PARAMS:
        raise UnreadableForm(f"a header with more than {MAX_PARAMS} parameters")
    out: set[bytes] = set()
    continued: dict[int, set[bytes]] = {}  # RFC 2231: key*0, key*1...
    for piece in _PIECE.findall(header):
        k, eq, v = piece.partition(b"=")
        if not eq:
            continue
        k, v = k.strip(b" \t").lower(), v.strip(b" \t")
        if k == key:
            out |= _unquoted(v)
        elif k == key + b"*":
            out.add(_extended(v, first=True))
        elif (part := _CONTINUED.fullmatch(k)) is not None and part[1] == key:
            n, extended = int(part[2]), part[3] == b"*"
            texts = {_extended(t, first=n == 0) for t in _unquoted(v)} if extended else _unquoted(v)
            continued.setdefault(n, set()).update(texts)
    joined = {b""} if 0 in continued else set()
    for n in range(len(continued)):
        if n not in continued:
            break
        joined = {start + text for start in joined for text in continued[n]}
        if len(joined) > MAX_PARAMS:
            raise UnreadableForm("too many readings of a continued parameter")
    return out | joined


def _unquoted(value: bytes) -> set[bytes]:
    """A parameter value as written: bare, or quoted, read to the first
    unescaped quote (escapes undone and not), to the first quote, and
    between the first and the last."""
    quoted = _QUOTED.match(value)
    if quoted is None:
        return {value}
    inner = quoted[1]
    out = {inner, _ESCAPE.sub(rb"\1", inner), value[1:].split(b'"', 1)[0]}
    if len(value) >= 2 and value.endswith(b'"'):
        out |= {value[1:-1], _ESCAPE.sub(rb"\1", value[1:-1])}
    return out


def _extended(value: bytes, *, first: bool) -> bytes:
    """An RFC 2231 value, percent-decoded (the first piece after its
    `charset'language'`)."""
    if first and value.count(b"'") >= 2:
        value = value.split(b"'", 2)[2]
    return unquote_to_bytes(value)
