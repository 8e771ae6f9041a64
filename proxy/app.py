"""create_app(config): the ASGI application.

The two hot paths (chat completions and the /v1 pass-through) are raw ASGI
endpoints picked by path before any framework code runs; everything else
(health, conversations, profiles, the inspector, metrics) is a FastAPI app,
whose lifespan opens and closes the runtime (upstream client, store).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from starlette.exceptions import HTTPException

from proxy.api.asgi import ASGIApp, Message, Receive, Scope, Send, send_bytes, send_error
from proxy.api.chat import ChatEndpoint
from proxy.api.conversations import conversations_router
from proxy.api.messages import CountTokensEndpoint, MessagesEndpoint, send_anthropic_error
from proxy.api.models import MODELS_PATH, AnthropicModelsEndpoint, anthropic_client
from proxy.api.ops import ops_router
from proxy.api.passthrough import PassthroughEndpoint
from proxy.api.profiles import profiles_router
from proxy.api.responses import (
    COMPACT_PATH,
    INPUT_TOKENS_PATH,
    RESPONSES_PATH,
    CompactEndpoint,
    InputTokensEndpoint,
    ResponsesEndpoint,
    responses_router,
)
from proxy.api.trace import Trace
from proxy.api.ui import ui_router
from proxy.config import (
    ENV_CONFIG,
    ENV_STORE,
    ENV_UPSTREAM,
    Config,
    Secret,
    load_config,
    upstream_config,
    with_overrides,
)
from proxy.doors.messages.shapes import MESSAGES_PATH, wants_anthropic
from proxy.errors import (
    BadRequest,
    ConfigError,
    Forbidden,
    LoopDetected,
    MethodNotAllowed,
    NotFound,
    ProxyError,
    ServerShuttingDown,
)
from proxy.hosts import HostGuard
from proxy.runtime import Runtime
from proxy.upstream import Ends

log = logging.getLogger("proxy")

CHAT_PATH = "/v1/chat/completions"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
# /v1 paths the proxy answers itself; every other /v1 path is passed through
OWN_PREFIXES = ("/v1/conversations", "/v1/reasoning/")
# answered while the process drains before it stops (probes and scrapes)
DRAIN_PATHS = frozenset(("/healthz", "/readyz", "/metrics"))
# endpoint labels (metrics, log lines) of the requests the dispatch refuses
# itself (a wrong method, a shutdown), by the front door's exact path: the
# label the door's own requests have
DOOR_ENDPOINTS = {
    CHAT_PATH: "chat.completions",
    MESSAGES_PATH: "messages",
    COUNT_TOKENS_PATH: "messages.count_tokens",
    RESPONSES_PATH: "responses",
    INPUT_TOKENS_PATH: "responses.input_tokens",
    COMPACT_PATH: "responses.compact",
    "/": "root",
}
# and of the requests the FastAPI routers serve
API_ENDPOINTS = (
    ("/v1/conversations", "conversations"),
    ("/v1/reasoning/profiles", "profiles"),
    ("/v1/responses", "responses"),
    ("/v1/messages", "messages"),
    ("/v1/responses/", "responses"),
    ("/ui", "ui"),
    ("/healthz", "healthz"),
    ("/readyz", "readyz"),
    ("/metrics", "metrics"),
)
# a 405 says which methods the path takes (RFC 9110: Allow)
ONLY_POST = {"Allow": "POST"}
ENV_OVERRIDES = "_REASONING_PROXY_OVERRIDES"  # server options, from `serve` to its workers
# the tenant secret `serve` drew when none is configured, for its workers
ENV_WORKER_SECRET = "_REASONING_PROXY_WORKER_SECRET"


class ProxyApp:
    """Dispatch by path: hot paths to raw endpoints, the rest to FastAPI."""

    def __init__(
        self, runtime: Runtime, api: FastAPI, mounts: dict[str, ASGIApp] | None = None
    ) -> None:
        self.runtime = runtime
        self.api = api
        self.chat = ChatEndpoint(runtime)
        self.passthrough = PassthroughEndpoint(runtime, self.chat.planner)
        self.responses = ResponsesEndpoint(runtime, self.chat.planner)
        # stored responses live where the Responses requests go: here, or at
        # a default route whose upstream speaks the Responses API itself
        default = runtime.config.route_for(None)
        self.own_responses = default is None or default.api != "responses"
        self.input_tokens = InputTokensEndpoint(self.responses, self.passthrough)
        self.compact = CompactEndpoint(self.responses, self.passthrough)
        self.messages = MessagesEndpoint(runtime, self.chat.planner)
        self.count_tokens = CountTokensEndpoint(runtime, self.messages)
        # Anthropic clients get the model list in their shape, converted here
        # unless the upstream asked speaks Messages (and so that shape)
        self.anthropic_models = AnthropicModelsEndpoint(
            runtime, self.chat.planner, self.passthrough
        )
        self.mounts = tuple((mounts or {}).items())
        self.own_connections = runtime.upstream.own_connections
        allowed = runtime.config.server.allowed_origins
        self.origins = None if "*" in allowed else frozenset(o.rstrip("/") for o in allowed)
        self.hosts = HostGuard.build(runtime.config.server.allowed_hosts, (socket.gethostname(),))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.api(scope, receive, send)
            return
        path = scope["path"]
        for prefix, app in self.mounts:
            if path.startswith(prefix + "/"):
                scope = {**scope, "path": path[len(prefix) :], "root_path": prefix}
                await app(scope, receive, send)
                return
        # a mounted app (the demo's simulated upstreams) is served to anyone,
        # this process's own upstream connections included; the proxy is not
        own = self.own_connections
        if own and _from_own(own, scope):
            await self._loop_back(scope, send)
            return
        rt = self.runtime
        hosts = self.hosts
        if hosts is not None and not hosts.serves(scope.get("server"), *host_of(scope)):
            await self._refuse(scope, send, Forbidden(FOREIGN_HOST, code="forbidden_host"))
            return
        page, origin = page_origin(scope, self.origins)
        if page:
            if page == "foreign":
                await self._refuse(scope, send, Forbidden(FOREIGN_PAGE, code="forbidden_origin"))
                return
            if scope["method"] == "OPTIONS" and any(
                k == b"access-control-request-method" for k, _ in scope["headers"]
            ):
                await preflight(scope, send, origin)
                return
            send = with_cors(send, origin)
        if rt.draining and path not in DRAIN_PATHS:
            await self._refuse(scope, send, ServerShuttingDown())
            return
        endpoint: ASGIApp
        door = door_path(path)
        if door == CHAT_PATH:
            if scope["method"] != "POST":
                await self._refuse(
                    scope,
                    send,
                    MethodNotAllowed("Use POST for chat completions.", headers=ONLY_POST),
                )
                return
            endpoint = self.chat
        elif door in (MESSAGES_PATH, COUNT_TOKENS_PATH):
            if scope["method"] != "POST":
                await self._refuse(
                    scope, send, MethodNotAllowed("Use POST for messages.", headers=ONLY_POST)
                )
                return
            endpoint = self.messages if door == MESSAGES_PATH else self.count_tokens
        elif door in (INPUT_TOKENS_PATH, COMPACT_PATH):
            # routed by the body's model: passed to a Responses upstream (the
            # proxy's own reasoning items left out), answered here for a chat one
            if scope["method"] != "POST":
                await self._refuse(
                    scope, send, MethodNotAllowed("Use POST for this endpoint.", headers=ONLY_POST)
                )
                return
            endpoint = self.input_tokens if door == INPUT_TOKENS_PATH else self.compact
        elif door == RESPONSES_PATH:
            if scope["method"] != "POST":
                await self._refuse(
                    scope,
                    send,
                    MethodNotAllowed("Use POST to create a response.", headers=ONLY_POST),
                )
                return
            endpoint = self.responses
        elif (
            scope["method"] == "GET"
            and (door == MODELS_PATH or door.startswith(MODELS_PATH + "/"))
            and anthropic_client(scope)
        ):
            endpoint = self.anthropic_models
        elif (
            path.startswith("/v1/")
            and not path.startswith(OWN_PREFIXES)
            and not (self.own_responses and path.startswith(RESPONSES_PATH + "/"))
        ):
            endpoint = self.passthrough
        else:
            # the routers make no log line or metrics of their own
            trace = Trace(send, rt.metrics, api_endpoint(path), scope)
            try:
                await self.api(scope, receive, trace.send)
            finally:
                trace.finish()
            return
        # the requests a shutdown waits for (and cuts when its grace period ends)
        task = asyncio.current_task()
        assert task is not None
        rt.requests.add(task)
        try:
            await endpoint(scope, receive, send)
        except asyncio.CancelledError:
            if not rt.cut:
                raise
            # cut at the end of the grace period, where the endpoint could not
            # answer itself (still reading the request): end here, no traceback
            task.uncancel()
        finally:
            rt.requests.discard(task)

    async def _loop_back(self, scope: Scope, send: Send) -> None:
        """A request on one of this process's own upstream connections: a
        route leads back here. Refused at once (in the Messages shape on its
        paths), so the loop ends at its first turn instead of filling every
        upstream slot."""
        log.warning(
            "a request came back on one of this proxy's own upstream connections: "
            "a route's upstream points at the proxy itself",
            extra={"path": scope["path"]},
        )
        await self._refuse(scope, send, LoopDetected())

    async def _refuse(self, scope: Scope, send: Send, error: ProxyError) -> None:
        """An error the dispatch answers itself, with its log line, in the
        Messages shape on the Messages paths and to Anthropic clients (those
        that send `anthropic-version`) on any path."""
        path = door_path(scope["path"])
        trace = Trace(send, self.runtime.metrics, api_endpoint(path), scope)
        try:
            if wants_anthropic(scope["path"], scope["headers"]):
                await send_anthropic_error(trace.send, error)
            else:
                await send_error(trace.send, error)
        finally:
            trace.finish()


def door_path(path: str) -> str:
    """The path with repeated and trailing slashes dropped, for choosing a
    front door: upstream servers commonly take `/v1/chat/completions/` and
    `/v1//chat/completions` for the door's own path, so passing those
    through would skip the door's checks."""
    if "//" in path or path.endswith("/"):
        return "/" + "/".join(piece for piece in path.split("/") if piece)
    return path


