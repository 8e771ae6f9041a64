"""Gate: a counting semaphore for one event loop, first come first served,
with a synchronous fast path.

`asyncio.Semaphore` costs a coroutine and a scan of its waiters on every
acquire, even when a slot is free; a pool takes two slots per request. Here
a free slot is taken with a check and a decrement (`open`, `take`), and only
a request that finds none waits (`wait`). A released slot goes straight to
the first waiter, so nobody can jump the line.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque


class Gate:
    __slots__ = ("_waiters", "free")

    def __init__(self, slots: int) -> None:
        self.free = slots
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def open(self) -> bool:
        """A slot is free and nobody waits for one."""
        return self.free > 0 and not self._waiters

    def take(self) -> None:
        """Take a free slot at once (check `open` first)."""
        assert self.free > 0
        self.free -= 1

    async def wait(self) -> None:
        """Take a slot, after those who came first; cancelling the wait
        leaves the line (and passes on a slot handed over meanwhile)."""
        if self.free > 0 and not self._waiters:
            self.free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter
        except BaseException:
            if waiter.done() and not waiter.cancelled():
                self.give()  # the slot came as the wait was cancelled
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise

    def give(self) -> None:
        """Return a slot: to the first waiter, else to the free ones."""
        waiters = self._waiters
        while waiters:
            waiter = waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.free += 1
