"""A gzip or deflate body that ends before its compressed data does is cut
(`http1.Truncated`, a Disconnected), not a clean end; a corrupt one is
`zlib.error`; a body of no bytes is empty. The decoder is sans-IO: each
case is fed whole and byte by byte."""

from __future__ import annotations

import gzip
import zlib

import pytest

from proxy import http1
from proxy.http1.decoder import Decoder, decoder_for

TEXT = b"".join(b'data: {"n": %d, "text": "an event that compresses"}\n\n' % i for i in range(300))


def deflate_raw(data: bytes) -> bytes:
    compressor = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    return compressor.compress(data) + compressor.flush()


ENCODED = [
    ("gzip", gzip.compress(TEXT)),
    ("deflate", zlib.compress(TEXT)),
    ("deflate", deflate_raw(TEXT)),
]
IDS = ["gzip", "deflate-zlib", "deflate-raw"]


def decode(decoder: Decoder, body: bytes, *, bytewise: bool) -> bytes:
    pieces = [body[i : i + 1] for i in range(len(body))] if bytewise else [body]
    out: list[bytes] = []
    for piece in pieces:
        decoder.feed(piece)
        while decoder.ready():
            out.append(decoder.decode())
    out.append(decoder.flush())
    return b"".join(out)


def decoder_of(encoding: str) -> Decoder:
    decoder = decoder_for(encoding)
    assert decoder is not None
    return decoder


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "byte-by-byte"])
@pytest.mark.parametrize(("encoding", "body"), ENCODED, ids=IDS)
def test_a_whole_compressed_body_decodes(encoding: str, body: bytes, bytewise: bool) -> None:
    assert decode(decoder_of(encoding), body, bytewise=bytewise) == TEXT


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "byte-by-byte"])
@pytest.mark.parametrize(("encoding", "body"), ENCODED, ids=IDS)
@pytest.mark.parametrize("keep", [1, 2, 10, 0.5, -1], ids=lambda k: f"keep-{k}")
def test_a_compressed_body_cut_short_is_truncated(
    encoding: str, body: bytes, bytewise: bool, keep: float
) -> None:
    # cut after 1, 2 or 10 bytes, at the half, or one byte before the end
    size = int(len(body) * keep) if isinstance(keep, float) else keep % len(body)
    with pytest.raises(http1.Truncated):
        decode(decoder_of(encoding), body[:size], bytewise=bytewise)
    assert issubclass(http1.Truncated, http1.Disconnected)  # a cut, as a plain body's


@pytest.mark.parametrize("bytewise", [False, True], ids=["whole", "byte-by-byte"])
@pytest.mark.parametrize(
    ("encoding", "body"),
    [("gzip", b"\x1f\x8b\x08\x00 definitely not gzip"), ("deflate", b"x\x9c\xff\xff\xff\xff")],
)
def test_a_corrupt_compressed_body_is_a_zlib_error(
    encoding: str, body: bytes, bytewise: bool
) -> None:
    with pytest.raises(zlib.error):
        decode(decoder_of(encoding), body, bytewise=bytewise)


@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_body_of_no_bytes_is_empty(encoding: str) -> None:
    decoder = decoder_of(encoding)
    decoder.feed(b"")
    assert decoder.flush() == b""


@pytest.mark.parametrize(("encoding", "body"), ENCODED, ids=IDS)
def test_bytes_after_the_compressed_data_are_ignored(encoding: str, body: bytes) -> None:
    assert decode(decoder_of(encoding), body + b"\r\n", bytewise=False) == TEXT