FOREIGN_PAGE = (
    "A web page of another origin may not call this proxy (its requests would "
    "spend this proxy's keys): list the origin in server.allowed_origins to allow it."
)


FOREIGN_HOST = (
    "This proxy answers requests sent to an IP address, localhost, this machine's "
    "name or a name in server.allowed_hosts, not to another name (a web page can "
    "point its own name at 127.0.0.1): list the name in server.allowed_hosts to allow it."
)


def host_of(scope: Scope) -> tuple[bytes | None, bool]:
    """The request's `Host` value (None without one), and whether a browser
    sent it: one sends `Sec-Fetch-*` headers, which no page can set or
    leave out (every current browser), or `Origin`, or a `User-Agent` that
    begins with `Mozilla/` (every browser, older ones too)."""
    host = None
    browser = False
    name: bytes
    value: bytes
    for name, value in scope["headers"]:
        if name == b"host":
            host = value
        elif (
            name.startswith(b"sec-fetch-")
            or name == b"origin"
            or (name == b"user-agent" and value.startswith(b"Mozilla/"))
        ):
            browser = True
    return host, browser


def page_origin(scope: Scope, allowed: frozenset[str] | None) -> tuple[str, bytes]:
    """Where a browser request comes from: ("", b"") for no Origin (not a
    browser) or this server's own origin (the Host it was sent to, or the
    X-Forwarded-Host a reverse proxy before it sets, which a page cannot set
    without asking first); ("allowed", origin) for a page `allowed` names
    (None: any); ("foreign", origin) for any other page. Browsers send
    Origin on every cross-origin request; other clients send none."""
    origin = None
    hosts = []
    for name, value in scope["headers"]:
        if name == b"origin":
            origin = value
        elif name == b"host" or name == b"x-forwarded-host":
            hosts.append(value)
    if origin is None:
        return "", b""
    scheme, _, authority = origin.partition(b"://")
    if scheme in (b"http", b"https") and authority in hosts:
        return "", b""
    if allowed is None or origin.decode("latin-1") in allowed:
        return "allowed", origin
    return "foreign", origin


