"""Store throughput: turns written and looked up per second, per backend.

Not a test: run it, read the numbers.

    python bench/stores.py                  # memory, sqlite, redis
    python bench/stores.py --redis redis://127.0.0.1:6379/15 --turns 5000

Without `--redis`, a throwaway redis-server (no persistence) is started on a
free port and stopped at the end. Each turn is realistic: about 4 KB of
reasoning, a short answer and a tool call, indexed by its tool-call id and
fingerprint, in conversations of 10 turns. Columns:
- append/s: `append`, one call at a time (what one request waits for);
- lookup/s: `lookup` by tool-call id, in random order;
- history/s: `turns` of a 10-turn conversation (what a request with a
  conversation id reads);
- append/s xN: `append` with N calls in flight (many concurrent requests).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import socket
import string
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

from proxy.history.keys import ConversationKey
from proxy.reasoning.blocks import TextPart, ThinkingBlock, ToolCall, Turn
from proxy.stores.base import ReasoningStore, TurnRefs
from proxy.stores.memory import MemoryStore
from proxy.stores.redis import RedisStore
from proxy.stores.sqlite import SQLiteStore

TURNS_PER_CONVERSATION = 10
TENANT = "t-bench"


def make_turn(rng: random.Random, n: int) -> tuple[Turn, TurnRefs]:
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(700)]
    reasoning = " ".join(words)  # ~4 KB
    call = f"call_{n:08d}"
    turn = Turn(
        parts=(
            ThinkingBlock(reasoning, "reasoning_content"),
            TextPart(f"Calling the tool for item {n}."),
            ToolCall(call, "get_weather", f'{{"city": "city-{n}"}}'),
        ),
        finish_reason="tool_calls",
        usage={"prompt_tokens": 900, "completion_tokens": 1100},
        model="bench-model",
    )
    return turn, TurnRefs((call,), f"fp{n:030d}")


def key_of(n: int) -> ConversationKey:
    return ConversationKey(TENANT, f"conv-{n // TURNS_PER_CONVERSATION}")


async def rate(count: int, calls: Callable[[], Awaitable[None]]) -> float:
    started = time.perf_counter()
    await calls()
    return count / (time.perf_counter() - started)


async def measure(store: ReasoningStore, turns: int, concurrency: int) -> list[float]:
    rng = random.Random(7)
    data = [make_turn(rng, n) for n in range(turns)]
    await store.start()
    try:

        async def append_all() -> None:
            for n, (turn, refs) in enumerate(data):
                await store.append(key_of(n), turn, refs)

        async def lookup_all() -> None:
            for n in rng.sample(range(turns), turns):
                assert await store.lookup(TENANT, f"t:call_{n:08d}") is not None

        conversations = turns // TURNS_PER_CONVERSATION

        async def read_all() -> None:
            for c in range(conversations):
                await store.turns(key_of(c * TURNS_PER_CONVERSATION))

        async def append_concurrently() -> None:
            gate = asyncio.Semaphore(concurrency)

            async def one(n: int) -> None:
                async with gate:
                    turn, refs = data[n]
                    await store.append(ConversationKey(TENANT, f"conc-{n % 97}"), turn, refs)

            await asyncio.gather(*(one(n) for n in range(turns)))

        return [
            await rate(turns, append_all),
            await rate(turns, lookup_all),
            await rate(conversations, read_all),
            await rate(turns, append_concurrently),
        ]
    finally:
        await store.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def throwaway_redis(directory: Path) -> Iterator[str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server not found: install it or pass --redis URL")
    port = free_port()
    args = [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    args += ["--appendonly", "no", "--dir", str(directory)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("redis-server did not start") from None
                time.sleep(0.02)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        process.terminate()
        process.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--redis", help="use this Redis (keys under the bench: prefix)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="rp-bench-") as tmp:
        directory = Path(tmp)
        given = nullcontext(args.redis) if args.redis else None
        with given or throwaway_redis(directory) as redis_url:
            stores: list[tuple[str, ReasoningStore]] = [
                ("memory", MemoryStore()),
                ("sqlite", SQLiteStore(str(directory / "bench.db"))),
                ("redis", RedisStore(redis_url, prefix=f"bench{time.time_ns()}:")),
            ]
            header = [
                "backend",
                "append/s",
                "lookup/s",
                "history/s",
                f"append/s x{args.concurrency}",
            ]
            print(f"{args.turns} turns of ~4 KB, {TURNS_PER_CONVERSATION} per conversation")
            print(" | ".join(f"{h:>14}" for h in header))
            for name, store in stores:
                numbers = asyncio.run(measure(store, args.turns, args.concurrency))
                print(" | ".join([f"{name:>14}", *(f"{x:>14,.0f}" for x in numbers)]))


if __name__ == "__main__":
    main()
