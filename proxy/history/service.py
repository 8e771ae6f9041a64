"""History: the stored side of an exchange, in two calls.

`plan()` runs before the upstream call: it reads the request's assistant
messages, finds the stored turns of those that carry no reasoning (by
tool-call id, else fingerprint), and plans what goes upstream (re-inject or
strip per dialect and settings, context accounting, compression).
`remember()` runs once the response ended (or was cut): it stores the turn.

Neither raises for the store's sake: a failed lookup plans as if nothing was
stored, a failed write returns the turn with `persisted: false`; both are
counted, and logged once until the store works again (`StoreHealth`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import replace
from itertools import chain
from typing import Any

from proxy.config import Route
from proxy.dialects import Dialect
from proxy.errors import StoreUnavailable
from proxy.history.context import EgressPlan, plan_egress, request_texts, tools_text
from proxy.history.egress import (
    find_stored,
    known_reasoning,
    read_history,
    tool_turns,
    turn_placed,
    turn_refs_of,
)
from proxy.history.explain import egress_notes
from proxy.history.keys import ConversationKey
from proxy.history.threads import CONVERSATION, continued_conversation, new_conversation_id
from proxy.observability import Metrics
from proxy.reasoning.blocks import Turn, with_token_counts
from proxy.settings import ReasoningSettings
from proxy.stores.base import ReasoningStore, StoreFailure, TurnRefs
from proxy.tokenizer import LONG_TEXT, Count

log = logging.getLogger("proxy")

STORE_TIMEOUT = 5.0  # seconds a store call may take before it counts as failed


class StoreHealth:
    """Whether the store works, as the last call found it: failures are
    counted every time and logged once until a call succeeds again."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics
        self.ok = True
        self.failures = 0
        self._logged = False

    def failed(self, what: str, exc: BaseException) -> None:
        self.ok = False
        self.failures += 1
        self.metrics.child(self.metrics.store_ops, what, "error").inc()
        self.metrics.store_up.set(0)
        if not self._logged:
            self._logged = True
            # StoreFailure messages name the backend's problem (host and port,
            # "readonly database"), never a credential
            reason = str(exc) if isinstance(exc, StoreFailure) else type(exc).__name__
            log.error(
                "store %s failed (%s); responses continue, turns are not persisted",
                what,
                reason,
            )

    def counted(self, what: str) -> None:
        """A store call that worked."""
        self.metrics.child(self.metrics.store_ops, what, "ok").inc()

    def succeeded(self) -> None:
        if not self.ok:
            log.warning("store is back; turns are persisted again")
            self.metrics.store_up.set(1)
        self.ok = True
        self._logged = False

    @contextlib.contextmanager
    def errors(self, what: str) -> Iterator[None]:
        """For API calls that cannot do without the store: a StoreFailure is
        counted and becomes a 503 (StoreUnavailable)."""
        try:
            yield
        except StoreFailure as exc:
            self.failed(what, exc)
            raise StoreUnavailable("The store is unavailable.") from None
        self.counted(what)


class CountedReads:
    """The store's two reads of a plan, each counted in
    store_operations_total (`lookup`: the tenant's index, `read`: a named
    conversation); a failure is counted by the caller (StoreHealth.failed)."""

    __slots__ = ("_health", "_store")

    def __init__(self, store: ReasoningStore, health: StoreHealth) -> None:
        self._store = store
        self._health = health

    async def lookup(self, tenant: str, index_key: str) -> Turn | None:
        turn = await self._store.lookup(tenant, index_key)
        self._health.counted("lookup")
        return turn

    async def turns(self, key: ConversationKey) -> list[Turn]:
        turns = await self._store.turns(key)
        self._health.counted("read")
        return turns