CORS_METHODS = b"GET, POST, PUT, DELETE, OPTIONS"


async def preflight(scope: Scope, send: Send, origin: bytes) -> None:
    """An allowed page asks first (CORS): what it may send."""
    asked = next((v for k, v in scope["headers"] if k == b"access-control-request-headers"), b"")
    headers = [
        (b"access-control-allow-origin", origin),
        (b"access-control-allow-methods", CORS_METHODS),
        (b"access-control-max-age", b"600"),
        (b"vary", b"Origin"),
    ]
    if asked:
        headers.append((b"access-control-allow-headers", asked))
    await send_bytes(send, 204, b"", headers)


def with_cors(send: Send, origin: bytes) -> Send:
    """`send` with an allowed page's CORS headers on the response head."""

    async def cors(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {
                **message,
                "headers": [
                    *message.get("headers", ()),
                    (b"access-control-allow-origin", origin),
                    (b"access-control-expose-headers", b"*"),
                    (b"vary", b"Origin"),
                ],
            }
        await send(message)

    return cors


def _from_own(own: Mapping[Ends, int], scope: Scope) -> bool:
    """Did this request come on one of this process's own upstream
    connections: from its near end, to its far end (this server)?"""
    client, server = scope.get("client"), scope.get("server")
    if client is None or server is None:
        return False
    return ((client[0], client[1]), (server[0], server[1])) in own


def api_endpoint(path: str) -> str:
    """The endpoint label of a request not served by a front door."""
    door = DOOR_ENDPOINTS.get(path)
    if door is not None:
        return door
    for prefix, name in API_ENDPOINTS:
        if path.startswith(prefix):
            return name
    if path.startswith("/v1/"):
        return "passthrough"
    return "other"


def _error_response(exc: ProxyError) -> Response:
    return Response(
        exc.render(), status_code=exc.status, media_type="application/json", headers=exc.headers
    )


def create_app(
    config: Config,
    *,
    runtime: Runtime | None = None,
    mounts: dict[str, ASGIApp] | None = None,
    secret_drawn: bool = False,
) -> ProxyApp:
    """The proxy for `config`. `mounts` serves extra ASGI apps under path
    prefixes (the demo's simulated upstream lives at /demo-upstream);
    `secret_drawn`: the tenant secret was drawn at random for this run."""
    rt = runtime or Runtime(config, secret_drawn=secret_drawn)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await rt.start()
        try:
            yield
        finally:
            await rt.close()

    api = FastAPI(
        title="reasoning-proxy",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url=None,
        # a path with a trailing slash is a 404 in the error shape, not a
        # redirect built from the client's Host header (and always http://)
        redirect_slashes=False,
    )

    @api.exception_handler(ProxyError)
    async def proxy_error(_: Request, exc: ProxyError) -> Response:
        return _error_response(exc)

    @api.exception_handler(HTTPException)
    async def http_error(_: Request, exc: HTTPException) -> Response:
        if exc.status_code == 404:
            return _error_response(NotFound("No such endpoint."))
        if exc.status_code == 405:
            allow = (
                {"Allow": exc.headers["Allow"]} if exc.headers and "Allow" in exc.headers else None
            )
            return _error_response(
                MethodNotAllowed("That method is not allowed here.", headers=allow)
            )
        return _error_response(BadRequest(str(exc.detail)))

    @api.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> Response:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ())[1:]) or None
        return _error_response(
            BadRequest(f"Invalid request: {first.get('msg', 'invalid')}", param=where)
        )

    api.include_router(ops_router(rt))
    api.include_router(conversations_router(rt))
    api.include_router(responses_router(rt))
    api.include_router(profiles_router(rt))
    api.include_router(ui_router(rt))
    return ProxyApp(rt, api, mounts)


