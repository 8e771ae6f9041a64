"""GET /v1/models and /v1/models/{id} for Anthropic clients.

A request that carries `anthropic-version` (the `anthropic` SDK sends it on
every call) gets the model list in Anthropic's shape, paged, and one model
by id (`proxy.doors.messages.models`); every other client's request passes
through unchanged, in OpenAI's shape. The list is the one the pass-through
serves: the `/models` of the default route's upstream (for one model, of
the route that serves that id, as on the pass-through), asked with the same
credentials (the route key, or the client's own, its `x-api-key` sent as
`Authorization: Bearer` as the Messages door sends it; `anthropic-*` headers
stay here), under the same auth and tenant rules. Paging is done here over
the whole list, and a model is found in the list (not every
OpenAI-compatible server answers `/models/{id}`). Errors are in Anthropic's
shape, an upstream's keeping its status; an id no route serves is a 404.
A Messages upstream (`api: messages`) answers in Anthropic's shape itself,
so the requests that go to one stay on the pass-through.
"""

from __future__ import annotations

import asyncio
from urllib.parse import unquote_to_bytes

import orjson

from proxy.api.asgi import (
    ClientGone,
    DisconnectWatch,
    Receive,
    Scope,
    absorb_cut,
    encode_headers,
    read_body,
    request_headers,
    send_bytes,
)
from proxy.api.failures import error_kind, read_failure_error, upstream_status
from proxy.api.messages import client_credential, send_anthropic_error
from proxy.api.trace import Trace, TracedEndpoint
from proxy.config import Route
from proxy.doors.messages.models import find, model_infos, page, page_params
from proxy.doors.messages.shapes import error_body
from proxy.errors import ProxyError, ServerShuttingDown
from proxy.exchange import Planner, upstream_headers
from proxy.runtime import Runtime
from proxy.upstream import Upstream, UpstreamReadError

MODELS_PATH = "/v1/models"


def anthropic_client(scope: Scope) -> bool:
    """The request names an Anthropic API version: it expects Anthropic's shapes."""
    return any(name == b"anthropic-version" for name, _ in scope["headers"])


def model_id_of(scope: Scope) -> str | None:
    """The model id a /v1/models/{id} path names, decoded (an id with a `/`
    comes escaped as `%2F`), or None for the list itself."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    segments = [s for s in raw.split(b"?", 1)[0].split(b"/") if s]
    if len(segments) <= 2:  # v1, models
        return None
    return unquote_to_bytes(b"/".join(segments[2:])).decode("utf-8", "replace")


class AnthropicModelsEndpoint(TracedEndpoint):
    endpoint = "models"

    def __init__(self, runtime: Runtime, planner: Planner, passthrough: TracedEndpoint) -> None:
        self.rt = runtime
        self.metrics = runtime.metrics
        self.planner = planner
        self.passthrough = passthrough

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        rt = self.rt
        limits = rt.config.limits
        try:
            headers = client_credential(request_headers(scope, limits.max_header_bytes))
            trace.tenant = rt.tenant(self.planner.authorize(headers))
            model = model_id_of(scope)
            route = self.planner.route(model)  # one model's route: the one serving it
            if route.api == "messages":  # it speaks Anthropic's shape itself
                await self.passthrough._handle(scope, receive, trace)
                return
            await read_body(receive, limits.max_body_bytes)
            trace.route = route.name
            query = scope.get("query_string", b"").decode("latin-1")
            want = model or page_params(query)  # one model, or a page
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            await send_anthropic_error(trace.send, exc)
            return
        except ClientGone:
            return
        watch = DisconnectWatch(receive)
        try:
            status, body, extra = await self._fetch(route, headers, trace)
            if status < 400:
                models = model_infos(_json(body))
                answer = find(models, want) if isinstance(want, str) else page(models, *want)
                body = orjson.dumps(answer)
            else:
                body = error_body(status, body)
            watch.complete = True
        except ProxyError as exc:
            watch.complete = True
            trace.fields["error"] = exc.code
            if exc.status >= 500:  # the upstream's (the proxy's own here are 400 and 404)
                trace.upstream_error = trace.upstream_error or error_kind(exc)
            await send_anthropic_error(trace.send, exc)
            return
        except asyncio.CancelledError:
            if watch.absorb():
                trace.fields["client_gone"] = True
                return
            if not absorb_cut(rt.cut):
                raise
            # a shutdown's grace period ended before the list came
            trace.fields["error"] = "server_shutting_down"
            await send_anthropic_error(trace.send, ServerShuttingDown())
            return
        finally:
            watch.stop()
        mask = rt.key_mask
        if mask is not None:  # an upstream may quote the route's key back (a 401)
            body = mask.data(body)
        out = [("content-type", "application/json"), *extra]
        await send_bytes(trace.send, status, body, encode_headers(out))

    async def _fetch(
        self, route: Route, headers: list[tuple[str, str]], trace: Trace
    ) -> tuple[int, bytes, list[tuple[str, str]]]:
        """The upstream's whole answer to GET /models: status, body, and the
        Retry-After it gave, if any."""
        # no anthropic-* header for a Chat upstream, and no body (nor its length) to send
        chat = [
            (k, v)
            for k, v in headers
            if not k.startswith("anthropic-") and k not in ("content-length", "content-type")
        ]
        out = upstream_headers(chat, route, json=False, admin=self.rt.config.admin_token)
        trace.upstream_started()
        async with self.rt.upstream.request(route, "GET", "/models", out, None) as response:
            trace.upstream_first_byte()
            trace.upstream_error = upstream_status(response.status)
            try:
                body = await Upstream.read_all(response, self.rt.config.limits.max_response_bytes)
            except UpstreamReadError as exc:
                raise read_failure_error(exc) from None
            retry = response.header("retry-after")
            return response.status, body, [("retry-after", retry)] if retry else []


def _json(body: bytes) -> object:
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