class History:
    def __init__(
        self,
        store: ReasoningStore,
        *,
        count: Count,
        metrics: Metrics,
        health: StoreHealth,
        in_process: bool,
    ) -> None:
        self.store = store
        self.count = count
        self.metrics = metrics
        self.health = health
        self.reads = CountedReads(store, health)
        # an in-process store does no I/O: its calls need no timeout or shield
        self.in_process = in_process

    async def plan(
        self,
        key: ConversationKey,
        *,
        scoped: bool,
        messages: list[Any],
        tools: Any,
        route: Route,
        settings: ReasoningSettings,
        dialect: Dialect | None = None,
        large: bool = True,
        counting: bool = False,
    ) -> EgressPlan:
        """What goes upstream for these messages. `scoped`: the client named
        the conversation, so stored turns are looked for only in it.
        `dialect`: the one this request got (default: the route's). `large`:
        the request may hold a long text (its body is LONG_TEXT bytes or
        more); a smaller one holds none, and is not looked through for any.
        `counting`: only its tokens are wanted (nothing is sent), so the
        metrics of what is sent are left alone."""
        dialect = dialect or route.dialect
        assistants, place = read_history(messages, route.tags)
        try:
            stored = await find_stored(self.reads, key, scoped, assistants)
        except StoreFailure as exc:
            self.health.failed("lookup", exc)
            stored = {}
        known = known_reasoning(assistants, stored)
        tools_json = tools_text(tools)
        # long texts are counted off the event loop first (Count.warm): the
        # stored reasoning, and what this process may not have seen yet (the
        # messages from the last assistant turn on, and the tools)
        texts: Iterable[str] = [r.text for r in known if r is not None and len(r.text) >= LONG_TEXT]
        if large:
            start = assistants[-1].position if assistants else 0
            texts = chain(texts, request_texts(messages[start:], tools_json))
        if large or texts:
            await self.count.warm(texts)
        plan = plan_egress(
            messages,
            tools,
            assistants,
            known,
            dialect=dialect,
            include=settings.include_in_context,
            strip=settings.strip_from_context,
            native_format=settings.format == "native",
            context_limit=route.context_limit,
            threshold=route.compression_threshold,
            count=self.count,
            tools_json=tools_json,
            place=place,
        )
        if not counting:
            metrics = self.metrics
            if plan.result.reinjected:
                metrics.child(metrics.reinjected, dialect.name).inc(plan.result.reinjected)
            if plan.result.stripped:
                metrics.child(metrics.stripped, dialect.name).inc(plan.result.stripped)
            if plan.compressed:
                metrics.child(metrics.compressions, plan.compressed).inc()
        # what was done with each message's reasoning, and why (the inspector)
        notes = egress_notes(
            assistants,
            known,
            plan.result.sent,
            dialect=dialect,
            include=settings.include_in_context,
            strip=settings.strip_from_context,
            compressed=plan.compressed,
            needs=tool_turns(messages, assistants, dialect),
        )
        return EgressPlan(plan.result, plan.effective, plan.raw, plan.compressed, notes)

    async def conversation_for(self, tenant: str, messages: list[Any], route: Route) -> str:
        """The id of the conversation a request without X-Conversation-Id
        continues, or a new one (`proxy.history.threads`)."""
        try:
            found = await continued_conversation(self.reads, tenant, messages, route.tags)
        except StoreFailure as exc:
            self.health.failed("lookup", exc)
            found = None
        return found or new_conversation_id()

    async def remember(
        self, key: ConversationKey, turn: Turn, route: Route, extra: dict[str, Any] | None = None
    ) -> Turn:
        """Store a finished (or cut) turn, with its token counts. Never
        raises: a store failure gives the turn back with `persisted: false`.
        A client that leaves while the store writes does not cut the write."""
        changes: dict[str, Any] = {"route": route.name, "created": time.time()}
        # the turn names its conversation, for requests that do not (threads)
        extra = turn.extra if extra is None else extra
        changes["extra"] = {**extra, CONVERSATION: key.conversation}
        texts = [b.thought for b in turn.thinking if not self.count.known(b.thought)]
        if texts:
            # long reasoning, counted off the event loop first (also for the
            # requests that send it back); a client that leaves meanwhile
            # does not cut the write
            return await asyncio.shield(self._count_and_store(key, turn, changes, texts))
        return await self._store(key, turn, changes)

    async def _count_and_store(
        self, key: ConversationKey, turn: Turn, changes: dict[str, Any], texts: list[str]
    ) -> Turn:
        await self.count.warm(texts)
        return await self._store(key, turn, changes)

    async def _store(self, key: ConversationKey, turn: Turn, changes: dict[str, Any]) -> Turn:
        turn = with_token_counts(turn, self.count, **changes)
        metrics = self.metrics
        for block in turn.thinking:
            metrics.child(metrics.reasoning_blocks, block.source_field).inc()
        delimiters = turn.extra.get("delimiters")
        if isinstance(delimiters, int) and delimiters:
            metrics.delimiters.inc(delimiters)
        if self.in_process:
            return await self._append(key, turn)
        return await asyncio.shield(self._append(key, turn))

    async def _append(self, key: ConversationKey, turn: Turn) -> Turn:
        ids, fp = turn_refs_of(turn)
        try:
            append = self.store.append(key, turn, TurnRefs(ids, fp, turn_placed(turn, fp)))
            if self.in_process:
                await append
            else:
                await asyncio.wait_for(append, STORE_TIMEOUT)
        except (TimeoutError, StoreFailure) as exc:
            self.health.failed("append", exc)
            return replace(turn, persisted=False)
        self.metrics.child(self.metrics.store_ops, "append", "ok").inc()
        self.health.succeeded()
        return turn
