"""An async load generator for POST /v1/chat/completions.

`concurrency` workers share one keep-alive aiohttp pool; each sends its next
request as soon as the previous one is read to the end. A request counts when
it starts after the warm-up; no request starts after the duration (or after
`requests` counted ones), and the run ends when those in flight finish. Per
request: latency (send to last byte), TTFB (send to first body byte), SSE
`data:` events received (`[DONE]` included), errors (HTTP status >= 400,
client exceptions, a stream without `[DONE]`).

With `--watch-pid`, the CPU seconds (user + system, all threads) that process
and the processes under it (a server's workers) used during the counted
window are reported too: bench/run.py points it at the proxy.

    python -m bench.loadgen http://127.0.0.1:8900/v1 --model bench-native --stream \\
        --concurrency 32 --duration 10 [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

import aiohttp
import orjson

from bench.upstream import run

_DONE_TAIL = b"data: [DONE]\n\n"
_EVENT = b"\ndata:"


@dataclass(frozen=True, slots=True)
class LoadSpec:
    base_url: str  # ends at /v1; /chat/completions is appended
    model: str = "bench-native"
    stream: bool = True
    concurrency: int = 32
    duration: float | None = 10.0  # seconds of counted requests; None: only `requests` bounds
    requests: int | None = None
    warmup: float = 0.0
    timeout: float = 60.0
    watch_pid: int | None = None


@dataclass(slots=True)
class LoadResult:
    requests: int = 0  # completed without error
    errors: dict[str, int] = field(default_factory=dict)
    elapsed: float = 0.0  # seconds from the end of warm-up to the last counted completion
    chunks: int = 0
    requests_per_s: float = 0.0
    chunks_per_s: float = 0.0
    latency_p50_ms: float = 0.0
    latency_p99_ms: float = 0.0
    ttfb_p50_ms: float = 0.0
    ttfb_p99_ms: float = 0.0
    watched_cpu_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of `values` (0 when empty)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p * len(ordered)) - 1))]


def _stat_fields(pid: int | str) -> list[bytes]:
    with open(f"/proc/{pid}/stat", "rb") as f:
        stat = f.read()
    # the command name may hold spaces or parentheses: count fields after the last ')'
    return stat[stat.rindex(b")") + 2 :].split()


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process and of every process under it (a server's
    workers), from /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(_stat_fields(entry)[1])
            except (OSError, ValueError, IndexError):
                continue  # gone since the listing
            children.setdefault(parent, []).append(int(entry))
    total = 0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            fields = _stat_fields(current)
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
        todo += children.get(current, [])
    return total / os.sysconf("SC_CLK_TCK")


def request_body(model: str, stream: bool) -> bytes:
    return orjson.dumps(
        {
            "model": model,
            "messages": [
                {"role": "system", "content": "You are a careful assistant."},
                {"role": "user", "content": "Think it through, then answer in one paragraph."},
            ],
            "stream": stream,
            "max_tokens": 1024,
        }
    )


class _Window:
    """When counted requests may start, and how many have."""

    def __init__(self, spec: LoadSpec, now: float) -> None:
        self.opens = now + spec.warmup
        self.closes = self.opens + spec.duration if spec.duration is not None else math.inf
        self.left = spec.requests if spec.requests is not None else math.inf
        self.last_end = self.opens

    def admit(self) -> bool | None:
        """True: a counted request may start; False: a warm-up one; None: stop."""
        now = time.perf_counter()
        if now < self.opens:
            return False
        if now >= self.closes or self.left <= 0:
            return None
        self.left -= 1
        return True


@dataclass(slots=True)
class _Tally:
    latencies: list[float] = field(default_factory=list)
    ttfbs: list[float] = field(default_factory=list)
    chunks: int = 0
    errors: Counter[str] = field(default_factory=Counter)


async def _one(
    session: aiohttp.ClientSession, url: str, body: bytes, stream: bool
) -> tuple[float, float, int] | str:
    """One request: (latency, ttfb, events), or the error's name."""
    start = time.perf_counter()
    ttfb = 0.0
    events = 0
    tail = b"\n"  # a virtual newline makes the body's first `data:` count
    last = b""
    try:
        async with session.post(url, data=body) as response:
            content = response.content
            while True:
                data = await content.readany()
                if not data:
                    break
                if not ttfb:
                    ttfb = time.perf_counter() - start
                window = tail + data
                events += window.count(_EVENT)
                # shorter than the pattern, so no event is counted twice
                tail = window[-(len(_EVENT) - 1) :]
                last = (last + data)[-len(_DONE_TAIL) :]
            status = response.status
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        return type(exc).__name__
    if status >= 400:
        return f"http {status}"
    if stream and last != _DONE_TAIL:
        return "stream without [DONE]"
    return time.perf_counter() - start, ttfb or time.perf_counter() - start, events


