"""Request slots: at most `limit` requests in flight, and, when the caller
gives one, at most an origin's gate's worth to that origin.

A request that finds no slot waits, first come first served, at most
`queue_timeout` seconds in all (for its origin's slot, then one of the
whole), then fails with PoolTimeout before anything is sent; a request
waiting for its origin holds no slot of the others. `in_flight` and
`waiting` count requests; `on_change(in_flight, waiting)`, when given, is
called whenever either changes. The built-in pool and the aiohttp
transport both take their slots here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from proxy.http1.errors import PoolTimeout
from proxy.http1.gate import Gate


class Slots:
    __slots__ = ("_all", "_on_change", "_queue_timeout", "in_flight", "waiting")

    def __init__(
        self,
        limit: int,
        queue_timeout: float,
        on_change: Callable[[int, int], None] | None = None,
    ) -> None:
        self._all = Gate(limit)
        self._queue_timeout = queue_timeout
        self._on_change = on_change
        self.in_flight = 0
        self.waiting = 0

    async def take(self, origin: Gate | None = None) -> None:
        """A slot of the whole, and one of `origin` when given."""
        whole = self._all
        if whole.open and (origin is None or origin.open):  # both at once
            if origin is not None:
                origin.take()
            whole.take()
        else:
            await self._queue(origin)
        self.in_flight += 1
        self._changed()

    async def _queue(self, origin: Gate | None) -> None:
        self.waiting += 1
        self._changed()
        holding = False
        try:
            async with asyncio.timeout(self._queue_timeout):
                if origin is not None:
                    await origin.wait()
                    holding = True
                await self._all.wait()
        except BaseException as exc:
            if holding and origin is not None:
                origin.give()
            if isinstance(exc, TimeoutError):
                raise PoolTimeout(f"no free request slot in {self._queue_timeout:g} s") from None
            raise
        finally:
            self.waiting -= 1
            self._changed()

    def give(self, origin: Gate | None = None) -> None:
        """Return what `take(origin)` took."""
        self._all.give()
        if origin is not None:
            origin.give()
        self.in_flight -= 1
        self._changed()

    def _changed(self) -> None:
        if self._on_change is not None:
            self._on_change(self.in_flight, self.waiting)
