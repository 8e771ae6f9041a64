"""What one proxy process holds while it runs: the config, the upstream
client, the store, the token counter and the tenant secret. Created by
`create_app`, opened and closed by the app's lifespan; endpoints receive it
as a value.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import Iterator
from dataclasses import replace
from functools import lru_cache
from typing import Any

from proxy.config import Config, Route
from proxy.errors import StoreUnavailable
from proxy.history.egress import turn_refs_of
from proxy.history.keys import ConversationKey, tenant_of
from proxy.keymask import KeyMask, credential_values
from proxy.live import LiveFeed
from proxy.observability import Metrics
from proxy.reasoning.blocks import Turn, with_token_counts
from proxy.reasoning.tokens import TokenCounter
from proxy.stores import open_store
from proxy.stores.base import ReasoningStore, StoreFailure, TurnRefs
from proxy.stores.memory import MemoryStore
from proxy.upstream import Upstream

log = logging.getLogger("proxy")

STORE_TIMEOUT = 5.0  # seconds a store call may take before it counts as failed
# after the grace period, seconds the cut requests get to end their responses
# and store their turns (a store write is bounded by STORE_TIMEOUT)
CUT_SECONDS = STORE_TIMEOUT + 1.0
DRAIN_POLL = 0.1  # seconds between two looks for a second Ctrl-C while draining

RANDOM_SECRET_WARNING = (
    "REASONING_PROXY_SECRET is not set: a random tenant secret was generated, so "
    "stored conversations cannot be found again after a restart or from another "
    "replica. Set it for durable or shared stores."
)


class Runtime:
    def __init__(
        self,
        config: Config,
        *,
        store: ReasoningStore | None = None,
        tokens: TokenCounter | None = None,
    ) -> None:
        self.config = config
        self.store = store if store is not None else open_store(config.store)
        self.metrics = Metrics()
        self.upstream = Upstream(
            pool_size=config.server.upstream_max_in_flight,
            queue_timeout=config.server.upstream_queue_timeout,
            # with --workers, /metrics adds up one gauge file per process and a
            # scrape reaches one process: each keeps its own file current
            on_load=self.metrics.upstream_load if self.metrics.multiprocess else None,
        )
        self.tokens = tokens or TokenCounter()
        # route keys quoted back by an upstream are masked before clients see them
        self.key_mask = KeyMask.of(
            credential_values(
                (r.api_key.get() for r in config.routes if r.api_key is not None),
                (h for r in config.routes for h in r.headers),
            )
        )
        if config.secret is not None:
            self._secret = config.secret.get().encode()
        else:
            self._secret = secrets.token_bytes(32)
        self.live = LiveFeed()
        # an in-process store does no I/O: its calls need no timeout or shield
        self.store_in_process = isinstance(self.store, MemoryStore)
        self.store_ok = True
        self.store_failures = 0
        self._store_failure_logged = False
        self.count = lru_cache(maxsize=16384)(self.tokens.count)
        # the same few keys come again and again: one HMAC per key, not per request
        self._tenant = lru_cache(maxsize=4096)(self._tenant_uncached)
        # Shutdown (driven by proxy/serving.py): `draining` refuses new requests
        # with 503 while `requests` (chat and pass-through, registered by the
        # app) run on; `cut` is set when the grace period ends, just before the
        # requests still running are cancelled.
        self.draining = False
        self.cut = False
        self.requests: set[asyncio.Task[Any]] = set()
        self._grace_over = False

    async def start(self) -> None:
        if self.config.secret is None:
            log.warning(RANDOM_SECRET_WARNING)
        self.metrics.store_up.set(1)
        await self.upstream.start()
        if any(route.upstream.startswith("https:") for route in self.config.routes):
            # the trust store loads in ~0.1 s: now, not on the first request's path
            await asyncio.get_running_loop().run_in_executor(None, self.upstream.load_tls)
        try:
            await asyncio.wait_for(self.store.start(), STORE_TIMEOUT)
        except (TimeoutError, StoreFailure) as exc:
            self.store_call_failed("start", exc)
        # load the tokenizer now, off the event loop, not on the first request
        await asyncio.get_running_loop().run_in_executor(None, self.tokens.load)

    async def close(self) -> None:
        await self.upstream.close()
        try:
            await asyncio.wait_for(self.store.close(), STORE_TIMEOUT)
        except (TimeoutError, StoreFailure) as exc:
            log.warning("closing the store failed: %s", type(exc).__name__)

    # -- shutdown --------------------------------------------------------------------

    def end_grace(self) -> None:
        """End the grace period now (safe in a signal handler: one attribute)."""
        self._grace_over = True

    async def drain(self) -> None:
        """Refuse new requests; wait for the ones in progress, at most
        `server.shutdown_grace_seconds`; then cut those left: each is
        cancelled with `cut` set, so it ends its response with a
        `server_shutting_down` error and stores its turn as incomplete."""
        self.draining = True
        loop = asyncio.get_running_loop()
        grace = self.config.server.shutdown_grace_seconds
        deadline = loop.time() + grace
        if self.requests:
            log.info(
                "shutting down: new requests get 503; %d in progress get up to %g s",
                len(self.requests),
                grace,
            )
        # no request joins now (draining refuses them): wait for these
        pending = set(self.requests)
        while pending and not self._grace_over and loop.time() < deadline:
            timeout = min(deadline - loop.time(), DRAIN_POLL)
            _, pending = await asyncio.wait(pending, timeout=timeout)
        left = list(self.requests)
        if not left:
            return
        log.warning("shutdown grace period over: cutting %d request(s) in progress", len(left))
        self.cut = True
        for task in left:
            task.cancel()
        await asyncio.wait(left, timeout=CUT_SECONDS)

    def tenant(self, authorization: str | None) -> str:
        return self._tenant(authorization)

    def _tenant_uncached(self, authorization: str | None) -> str:
        return tenant_of(self._secret, authorization)

    async def record(
        self, key: ConversationKey, turn: Turn, route: Route, extra: dict[str, Any] | None = None
    ) -> Turn:
        """Store a finished (or cut) turn. Never raises: a store failure is
        logged once, counted, and returned as `persisted: false`."""
        changes: dict[str, Any] = {"route": route.name, "created": time.time()}
        if extra is not None:
            changes["extra"] = extra
        turn = with_token_counts(turn, self.count, **changes)
        ids, fp = turn_refs_of(turn)
        metrics = self.metrics
        for block in turn.thinking:
            metrics.child(metrics.reasoning_blocks, block.source_field).inc()
        delimiters = turn.extra.get("delimiters")
        if isinstance(delimiters, int) and delimiters:
            metrics.delimiters.inc(delimiters)
        try:
            append = self.store.append(key, turn, TurnRefs(ids, fp))
            if self.store_in_process:
                await append
            else:
                await asyncio.wait_for(append, STORE_TIMEOUT)
        except (TimeoutError, StoreFailure) as exc:
            self.store_call_failed("append", exc)
            return replace(turn, persisted=False)
        metrics.child(metrics.store_ops, "append", "ok").inc()
        self._store_recovered()
        return turn

    @contextlib.contextmanager
    def store_errors(self, what: str) -> Iterator[None]:
        """For API calls that cannot do without the store: a StoreFailure is
        counted and becomes a 503 (StoreUnavailable)."""
        try:
            yield
        except StoreFailure as exc:
            self.store_call_failed(what, exc)
            raise StoreUnavailable("The store is unavailable.") from None

    def store_call_failed(self, what: str, exc: BaseException) -> None:
        self.store_ok = False
        self.store_failures += 1
        self.metrics.child(self.metrics.store_ops, what, "error").inc()
        self.metrics.store_up.set(0)
        if not self._store_failure_logged:
            self._store_failure_logged = True
            # StoreFailure messages name the backend's problem (host and port,
            # "readonly database"), never a credential
            reason = str(exc) if isinstance(exc, StoreFailure) else type(exc).__name__
            log.error(
                "store %s failed (%s); responses continue, turns are not persisted",
                what,
                reason,
            )

    def _store_recovered(self) -> None:
        if not self.store_ok:
            log.warning("store is back; turns are persisted again")
            self.metrics.store_up.set(1)
        self.store_ok = True
        self._store_failure_logged = False