def config_from_env() -> Config:
    """The config named by the environment (used by each worker process)."""
    path = os.environ.get(ENV_CONFIG)
    upstream = os.environ.get(ENV_UPSTREAM)
    if path and upstream:
        raise ConfigError(f"set {ENV_CONFIG} or {ENV_UPSTREAM}, not both")
    if path:
        config = load_config(path)
    elif upstream:
        config = upstream_config(upstream)
    else:
        raise ConfigError(f"no configuration: set {ENV_CONFIG} or {ENV_UPSTREAM}")
    overrides = json.loads(os.environ.get(ENV_OVERRIDES, "{}"))
    overrides.setdefault("store_url", os.environ.get(ENV_STORE))
    config = with_overrides(config, **overrides)
    drawn = os.environ.get(ENV_WORKER_SECRET)
    if config.secret is None and drawn:
        # every worker of one `serve` shares the secret its parent drew, so a
        # client key is the same tenant whichever worker answers
        config = replace(config, secret=Secret(drawn))
    return config


def app_from_env() -> ProxyApp:
    """uvicorn factory (each worker process): `uvicorn --factory proxy.app:app_from_env`."""
    from proxy.observability import configure_logging

    config = config_from_env()
    configure_logging(config.server.log_level, config.server.log_format, config.secret_values())
    # `serve` turns uvicorn's access log off (the proxy logs one line per
    # request itself); uvicorn did so in this worker before the root handler
    # above made it propagate again
    logging.getLogger("uvicorn.access").propagate = False
    drawn = os.environ.get(ENV_WORKER_SECRET)
    # the parent's drawn secret stands in for none: the store's, if it keeps one, wins
    secret_drawn = bool(drawn) and config.secret is not None and config.secret.get() == drawn
    return create_app(config, secret_drawn=secret_drawn)
