"""A fast fake upstream for the benchmark: pre-rendered chat completions.

Serves POST /v1/chat/completions from responses rendered once per variant
(the first time a variant is asked for; the default one at start-up), so a
request costs two regex searches over its body and one socket write. That
keeps the upstream far from being the bottleneck it would be if it built
JSON per request, and makes "direct" a ceiling the proxy can be held to.

A variant is (mode, chunks, gap). Modes:

- ``native``: ``reasoning_content`` deltas for the first half, then
  ``content`` deltas (DeepSeek / vLLM style);
- ``tags``: everything in ``content``, the reasoning inside ``<think>`` tags
  whose bytes are split across chunks (``<thi`` + ``nk>``, ``</th`` + ``ink>``);
- ``plain``: ``content`` deltas only.

The request's model picks the variant, ``bench-<mode>[-c<chunks>][-g<gap ms>]``
(e.g. ``bench-tags-c200-g0``); parts left out, and models that do not parse,
take the command line's defaults. ``"stream": true`` gets an SSE stream of
`chunks` chunk events plus ``[DONE]``, one HTTP chunk per event; otherwise one
``chat.completion`` JSON with the same text. Without a gap a stream leaves in
one write; with one, the first event goes at once and each next one after
`gap` (the time-to-first-token scenario).

    python -m bench.upstream --port 8900 [--mode native] [--chunks 200] [--gap-ms 0]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
import re
import signal
import string
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

import orjson

MODES = ("native", "tags", "plain")
MAX_HEAD_BYTES = 64 * 1024
MIN_CHUNKS = 8  # room for a split <think> tag pair and some text around it

_MODEL = re.compile(rb'"model"\s*:\s*"([^"]{1,200})"')
_STREAM = re.compile(rb'"stream"\s*:\s*true')
_VARIANT = re.compile(r"bench-(native|tags|plain)(?:-c(\d+))?(?:-g(\d+(?:\.\d+)?))?")
_CONTENT_LENGTH = re.compile(rb"\r\ncontent-length:[ \t]*(\d+)")

_CREATED = 1730000000


@dataclass(frozen=True, slots=True)
class Variant:
    mode: str = "native"
    chunks: int = 200
    gap: float = 0.0  # seconds between two events of a stream

    def model(self) -> str:
        return f"bench-{self.mode}-c{self.chunks}-g{self.gap * 1000:g}"


def parse_variant(model: str, default: Variant) -> Variant:
    """The variant a model name asks for; unnamed parts keep `default`'s."""
    match = _VARIANT.fullmatch(model)
    if match is None:
        return default
    mode, chunks, gap = match.groups()
    return Variant(
        mode=mode,
        chunks=max(MIN_CHUNKS, int(chunks)) if chunks else default.chunks,
        gap=float(gap) / 1000 if gap else default.gap,
    )


@dataclass(frozen=True, slots=True)
class Rendered:
    """One variant's bytes, ready to write (HTTP head included)."""

    stream_pieces: tuple[bytes, ...]  # one item per write when there is a gap
    stream_whole: bytes  # the same bytes joined, for the no-gap case
    completion: bytes
    gap: float


# -- rendering (once per variant) -----------------------------------------------------


def _texts(n: int, seed: int) -> list[str]:
    """n small deltas of 10-40 bytes, as a model's tokens come in a few at a time."""
    rng = random.Random(seed)
    letters = string.ascii_lowercase + "      .,"
    return ["".join(rng.choices(letters, k=rng.randint(10, 40))) for _ in range(n)]


def _deltas(mode: str, texts: list[str]) -> list[dict[str, Any]]:
    half = len(texts) // 2
    if mode == "native":
        return [{"content": None, "reasoning_content": t} for t in texts[:half]] + [
            {"content": t} for t in texts[half:]
        ]
    if mode == "tags":
        # the tags cut mid-name, so the proxy's tag splitter has to hold partial tags
        body = ["<thi", "nk>" + texts[1], *texts[2:half], texts[half] + "</th", "ink>\n\n"]
        return [{"content": t} for t in body + texts[half + 2 :]][: len(texts)]
    return [{"content": t} for t in texts]


