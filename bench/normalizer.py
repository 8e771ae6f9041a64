"""Throughput of the sans-IO path: SSE decode -> normalize -> encode.

Not a test: run it, read the numbers. Pin it to one core for stable figures:

    taskset -c 0 python bench/normalizer.py

Each stream is rendered once (as an upstream would send it), then fed to a
fresh StreamNormalizer in reads of 16 KiB; the best of several rounds counts.
"""

from __future__ import annotations

import argparse
import random
import string
import time
from collections.abc import Callable

import orjson

from proxy.reasoning.normalizer import NormalizeOptions, StreamNormalizer
from proxy.reasoning.output import OUTPUTS

READ_SIZE = 16 * 1024


def _event(delta: dict[str, object], finish: str | None = None) -> bytes:
    chunk = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1730000000,
        "model": "bench-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }
    return b"data: " + orjson.dumps(chunk) + b"\n\n"


def _texts(rng: random.Random, n: int, low: int, high: int) -> list[str]:
    letters = string.ascii_letters + "     .,"
    return ["".join(rng.choices(letters, k=rng.randint(low, high))) for _ in range(n)]


def native_stream(texts: list[str]) -> bytes:
    half = len(texts) // 2
    events = [_event({"reasoning_content": t, "content": None}) for t in texts[:half]]
    events += [_event({"content": t}) for t in texts[half:]]
    return b"".join(events) + _event({}, "stop") + b"data: [DONE]\n\n"


def tag_stream(texts: list[str]) -> bytes:
    half = len(texts) // 2
    texts = ["<think>" + texts[0], *texts[1:half], texts[half] + "</think>", *texts[half + 1 :]]
    return (
        b"".join(_event({"content": t}) for t in texts) + _event({}, "stop") + b"data: [DONE]\n\n"
    )


def plain_stream(texts: list[str]) -> bytes:
    return (
        b"".join(_event({"content": t}) for t in texts) + _event({}, "stop") + b"data: [DONE]\n\n"
    )


def measure(
    body: bytes, events: int, rounds: int, options: NormalizeOptions | None = None
) -> tuple[float, float]:
    reads = [body[i : i + READ_SIZE] for i in range(0, len(body), READ_SIZE)]
    best = float("inf")
    for _ in range(rounds):
        normalizer = StreamNormalizer(options)
        start = time.perf_counter()
        for read in reads:
            normalizer.feed(read)
        normalizer.finish()
        normalizer.turn()
        best = min(best, time.perf_counter() - start)
    return events / best, len(body) / best / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50_000, help="events per small stream")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--output", choices=OUTPUTS, default="reasoning_content", help="the client's shape"
    )
    args = parser.parse_args()
    rng = random.Random(7)
    shapes: dict[str, Callable[[list[str]], bytes]] = {
        "native reasoning_content": native_stream,
        "inline <think> tags": tag_stream,
        "plain content": plain_stream,
    }
    sizes = {
        "small (10-40 B)": (args.events, 10, 40),
        "large (4 KB)": (args.events // 20, 4096, 4096),
    }
    print(f"{'stream':28} {'deltas':16} {'events/s':>12} {'MB/s':>8}")
    for size_name, (n, low, high) in sizes.items():
        texts = _texts(rng, n, low, high)
        for shape_name, render in shapes.items():
            body = render(texts)
            rate, mbps = measure(body, n + 2, args.rounds, NormalizeOptions(output=args.output))
            print(f"{shape_name:28} {size_name:16} {rate:12,.0f} {mbps:8.1f}")


if __name__ == "__main__":
    main()
