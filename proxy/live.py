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
from collections.abc import Iterator
from typing import Any

from proxy.keymask import KeyMask, StreamMask

QUEUE_SIZE = 2048


class Subscription:
    __slots__ = ("dropped", "ended", "queue", "tenant")

    def __init__(self, tenant: str | None) -> None:
        self.tenant = tenant  # None: every tenant
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_SIZE)
        self.dropped = 0
        # set when the feed closes: its viewer's stream ends, and the page
        # connects again, to the feed that replaced this one
        self.ended = asyncio.Event()


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
        """End the subscriptions (nothing else to release in process)."""
        self.end_subscriptions()

    def end_subscriptions(self) -> None:
        """End every viewer's stream. A feed is closed at shutdown, and when
        the runtime replaces it (the store gave its tenant secret late): a
        viewer of the old one would see nothing more, its tenant being a
        hash under the secret it replaced, so its page connects again."""
        for sub in self._subscribers:
            sub.ended.set()

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
    """Announces one turn on the live feed: start, deltas, end.

    Route keys an upstream quotes are masked also when a key arrives split
    across two upstream reads (the page joins the deltas, so masking each
    delta alone would show it whole): the text of the current kind goes
    through one `StreamMask`, which holds back a tail that could begin a
    key until the next delta of that kind, a change of kind, or the end."""

    __slots__ = ("_conversation", "_feed", "_held", "_id", "_kind", "_mask", "_tenant")

    def __init__(
        self,
        feed: LiveFeed,
        tenant: str,
        conversation: str,
        mask: KeyMask | None = None,
    ) -> None:
        self._feed = feed
        self._tenant = tenant
        self._conversation = conversation
        self._id = uuid.uuid4().hex[:12]
        self._mask = mask  # route keys an upstream quoted, masked
        self._kind = ""  # the kind of the latest delta
        self._held: StreamMask | None = None  # its mask, holding a possible key's start

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
        for kind, text in runs:
            self._delta(kind, text)
        tap.clear()

    def _delta(self, kind: str, text: str) -> None:
        if self._mask is None:
            self._publish("delta", kind=kind, text=text)
            return
        if kind != self._kind or self._held is None:
            self._release()
            self._kind, self._held = kind, self._mask.stream()
        # whole UTF-8 characters in, whole ones out: a held tail starts where a key does
        safe = self._held.feed(text.encode(errors="surrogatepass")).decode(errors="surrogatepass")
        if safe:
            self._publish("delta", kind=kind, text=safe)

    def _release(self) -> None:
        """Publish what the mask holds: it was not the start of a key after all."""
        if self._held is not None:
            held = self._held.flush().decode(errors="surrogatepass")
            self._held = None
            if held:
                self._publish("delta", kind=self._kind, text=held)

    def whole(self, reasoning: list[str], content: str) -> None:
        """A response that came whole: its shown reasoning, then its answer."""
        tap = [("reasoning", text) for text in reasoning]
        if content:
            tap.append(("content", content))
        self.deltas(tap)

    def end(
        self,
        complete: bool,
        finish_reason: str | None,
        persisted: bool,
        truncated: bool = False,
        refusal: bool = False,
    ) -> None:
        self._release()
        self._publish(
            "turn_end",
            complete=complete,
            finishReason=finish_reason,
            persisted=persisted,
            reasoningTruncated=truncated,
            refusal=refusal,
        )
