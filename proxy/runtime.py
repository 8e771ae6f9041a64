"""What one proxy process holds while it runs: the config, the upstream
client, the store, the token counter and the tenant secret. Created by
`create_app`, opened and closed by the app's lifespan; endpoints receive it
as a value.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from functools import lru_cache
from typing import Any

from proxy.config import Config
from proxy.history.keys import tenant_of
from proxy.history.service import STORE_TIMEOUT, History, StoreHealth
from proxy.keymask import KeyMask, credential_values
from proxy.live import LiveFeed
from proxy.observability import Metrics
from proxy.sealing import Sealed, Sealer
from proxy.stores import open_store
from proxy.stores.base import ReasoningStore, StoreFailure
from proxy.stores.memory import MemoryStore
from proxy.tokenizer import Count, TokenCounter
from proxy.upstream import Transport, Upstream, open_transport

log = logging.getLogger("proxy")

# after the grace period, seconds the cut requests get to end their responses
# and store their turns (a store write is bounded by STORE_TIMEOUT)
CUT_SECONDS = STORE_TIMEOUT + 1.0
DRAIN_POLL = 0.1  # seconds between two looks for a second Ctrl-C while draining
REMEMBERED_KEY = 512  # characters: longer keys get their tenant computed every time
# seconds between two write checks of a store found down, so that /readyz and
# reasoning_proxy_store_up (of every worker) say it is back without traffic
STORE_RECHECK = 2.0

RANDOM_SECRET_WARNING = (
    "REASONING_PROXY_SECRET is not set and the store did not give its tenant secret. Until "
    "it does, requests use a random secret drawn for this run, so their stored turns and "
    "the sealed reasoning clients hold (Responses encrypted_content, Anthropic thinking "
    "signatures) are not found or opened after a restart or on another replica, and "
    "/readyz answers 503. The store is asked again every few seconds. Set "
    "REASONING_PROXY_SECRET not to depend on it."
)
KEPT_SECRET_NOTE = (
    "REASONING_PROXY_SECRET is not set: using the tenant secret kept in the %s store (the "
    "first start's), so stored turns and the sealed reasoning clients hold (Responses "
    "encrypted_content, Anthropic thinking signatures) survive a restart and are shared by "
    "every process on the store; whoever can read the store can read the secret too. Set "
    "REASONING_PROXY_SECRET to keep it out of the store."
)
# seconds between two asks for the store's tenant secret, after a failed one
SECRET_RETRY = (1.0, 5.0)
# seconds between two checks that the store still keeps the secret in use:
# one the store lost (Redis restarted without persistence, FLUSHALL) is
# written back, so a process started later adopts it rather than drawing anew
SECRET_CHECK = 2.0
SECRET_CONFLICT_ERROR = (
    "the tenant secret kept in the %s store is not the one this process uses (the store "
    "lost it and another process kept its own, or it was replaced): a client key is not "
    "the same tenant here as on the processes that use the store's secret, so /readyz "
    "answers 503 until the store holds this process's secret again. Restart this process "
    "to use the store's secret (what it stored under its own is then not found), or set "
    "REASONING_PROXY_SECRET on every process."
)
SECRET_AGREES_NOTE = (
    "the %s store holds this process's tenant secret again: /readyz no longer fails for it"
)
# with the memory store nothing the proxy keeps outlives the process; only
# sealed reasoning held by a client does, so the warning waits for the first seal
SEALED_SECRET_WARNING = (
    "REASONING_PROXY_SECRET is not set: sealed reasoning handed to clients (Responses "
    "encrypted_content, Anthropic thinking signatures) is sealed under a random secret "
    "drawn for this run and cannot be opened after a restart or on another replica. "
    "Set REASONING_PROXY_SECRET to keep it."
)


class WarningSealer(Sealer):
    """A Sealer under a secret drawn for this run: the first seal warns that
    the envelope will not open after a restart."""

    __slots__ = ("_warned",)

    def __init__(self, secret: bytes) -> None:
        super().__init__(secret)
        self._warned = False

    def seal(self, tenant: str, sealed: Sealed) -> str:
        if not self._warned:
            self._warned = True
            log.warning(SEALED_SECRET_WARNING)
        return super().seal(tenant, sealed)


def live_feed(store: ReasoningStore, secret: bytes) -> LiveFeed:
    """With a Redis store, the live feed goes through Redis too, so every
    process of the deployment (same store and key prefix, same tenant
    secret) shows every stream; otherwise it stays in process."""
    if getattr(store, "name", None) == "redis":
        # (a memory-only proxy never loads redis)
        from proxy.live_redis import RedisLiveFeed
        from proxy.stores.redis import RedisStore

        assert isinstance(store, RedisStore)
        return RedisLiveFeed(store.url, prefix=store.keys.prefix, secret=secret)
    return LiveFeed()


class Runtime:
    def __init__(
        self,
        config: Config,
        *,
        store: ReasoningStore | None = None,
        tokens: TokenCounter | None = None,
        transport: Transport | None = None,
        secret_drawn: bool = False,
    ) -> None:
        """`secret_drawn`: the config's tenant secret was drawn at random for
        this run (by `serve`), as if none were set."""
        self.config = config
        self.store = store if store is not None else open_store(config.store)
        self.metrics = Metrics()
        # the transport `server.upstream_client` names, unless one is given (tests)
        if transport is None:
            transport = open_transport(
                config.server,
                # with --workers, /metrics adds up one gauge file per process and a
                # scrape reaches one process: each keeps its own file current
                on_load=self.metrics.upstream_load if self.metrics.multiprocess else None,
            )
        self.upstream = Upstream(transport, queue_timeout=config.server.upstream_queue_timeout)
        self.tokens = tokens or TokenCounter()
        # route keys quoted back by an upstream are masked before clients see
        # them; so are the credentials of a route's egress proxy (an http
        # upstream's requests carry them to the proxy, which may quote them)
        self.key_mask = KeyMask.of(
            credential_values(
                (r.api_key.get() for r in config.routes if r.api_key is not None),
                (h for r in config.routes for h in r.headers),
                (r.upstream_proxy.authorization for r in config.routes if r.upstream_proxy),
            )
        )
        if config.secret is not None:
            self._secret = config.secret.get().encode()
        else:
            self._secret = secrets.token_bytes(32)
        in_process = isinstance(self.store, MemoryStore)
        # a secret drawn for this run: a store that outlives the process keeps
        # one instead (start() adopts it), so its turns outlive the process too
        self._secret_kept = (config.secret is None or secret_drawn) and not in_process
        # the store's secret is not known yet (it did not answer)
        self._secret_unknown = self._secret_kept
        # the store keeps a secret other than this process's (see SECRET_CONFLICT_ERROR)
        self.secret_conflict = False
        self._secret_task: asyncio.Task[None] | None = None
        self._store_task: asyncio.Task[None] | None = None
        self._live_started = False
        # reasoning that leaves inside client-held artefacts, sealed under the secret
        random_secret = config.secret is None or secret_drawn
        self.sealer = (
            WarningSealer(self._secret) if random_secret and in_process else Sealer(self._secret)
        )
        self.live = live_feed(self.store, self._secret)
        self.count = Count(self.tokens)
        self.health = StoreHealth(self.metrics)
        self.history = History(
            self.store,
            count=self.count,
            metrics=self.metrics,
            health=self.health,
            in_process=isinstance(self.store, MemoryStore),
        )
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

    @property
    def secret_pending(self) -> bool:
        """A client key may not be the tenant here that it is on the other
        processes of the store: the store's secret is not known yet, or the
        store keeps another one (`secret_state` says which). Not ready."""
        return self._secret_unknown or self.secret_conflict

    @property
    def secret_state(self) -> str | None:
        """Why the secret is not settled: "pending", "conflict", or None."""
        if self._secret_unknown:
            return "pending"
        return "conflict" if self.secret_conflict else None

    async def start(self) -> None:
        self.metrics.store_up.set(1)
        await self.upstream.start()
        if any(route.upstream.startswith("https:") for route in self.config.routes):
            # the trust store loads in ~0.1 s: now, not on the first request's path
            await asyncio.get_running_loop().run_in_executor(None, self.upstream.load_tls)
        try:
            await asyncio.wait_for(self.store.start(), STORE_TIMEOUT)
        except (TimeoutError, StoreFailure) as exc:
            self.health.failed("start", exc)
        if self._secret_unknown and not await self._secret_from_store():
            log.warning(RANDOM_SECRET_WARNING)
        if self._secret_kept:
            self._secret_task = asyncio.create_task(self._keep_secret())
        self._store_task = asyncio.create_task(self._recheck_store())
        await self.live.start()
        self._live_started = True
        # load the tokenizer now, off the event loop, not on the first request
        await asyncio.get_running_loop().run_in_executor(None, self.tokens.load)

    async def check_store(self) -> bool:
        """Whether the store takes writes now (its ping, a write check),
        counted as any store call (op `ping`): a failure marks the store down
        as a failed append does, and a success marks it up again, so
        `reasoning_proxy_store_up` agrees with /readyz."""
        try:
            await asyncio.wait_for(self.store.ping(), STORE_TIMEOUT)
        except (TimeoutError, StoreFailure) as exc:
            self.health.failed("ping", exc)
            return False
        self.health.counted("ping")
        self.health.succeeded()
        return True

    async def _recheck_store(self) -> None:
        """While the store is down, check it every STORE_RECHECK seconds:
        without it, only a request's write would find it back, and a process
        that serves none (an idle worker) would report it down for good."""
        while True:
            await asyncio.sleep(STORE_RECHECK)
            if not self.health.ok:
                await self.check_store()

    async def _secret_from_store(self) -> bool:
        """Use the tenant secret the store keeps (the one this process drew,
        when it is the first): every process on the store, now and after a
        restart, then makes a key the same tenant and opens the same seals.
        False when the store did not answer."""
        try:
            kept = await asyncio.wait_for(self.store.tenant_secret(self._secret), STORE_TIMEOUT)
        except (TimeoutError, StoreFailure):
            return False
        self._secret_unknown = False
        self._secret = kept
        self.sealer = Sealer(kept)
        self._tenant.cache_clear()  # before the old feed's viewers connect again
        previous, self.live = self.live, live_feed(self.store, kept)
        if self._live_started:  # the feed's channel is named after the secret
            await self.live.start()
            await previous.close()  # its viewers connect again, to this one
        log.warning(KEPT_SECRET_NOTE, self.store.name)
        return True

    async def _keep_secret(self) -> None:
        """Ask the store for its secret until it gives it; then check, every
        SECRET_CHECK seconds, that it still keeps that one."""
        delay, most = SECRET_RETRY
        while self._secret_unknown:
            await asyncio.sleep(delay)
            delay = min(delay * 2, most)
            await self._secret_from_store()
        while True:
            await asyncio.sleep(SECRET_CHECK)
            await self._check_kept_secret()

    async def _check_kept_secret(self) -> None:
        """Write this process's secret back where the store lost it (the
        store keeps what it has, else this one: the same call that gave it);
        a different one kept there is a conflict, said once, until it ends."""
        try:
            kept = await asyncio.wait_for(self.store.tenant_secret(self._secret), STORE_TIMEOUT)
        except (TimeoutError, StoreFailure):
            return  # the store's own checks say it is down; asked again next time
        if kept == self._secret:
            if self.secret_conflict:
                self.secret_conflict = False
                log.warning(SECRET_AGREES_NOTE, self.store.name)
        elif not self.secret_conflict:
            self.secret_conflict = True
            log.error(SECRET_CONFLICT_ERROR, self.store.name)

    async def close(self) -> None:
        tasks = [t for t in (self._secret_task, self._store_task) if t is not None]
        self._secret_task = self._store_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await self.live.close()
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
        if authorization is not None and len(authorization) > REMEMBERED_KEY:
            # a key can be as long as a header: remembered, 4,096 of them
            # would hold 32 MB; real keys are far shorter
            return tenant_of(self._secret, authorization)
        return self._tenant(authorization)

    def _tenant_uncached(self, authorization: str | None) -> str:
        return tenant_of(self._secret, authorization)
