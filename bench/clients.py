"""CPU per streamed event of the upstream clients: aiohttp, httpx and
proxy.http1 as bare clients, and the proxy's two transports (built-in and
aiohttp) through its upstream seam (`proxy.upstream.Upstream`), as the
proxy's endpoints use them.

Not a test: run it, read the numbers. Each client, alone on one core, reads
streams of 200 events from the fake upstream (on the other core) at
concurrency 32, doing nothing with the bytes but counting events:

    python bench/clients.py [--seconds 5] [--rounds 2]
    python bench/clients.py --only http1,seam-builtin,seam-aiohttp
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import uvloop

from proxy import http1
from proxy.config import ServerModel
from proxy.upstream import Origin, Request, Upstream, open_transport

MODEL = "bench-native-c200"
BODY = b'{"model":"%s","stream":true,"messages":[]}' % MODEL.encode()
HEADERS = [("content-type", "application/json")]


async def aiohttp_client(port: int, seconds: float, concurrency: int) -> tuple[int, int]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    events = requests = 0
    end = time.perf_counter() + seconds

    async def worker(session: aiohttp.ClientSession) -> None:
        nonlocal events, requests
        while time.perf_counter() < end:
            async with session.post(url, data=BODY, headers=dict(HEADERS)) as response:
                while data := await response.content.readany():
                    events += data.count(b"\n\n")
            requests += 1

    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    return requests, events


async def httpx_client(port: int, seconds: float, concurrency: int) -> tuple[int, int]:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    events = requests = 0
    end = time.perf_counter() + seconds

    async def worker(client: httpx.AsyncClient) -> None:
        nonlocal events, requests
        while time.perf_counter() < end:
            async with client.stream("POST", url, content=BODY, headers=HEADERS) as response:
                async for data in response.aiter_raw():  # its fastest read: raw bytes
                    events += data.count(b"\n\n")
            requests += 1

    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(limits=limits, timeout=30) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return requests, events


async def http1_client(port: int, seconds: float, concurrency: int) -> tuple[int, int]:
    origin = http1.Origin("http", "127.0.0.1", port)
    pool = http1.Pool()
    events = requests = 0
    end = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal events, requests
        while time.perf_counter() < end:
            response = await pool.request(
                origin,
                "POST",
                "/v1/chat/completions",
                HEADERS,
                BODY,
                connect_timeout=5,
                idle_timeout=30,
            )
            try:
                while data := await response.read():
                    events += data.count(b"\n\n")
            finally:
                response.release()
            requests += 1

    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await pool.close()
    return requests, events


async def seam_client(
    transport: str, port: int, seconds: float, concurrency: int
) -> tuple[int, int]:
    server = ServerModel(upstream_client=transport, upstream_max_in_flight=concurrency)  # type: ignore[arg-type]
    upstream = Upstream(open_transport(server))
    request = Request(
        Origin("http", "127.0.0.1", port), "POST", "/v1/chat/completions", HEADERS, BODY, 5, 30
    )
    events = requests = 0
    end = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal events, requests
        while time.perf_counter() < end:
            async with upstream.send(request) as response:
                read = response.read  # as the proxy's stream relay reads
                while data := await read():
                    events += data.count(b"\n\n")
            requests += 1

    await upstream.start()
    try:
        await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await upstream.close()
    return requests, events


CLIENTS = {
    "aiohttp": aiohttp_client,
    "httpx": httpx_client,
    "http1": http1_client,
    "seam-builtin": functools.partial(seam_client, "builtin"),
    "seam-aiohttp": functools.partial(seam_client, "aiohttp"),
}


BARE = ("aiohttp", "httpx", "http1")  # the default: the bare clients


def measure(name: str, port: int, seconds: float, concurrency: int) -> None:
    client = CLIENTS[name]
    before = resource.getrusage(resource.RUSAGE_SELF)
    requests, events = uvloop.run(client(port, seconds, concurrency))
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    print(
        f"{name:12} {requests:7,} requests {events:10,} events {events / seconds:12,.0f}/s"
        f"  CPU {cpu * 1e6 / max(events, 1):5.2f} us per event"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--port", type=int, default=0, help="the fake upstream's (0: a free one)")
    parser.add_argument(
        "--only", help=f"comma-separated, of: {', '.join(CLIENTS)} (default: the bare three)"
    )
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    if not args.port:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            args.port = probe.getsockname()[1]
    upstream = subprocess.Popen(
        ["taskset", "-c", "1", sys.executable, "-m", "bench.upstream", "--port", str(args.port)],
        cwd=root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        os.sched_setaffinity(0, {0})
        deadline = time.monotonic() + 10
        while True:  # wait for the upstream's socket
            try:
                uvloop.run(_probe(args.port))
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        for _ in range(args.rounds):
            for name in args.only.split(",") if args.only else BARE:
                measure(name, args.port, args.seconds, args.concurrency)
    finally:
        upstream.terminate()
        upstream.wait()


async def _probe(port: int) -> None:
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.close()
    await writer.wait_closed()


if __name__ == "__main__":
    main()
