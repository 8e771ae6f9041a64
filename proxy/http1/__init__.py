"""A lean HTTP/1.1 client for upstream requests: asyncio protocol + httptools.

The proxy's streaming path spends most of its time moving bytes from the
upstream socket to the normalizer. aiohttp does that with several Python calls
per HTTP chunk (its stream reader's bookkeeping); this client hands the parser
(httptools, llhttp in C) the socket's bytes and keeps the body pieces of one
read together, so a read of 200 chunked events costs one wake-up and one join.
Measured on one core against the bench upstream, 32 concurrent streams of 200
events (`bench/clients.py`): 1.1-1.4 us of CPU per event here, 3.9-5.3 us
with aiohttp, 44 us with httpx (README, Benchmarks).

How it is cut, bytes flowing one way:

    request.py     Origin, and a request's bytes (sans-IO)
    egress.py      which egress proxy a request goes through (sans-IO)
    reader.py      a response's bytes -> events: Head, Body, End (sans-IO)
    decoder.py     gzip/deflate bodies, at most DECODE_LIMIT bytes a piece (sans-IO)
    connect.py     a new connection: resolution, staggered attempts (happy
                   eyeballs), TLS, a CONNECT tunnel through a proxy
    connection.py  the asyncio protocol: socket -> reader -> the unread body
    gate.py        a first-come-first-served counting semaphore
    slots.py       request slots (all, and per origin) with a bounded wait
    pool.py        keep-alive connections, request slots, Response

What it does: keep-alive connections pooled per origin and proxy (most
recently used first, closed after `keepalive` seconds idle, checked for the
upstream's close before reuse; a request is sent again once when a reused
connection fails before any byte of the response), at most `limit` requests
in flight with a bounded wait for a free slot, TLS with the system's trust
store, staggered connection attempts over a host's addresses, HTTP egress
proxies (CONNECT for https upstreams), a connect timeout and an idle timeout
(the longest wait for the next bytes, before and after the status line),
gzip/deflate response bodies decoded at most `DECODE_LIMIT` bytes per read
(a small body that inflates to gigabytes costs one read's worth of memory at
a time), flow control (reading pauses while `HIGH_WATER` bytes wait unread,
and while compressed bytes wait in the decoder).
What it does not: redirects, HTTP/2, request bodies streamed from a
generator, TLS or SOCKS to a proxy; it reads the environment only when its
caller hands it `EnvProxies`. Errors are the classes of `errors.py`; the
caller turns them into its own.
"""

from __future__ import annotations

from proxy.http1.connection import HIGH_WATER
from proxy.http1.decoder import DECODE_LIMIT
from proxy.http1.egress import EnvProxies, ProxyURL
from proxy.http1.errors import (
    BadResponse,
    ConnectFailed,
    ConnectTimeout,
    Disconnected,
    HTTPClientError,
    PoolTimeout,
    ResponseTimeout,
    Truncated,
)
from proxy.http1.pool import Pool, Response
from proxy.http1.reader import MAX_HEAD_BYTES
from proxy.http1.request import Origin, encode_request

__all__ = [
    "DECODE_LIMIT",
    "HIGH_WATER",
    "MAX_HEAD_BYTES",
    "BadResponse",
    "ConnectFailed",
    "ConnectTimeout",
    "Disconnected",
    "EnvProxies",
    "HTTPClientError",
    "Origin",
    "Pool",
    "PoolTimeout",
    "ProxyURL",
    "Response",
    "ResponseTimeout",
    "Truncated",
    "encode_request",
]
