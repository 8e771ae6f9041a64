"""The live feed: what streams through the proxy right now, for the inspector.

In-process publish/subscribe. Each subscriber has a bounded queue and sees
only its tenant's events (the admin sees all); a slow subscriber loses
events rather than slowing a stream down. With several workers or replicas,
a page sees the streams of the process serving it; stored turns are shared
through the store.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

QUEUE_SIZE = 2048


class Subscription:
    __slots__ = ("dropped", "queue", "tenant")

    def __init__(self, tenant: str | None) -> None:
        self.tenant = tenant  # None: every tenant
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self.dropped = 0


class LiveFeed:
    def __init__(self) -> None:
        self._subscribers: set[Subscription] = set()

    @property
    def active(self) -> bool:
        return bool(self._subscribers)

    def publish(self, tenant: str, event: dict[str, Any]) -> None:
        for sub in self._subscribers:
            if sub.tenant is None or sub.tenant == tenant:
                try:
                    sub.queue.put_nowait(event)
                except asyncio.QueueFull:
                    sub.dropped += 1

    @contextlib.contextmanager
    def subscribe(self, tenant: str | None) -> Iterator[Subscription]:
        sub = Subscription(tenant)
        self._subscribers.add(sub)
        try:
            yield sub
        finally:
            self._subscribers.discard(sub)