def _chunk(model: str, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "system_fingerprint": "fp_bench",
        "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }


def _usage(chunks: int) -> dict[str, int]:
    return {"prompt_tokens": 24, "completion_tokens": chunks, "total_tokens": 24 + chunks}


def _http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%b\r\n" % (len(data), data)


def render(variant: Variant, seed: int = 7) -> Rendered:
    model = variant.model()
    texts = _texts(variant.chunks - 1, seed)  # the last of `chunks` events is the finish
    deltas = _deltas(variant.mode, texts)
    deltas[0] = {"role": "assistant", **deltas[0]}
    chunks = [_chunk(model, d) for d in deltas]
    last = _chunk(model, {}, "stop")
    last["usage"] = _usage(variant.chunks)
    chunks.append(last)
    events = [b"data: " + orjson.dumps(c) + b"\n\n" for c in chunks] + [b"data: [DONE]\n\n"]
    head = (
        b"HTTP/1.1 200 OK\r\n"
        b"Content-Type: text/event-stream; charset=utf-8\r\n"
        b"Cache-Control: no-cache\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n"
    )
    pieces = [_http_chunk(e) for e in events]
    pieces[0] = head + pieces[0]
    pieces[-1] += b"0\r\n\r\n"
    return Rendered(
        stream_pieces=tuple(pieces),
        stream_whole=b"".join(pieces),
        completion=_completion(model, variant, texts),
        gap=variant.gap,
    )


def _completion(model: str, variant: Variant, texts: list[str]) -> bytes:
    half = len(texts) // 2
    reasoning, answer = "".join(texts[:half]), "".join(texts[half:])
    message: dict[str, Any] = {"role": "assistant"}
    if variant.mode == "native":
        message |= {"content": answer, "reasoning_content": reasoning}
    elif variant.mode == "tags":
        message["content"] = f"<think>{reasoning}</think>\n\n{answer}"
    else:
        message["content"] = reasoning + answer
    body = orjson.dumps(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": _CREATED,
            "model": model,
            "system_fingerprint": "fp_bench",
            "choices": [
                {"index": 0, "message": message, "logprobs": None, "finish_reason": "stop"}
            ],
            "usage": _usage(variant.chunks),
        }
    )
    return _response(200, body, b"application/json")


def _response(status: int, body: bytes, content_type: bytes) -> bytes:
    reason = {200: b"OK", 400: b"Bad Request", 404: b"Not Found", 501: b"Not Implemented"}
    return b"HTTP/1.1 %d %b\r\nContent-Type: %b\r\nContent-Length: %d\r\n\r\n%b" % (
        status,
        reason.get(status, b"Error"),
        content_type,
        len(body),
        body,
    )


# -- serving ----------------------------------------------------------------------------


class Responses:
    """Rendered variants by the model name that asked for them."""

    def __init__(self, default: Variant, seed: int) -> None:
        self.default = default
        self._seed = seed
        self._by_variant: dict[Variant, Rendered] = {default: render(default, seed)}
        self._by_model: dict[bytes, Rendered] = {}

    def for_body(self, body: bytes) -> Rendered:
        match = _MODEL.search(body)
        if match is None:
            return self._by_variant[self.default]
        model = match.group(1)
        rendered = self._by_model.get(model)
        if rendered is None:
            variant = parse_variant(model.decode("utf-8", "replace"), self.default)
            rendered = self._by_variant.get(variant)
            if rendered is None:
                rendered = self._by_variant[variant] = render(variant, self._seed)
            if len(self._by_model) < 1024:  # bound the cache against odd clients
                self._by_model[model] = rendered
        return rendered


_MODELS = _response(
    200, b'{"object":"list","data":[{"id":"bench","object":"model"}]}', b"application/json"
)
_HEALTH = _response(200, b'{"status":"ok"}', b"application/json")
_NOT_FOUND = _response(404, b'{"error":{"message":"not found"}}', b"application/json")
_CHUNKED_BODY = _response(501, b'{"error":{"message":"send Content-Length"}}', b"application/json")
_BAD = _response(400, b'{"error":{"message":"bad request"}}', b"application/json")


