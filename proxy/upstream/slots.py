"""Request slots: at most `limit` upstream requests in flight, with a bounded
wait for a free one (for transports without a pool that does this; the
built-in client's pool does the same itself).

A request that finds every slot taken waits, first come first served, at
most `queue_timeout` seconds, then fails with TransportError("busy") before
anything is sent. `on_change(in_flight, waiting)` is called whenever either
count changes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from proxy.http1.gate import Gate
from proxy.upstream.errors import TransportError


class Slots:
    def __init__(
        self,
        limit: int,
        queue_timeout: float,
        on_change: Callable[[int, int], None] | None = None,
    ) -> None:
        self._free = Gate(limit)
        self._queue_timeout = queue_timeout
        self._on_change = on_change
        self.in_flight = 0
        self.waiting = 0

    async def acquire(self) -> None:
        free = self._free
        if free.open:
            free.take()  # at once
        else:
            self.waiting += 1
            self._changed()
            try:
                async with asyncio.timeout(self._queue_timeout):
                    await free.wait()
            except TimeoutError:
                raise TransportError(
                    "busy", f"no free request slot in {self._queue_timeout:g} s"
                ) from None
            finally:
                self.waiting -= 1
                self._changed()
        self.in_flight += 1
        self._changed()

    def release(self) -> None:
        self._free.give()
        self.in_flight -= 1
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.in_flight, self.waiting)
