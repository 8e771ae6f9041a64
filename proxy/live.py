"""The live feed: what streams through the proxy right now, for the inspector.

In-process publish/subscribe. Each subscriber has a bounded queue and sees
only its tenant's events (the admin sees all); a slow subscriber loses
events rather than slowing a stream down. With several workers or replicas
on a memory or SQLite store, a page sees the streams of the process serving
it (stored turns are shared through the store); with a Redis store,
`proxy/live_redis.py` carries the events between processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
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
        """Someone watches: worth describing the streams."""
        return bool(self._subscribers)

    async def start(self) -> None:
        """Nothing to connect in process (a feed between processes does)."""

    async def close(self) -> None:
        """Nothing to release in process."""

    def publish(self, tenant: str, event: dict[str, Any]) -> None:
        self.deliver(tenant, event)

    def deliver(self, tenant: str, event: dict[str, Any]) -> None:
        """Queue `event` for this process's subscribers of the tenant; admin
        subscribers (who see everyone) also get the tenant, to tell
        same-named conversations apart."""
        for sub in self._subscribers:
            if sub.tenant is None:
                item = {**event, "tenant": tenant}
            elif sub.tenant == tenant:
                item = event
            else:
                continue
            try:
                sub.queue.put_nowait(item)
            except asyncio.QueueFull:
                sub.dropped += 1

    @contextlib.contextmanager
    def subscribe(self, tenant: str | None) -> Iterator[Subscription]:
        sub = Subscription(tenant)
        self._subscribers.add(sub)
        self._watched(True)
        try:
            yield sub
        finally:
            self._subscribers.discard(sub)
            self._watched(bool(self._subscribers))

    def _watched(self, watched: bool) -> None:
        """This process's subscribers came or all left (for a feed between processes)."""

    def missed(self) -> None:
        """Events may have been lost on the way: each subscriber is told (its
        page then reloads from the store)."""
        for sub in self._subscribers:
            sub.dropped += 1


class TurnWatcher:
    """Announces one turn on the live feed: start, deltas, end."""

    __slots__ = ("_conversation", "_feed", "_id", "_mask", "_tenant")

    def __init__(
        self,
        feed: LiveFeed,
        tenant: str,
        conversation: str,
        mask: Callable[[str], str] | None = None,
    ) -> None:
        self._feed = feed
        self._tenant = tenant
        self._conversation = conversation
        self._id = uuid.uuid4().hex[:12]
        self._mask = mask  # route keys an upstream quoted, masked

    def _publish(self, event_type: str, **fields: Any) -> None:
        event = {
            "type": event_type,
            "conversation": self._conversation,
            "turnId": self._id,
            **fields,
        }
        self._feed.publish(self._tenant, event)

    def start(self, model: Any, route: str, context: dict[str, int]) -> None:
        self._publish("turn_start", model=model, route=route, created=time.time(), context=context)

    def deltas(self, tap: list[tuple[str, str]]) -> None:
        """Publish (kind, text) pairs, runs of one kind joined; empties `tap`."""
        runs: list[list[str]] = []
        for kind, text in tap:
            if runs and runs[-1][0] == kind:
                runs[-1][1] += text
            else:
                runs.append([kind, text])
        mask = self._mask
        for kind, text in runs:
            self._publish("delta", kind=kind, text=mask(text) if mask is not None else text)
        tap.clear()

    def whole(self, reasoning: list[str], content: str) -> None:
        """A response that came whole: its shown reasoning, then its answer."""
        tap = [("reasoning", text) for text in reasoning]
        if content:
            tap.append(("content", content))
        self.deltas(tap)

    def end(
        self, complete: bool, finish_reason: str | None, persisted: bool, truncated: bool = False
    ) -> None:
        self._publish(
            "turn_end",
            complete=complete,
            finishReason=finish_reason,
            persisted=persisted,
            reasoningTruncated=truncated,
        )