class Connection(asyncio.Protocol):
    """One client connection: HTTP/1.1 keep-alive, requests answered in order.

    The parser is the bare minimum for well-behaved clients (aiohttp, the
    proxy): a head, then a Content-Length body."""

    def __init__(self, responses: Responses) -> None:
        self._responses = responses
        self._buffer = bytearray()
        self._transport: asyncio.Transport | None = None
        self._writer: asyncio.Task[None] | None = None  # a gapped stream being written

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports do not subclass asyncio.Transport, so no isinstance check
        self._transport = cast(asyncio.Transport, transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._writer is not None:
            self._writer.cancel()

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        self._serve()

    def _serve(self) -> None:
        buffer = self._buffer
        while self._writer is None and self._transport is not None:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    self._reply(_BAD, close=True)
                return
            head = bytes(buffer[:end]).lower()
            if b"\r\ntransfer-encoding:" in head:
                self._reply(_CHUNKED_BODY, close=True)
                return
            match = _CONTENT_LENGTH.search(head)
            length = int(match.group(1)) if match else 0
            if len(buffer) < end + 4 + length:
                return
            body = bytes(buffer[end + 4 : end + 4 + length])
            del buffer[: end + 4 + length]
            self._request(head, body)

    def _request(self, head: bytes, body: bytes) -> None:
        line = head[: head.find(b"\r\n")] if b"\r\n" in head else head
        method, _, rest = line.partition(b" ")
        path = rest.partition(b" ")[0].partition(b"?")[0]
        close = b"\r\nconnection: close" in head
        if method == b"post" and path.endswith(b"/chat/completions"):
            rendered = self._responses.for_body(body)
            if _STREAM.search(body) is None:
                self._reply(rendered.completion, close)
            elif rendered.gap <= 0:
                self._reply(rendered.stream_whole, close)
            else:
                self._writer = asyncio.ensure_future(self._paced(rendered, close))
        elif method == b"get" and path.endswith(b"/models"):
            self._reply(_MODELS, close)
        elif method == b"get" and path in (b"/health", b"/healthz"):
            self._reply(_HEALTH, close)
        else:
            self._reply(_NOT_FOUND, close)

    def _reply(self, data: bytes, close: bool) -> None:
        if self._transport is not None:
            self._transport.write(data)
            if close:
                self._transport.close()

    async def _paced(self, rendered: Rendered, close: bool) -> None:
        pieces = rendered.stream_pieces
        try:
            for n, piece in enumerate(pieces):
                if n:
                    await asyncio.sleep(rendered.gap)
                if self._transport is None:
                    return
                self._transport.write(piece)
            if close and self._transport is not None:
                self._transport.close()
        finally:
            self._writer = None
        self._serve()  # a request that came in meanwhile (pipelining) waits for its turn


async def serve(host: str, port: int, responses: Responses, ready: Callable[[int], None]) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: Connection(responses), host, port, backlog=1024)
    stop = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(signum, stop.set)
    ready(server.sockets[0].getsockname()[1])
    async with server:
        await stop.wait()


def run(main: Callable[[], Any]) -> None:
    """Run a coroutine function on uvloop when it is installed (as the proxy does)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
    else:
        uvloop.run(main())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.upstream", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8900, help="0 picks a free port")
    parser.add_argument("--mode", choices=MODES, default="native")
    parser.add_argument("--chunks", type=int, default=200, help="chunk events per stream")
    parser.add_argument("--gap-ms", type=float, default=0.0, help="pause between stream events")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    default = Variant(args.mode, max(MIN_CHUNKS, args.chunks), args.gap_ms / 1000)
    responses = Responses(default, args.seed)

    def ready(port: int) -> None:
        # bench/run.py waits for this line (and reads the port from it)
        print(f"fake upstream listening on http://{args.host}:{port}/v1", flush=True)

    run(lambda: serve(args.host, args.port, responses, ready))
    return 0


if __name__ == "__main__":
    sys.exit(main())
