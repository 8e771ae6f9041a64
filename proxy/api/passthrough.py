"""Every other /v1/... request: passed to the route's upstream unchanged.

The body, method, query string and headers (minus hop-by-hop ones) go to the
upstream of the route the request's `model` selects (or the default route);
the answer comes back with its status, headers and body, streamed.
"""

from __future__ import annotations

import orjson

from proxy.api.asgi import (
    ClientGone,
    Receive,
    Scope,
    Send,
    encode_headers,
    header,
    read_body,
    request_headers,
    send_error,
)
from proxy.api.trace import Trace
from proxy.config import Route
from proxy.errors import NotFound, ProxyError, Unauthorized
from proxy.runtime import Runtime
from proxy.upstream import Upstream, UpstreamReadError, response_headers, strip_hop_by_hop


class PassthroughEndpoint:
    def __init__(self, runtime: Runtime) -> None:
        self.rt = runtime

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        trace = Trace(send, self.rt.metrics, "passthrough")
        trace.fields["path"] = scope["path"]
        try:
            await self._handle(scope, receive, trace)
        finally:
            trace.finish()

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        config = self.rt.config
        send = trace.send
        try:
            headers = request_headers(scope, config.limits.max_header_bytes)
            authorization = header(headers, "authorization")
            if config.server.require_auth and not authorization:
                raise Unauthorized("This proxy requires an API key (Authorization: Bearer ...).")
            body = await read_body(receive, config.limits.max_body_bytes)
            route = config.route_for(_model_of(body, header(headers, "content-type")))
            if route is None:
                raise NotFound(
                    "No route of this proxy serves that model.",
                    param="model",
                    code="model_not_found",
                )
            trace.route = route.name
            await self._forward(scope, trace, route, headers, authorization, body)
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            if exc.status >= 502:
                trace.upstream_error = "timeout" if exc.status == 504 else "connect"
            await send_error(send, exc)
        except ClientGone:
            return

    async def _forward(
        self,
        scope: Scope,
        trace: Trace,
        route: Route,
        headers: list[tuple[str, str]],
        authorization: str | None,
        body: bytes,
    ) -> None:
        path = scope["path"]
        # the route's base URL already ends in /v1 (or its provider's prefix)
        suffix = path[3:] if path.startswith("/v1/") else path
        query = scope.get("query_string", b"").decode("latin-1")
        if query:
            suffix += "?" + query
        out = [(k, v) for k, v in strip_hop_by_hop(headers) if k != "authorization"]
        if route.api_key is not None:
            out.append(("authorization", f"Bearer {route.api_key.get()}"))
        elif authorization:
            out.append(("authorization", authorization))
        out.extend(route.headers)
        send = trace.send
        trace.upstream_started()
        async with self.rt.upstream.request(
            route, scope["method"], suffix, out, body or None
        ) as response:
            trace.upstream_first_byte()
            if response.status >= 400:
                trace.upstream_error = "status"
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": encode_headers(response_headers(response)),
                }
            )
            try:
                async for data in Upstream.chunks(response):
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            except UpstreamReadError as exc:
                trace.upstream_error = "timeout" if exc.kind == "timeout" else "disconnected"
                # End without the final chunk: the server closes the connection,
                # so the client sees a cut body, not a complete one.
                return
            await send({"type": "http.response.body", "body": b"", "more_body": False})


def _model_of(body: bytes, content_type: str | None) -> str | None:
    if not body or not (content_type or "").startswith("application/json"):
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    model = data.get("model") if isinstance(data, dict) else None
    return model if isinstance(model, str) else None