async def _worker(
    session: aiohttp.ClientSession, spec: LoadSpec, body: bytes, window: _Window, tally: _Tally
) -> None:
    url = spec.base_url.rstrip("/") + "/chat/completions"
    while (counted := window.admit()) is not None:
        outcome = await _one(session, url, body, spec.stream)
        if not counted:
            continue
        window.last_end = time.perf_counter()
        if isinstance(outcome, str):
            tally.errors[outcome] += 1
            continue
        latency, ttfb, events = outcome
        tally.latencies.append(latency)
        tally.ttfbs.append(ttfb)
        tally.chunks += events


async def run_load(spec: LoadSpec) -> LoadResult:
    body = request_body(spec.model, spec.stream)
    connector = aiohttp.TCPConnector(limit=spec.concurrency, limit_per_host=0)
    timeout = aiohttp.ClientTimeout(total=spec.timeout)
    tally = _Tally()
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=timeout,
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
        headers={"content-type": "application/json", "authorization": "Bearer bench"},
    ) as session:
        window = _Window(spec, time.perf_counter())
        workers = [
            asyncio.ensure_future(_worker(session, spec, body, window, tally))
            for _ in range(spec.concurrency)
        ]
        cpu_start = None
        if spec.watch_pid is not None:
            await asyncio.sleep(max(0.0, window.opens - time.perf_counter()))
            cpu_start = cpu_seconds(spec.watch_pid)
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
        cpu = None
        if cpu_start is not None and spec.watch_pid is not None:
            cpu = cpu_seconds(spec.watch_pid) - cpu_start
    return _result(tally, max(1e-9, window.last_end - window.opens), cpu)


def _result(tally: _Tally, elapsed: float, cpu: float | None) -> LoadResult:
    done = len(tally.latencies)
    return LoadResult(
        requests=done,
        errors=dict(tally.errors),
        elapsed=elapsed,
        chunks=tally.chunks,
        requests_per_s=done / elapsed,
        chunks_per_s=tally.chunks / elapsed,
        latency_p50_ms=percentile(tally.latencies, 0.50) * 1000,
        latency_p99_ms=percentile(tally.latencies, 0.99) * 1000,
        ttfb_p50_ms=percentile(tally.ttfbs, 0.50) * 1000,
        ttfb_p99_ms=percentile(tally.ttfbs, 0.99) * 1000,
        watched_cpu_s=cpu,
    )


def _format(result: LoadResult) -> str:
    lines = [
        f"requests   {result.requests} in {result.elapsed:.2f} s "
        f"({result.requests_per_s:,.0f}/s), errors {result.errors or 'none'}",
        f"chunks     {result.chunks} ({result.chunks_per_s:,.0f}/s)",
        f"latency    p50 {result.latency_p50_ms:.2f} ms, p99 {result.latency_p99_ms:.2f} ms",
        f"TTFB       p50 {result.ttfb_p50_ms:.2f} ms, p99 {result.ttfb_p99_ms:.2f} ms",
    ]
    if result.watched_cpu_s is not None:
        lines.append(f"watched    {result.watched_cpu_s:.2f} CPU s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.loadgen", description=__doc__.splitlines()[0]
    )
    parser.add_argument("base_url", help="the API base, e.g. http://127.0.0.1:8787/v1")
    parser.add_argument("--model", default="bench-native")
    parser.add_argument("--stream", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds; 0: no limit")
    parser.add_argument("--requests", type=int, help="stop after this many counted requests")
    parser.add_argument("--warmup", type=float, default=0.0, help="seconds not counted")
    parser.add_argument("--timeout", type=float, default=60.0, help="per request, seconds")
    parser.add_argument("--watch-pid", type=int, help="report this process's CPU seconds")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.duration <= 0 and args.requests is None:
        parser.error("give a --duration or a --requests count, or the run never ends")
    spec = LoadSpec(
        base_url=args.base_url,
        model=args.model,
        stream=args.stream,
        concurrency=max(1, args.concurrency),
        duration=args.duration if args.duration > 0 else None,
        requests=args.requests,
        warmup=args.warmup,
        timeout=args.timeout,
        watch_pid=args.watch_pid,
    )
    results: list[LoadResult] = []

    async def go() -> None:
        results.append(await run_load(spec))

    try:
        run(go)  # on uvloop when installed, like the servers
    except KeyboardInterrupt:
        return 130
    result = results[0]
    print(orjson.dumps(result.as_dict()).decode() if args.json else _format(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
