"""Every other /v1/... request: passed to the route's upstream unchanged.

The body, method, query string and headers (minus hop-by-hop ones) go to the
upstream of the route the request's `model` selects (or the default route);
the answer comes back with its status, headers and body, streamed. The model
is read from any body that is a JSON object, whatever its Content-Type says:
upstreams parse such a body as JSON regardless, so a Content-Type must not
take a request past the routes' model globs. A multipart form (an audio
upload) names its model in a `model` field, read by formdata.py; a gzip or
deflate body is read decoded; a `/models/{id}` path names its model itself.
The body still goes on as it came, byte for byte.

The path goes as the client wrote it (percent-escapes kept), below the
route's base URL, and never above it: a path with a `.` or `..` segment, in
any spelling (`%2e%2e`, `..%2F`, `..%3F`, a backslash), is refused before anything is
sent. A client that leaves cancels the upstream request at once. Configured
route keys that the upstream quotes back are masked.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Sequence
from typing import Any
from urllib.parse import unquote_plus, unquote_to_bytes

import orjson

from proxy.api import ownership
from proxy.api.asgi import (
    ClientGone,
    DisconnectWatch,
    Receive,
    Scope,
    absorb_cut,
    cut_response,
    decoded_body,
    encode_headers,
    read_body,
    request_headers,
    send_error,
)
from proxy.api.messages import send_anthropic_error
from proxy.api.models import anthropic_client
from proxy.api.trace import Trace, TracedEndpoint
from proxy.config import Route
from proxy.errors import (
    BadRequest,
    Forbidden,
    MethodNotAllowed,
    ProxyError,
    ServerShuttingDown,
    require_type,
)
from proxy.exchange import ADMIN_NOT_FORWARDED, Planner, holds_token, upstream_headers
from proxy.formdata import UnreadableForm, form_values
from proxy.runtime import Runtime
from proxy.upstream import Response, Upstream, UpstreamReadError, response_headers


class PassthroughEndpoint(TracedEndpoint):
    endpoint = "passthrough"

    def __init__(self, runtime: Runtime, planner: Planner | None = None) -> None:
        self.rt = runtime
        self.metrics = runtime.metrics
        self.planner = planner or Planner(runtime)

    async def _handle(self, scope: Scope, receive: Receive, trace: Trace) -> None:
        config = self.rt.config
        send = trace.send
        # errors in the shape the client reads: Anthropic's to its SDK
        refuse = send_anthropic_error if anthropic_client(scope) else send_error
        try:
            if scope["method"] not in PASSED_METHODS:
                raise MethodNotAllowed(
                    "That method is not passed upstream.", headers={"Allow": PASSED_ALLOW}
                )
            suffix = upstream_suffix(scope)
            check_not_door(scope, suffix)
            headers = request_headers(scope, config.limits.max_header_bytes)
            authorization = self.planner.authorize(headers)
            tenant = trace.tenant = self.rt.tenant(authorization)
            body = await read_body(receive, config.limits.max_body_bytes)
            content_types = [v for k, v in headers if k == "content-type"]
            encodings = [v for k, v in headers if k == "content-encoding"]
            readable = decoded_body(body, encodings, config.limits.max_body_bytes)
            model = model_of(readable, content_types, config.limits.max_header_bytes)
            model = path_model(suffix) or model  # the model the upstream acts on
            route = self.planner.route(model)
            trace.route = route.name
            ownership.check_account_object(route, scope["method"], suffix)
            owned = ownership.stored_id_of(suffix) if route.keyed else None
            if owned is not None:
                await ownership.check(self.rt, tenant, owned)
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            await refuse(send, exc)
            return
        except ClientGone:
            return
        watch = DisconnectWatch(receive)
        try:
            await self._forward(scope, trace, route, suffix, headers, body)
            watch.complete = True
            if owned is not None and scope["method"] == "DELETE" and trace.status == 200:
                await ownership.forget(self.rt, tenant, owned)
        except ProxyError as exc:
            trace.fields["error"] = exc.code
            if exc.code == "upstream_busy":
                trace.upstream_error = "busy"
            elif exc.status >= 502:
                trace.upstream_error = "timeout" if exc.status == 504 else "connect"
            await refuse(send, exc)
        except asyncio.CancelledError:
            if watch.absorb():
                trace.fields["client_gone"] = True
                return
            if not absorb_cut(self.rt.cut):
                raise
            # a shutdown's grace period ended: an answer not started is a 503,
            # a started body ends here without its final chunk (a cut body)
            watch.complete = True
            trace.fields["error"] = "server_shutting_down"
            if not trace.status:
                await refuse(send, ServerShuttingDown())
            else:
                cut_response(scope, route.name, "server shutting down")
        finally:
            watch.stop()

    def outgoing(
        self, route: Route, suffix: str, headers: list[tuple[str, str]]
    ) -> tuple[str, list[tuple[str, str]]]:
        """The path and headers a request goes upstream with: the route's key
        alone when it has one (none of the client's, in the query either); a
        query that holds the admin token is a 403."""
        admin = self.rt.config.admin_token
        out = upstream_headers(headers, route, json=False, admin=admin)
        if route.keyed:  # the route's key alone: none of the client's goes
            suffix = without_query_credentials(suffix)
        if admin is not None and _in_query(admin.get(), suffix):
            # the rest of the query goes upstream as it came: never the admin token
            raise Forbidden(ADMIN_NOT_FORWARDED, code="admin_token_not_forwarded")
        return suffix, out

    async def _forward(
        self,
        scope: Scope,
        trace: Trace,
        route: Route,
        suffix: str,
        headers: list[tuple[str, str]],
        body: bytes,
    ) -> None:
        suffix, out = self.outgoing(route, suffix, headers)
        send = trace.send
        mask = self.rt.key_mask
        trace.upstream_started()
        async with self.rt.upstream.request(
            route, scope["method"], suffix, out, body or None
        ) as response:
            trace.upstream_first_byte()
            if response.status >= 400:
                trace.upstream_error = "status"
            out_headers = response_headers(response)
            if mask is not None:
                out_headers = mask.headers(out_headers)
            length = kept_length(response, scope["method"], mask is None)
            if length is not None:
                out_headers.append(("content-length", length))
            await send(
                {
                    "type": "http.response.start",
                    "status": response.status,
                    "headers": encode_headers(out_headers),
                }
            )
            masking = mask.stream() if mask is not None else None
            try:
                async for data in Upstream.chunks(response):
                    if masking is not None:
                        data = masking.feed(data)
                    await send({"type": "http.response.body", "body": data, "more_body": True})
            except UpstreamReadError as exc:
                trace.upstream_error = exc.kind  # timeout, malformed or disconnected
                # without the body's end: the client sees a cut body, not a whole one
                cut_response(scope, route.name, f"upstream {exc.kind}")
                return
            last = masking.flush() if masking is not None else b""
            await send({"type": "http.response.body", "body": last, "more_body": False})


def kept_length(response: Response, method: str, unmasked: bool) -> str | None:
    """The upstream's Content-Length, when the client gets the body it
    counts: a HEAD's (no body, the length of the one a GET gets), or a body
    passed on as it came (not decoded here, no key masked in it, which may
    change its length). With it a client sees a body the upstream cut short
    as cut (fewer bytes than announced), and a download's size ahead; else
    the server frames the body itself. None for a 1xx, 204 or 304, which
    carry no body."""
    length = response.header("content-length")
    if length is None or response.status < 200 or response.status in (204, 304):
        return None
    if response.header("transfer-encoding") is not None:  # chunked wins: the length lies
        return None
    length = length.strip()
    if not (length.isascii() and length.isdigit()):
        return None
    return length if method == "HEAD" or (unmasked and not response.decoded) else None


# a dot segment (also as `..;`, a path parameter some servers strip, and
# ended by a `?` or `#` that decoding made: a server that decodes the path
# and then reads it as a URL ends the segment there), a control character,
# or a dot that NFKC folds to `.` (fullwidth, small, leader)
_UNSAFE_PIECE = re.compile(
    rb"(?:^|[/\\])\.{1,2}(?:$|[/\\;?#])|[\x00-\x1f\x7f]|\xef\xbc\x8e|\xef\xb9\x92|\xe2\x80\xa4"
)
DECODINGS = 3  # a path is checked as written and decoded up to this many times


def _decodings(path: bytes) -> list[bytes]:
    """The path and what it decodes to, again and again (an upstream, or a
    server before it, may decode more than once)."""
    out = [path]
    for _ in range(DECODINGS):
        path = unquote_to_bytes(path)
        if path == out[-1]:
            break
        out.append(path)
    return out


def upstream_suffix(scope: Scope) -> str:
    """The path to append to the route's base URL (which stands for /v1), as
    the client wrote it, with its query string. BadRequest when it could
    leave the base path: a `.` or `..` segment in any encoding (`%2e%2e`,
    `..%2F`, `.%5C`), a control character, or a /v1 that is not literal."""
    raw: bytes = scope.get("raw_path") or scope["path"].encode("utf-8")
    raw = raw.split(b"?", 1)[0]
    once = unquote_to_bytes(raw)
    # twice too: an upstream (or a server before it) may decode again
    if not raw.startswith(b"/v1/") or any(_UNSAFE_PIECE.search(p) for p in _decodings(once)):
        raise BadRequest(
            "The request path must stay below /v1/: '.' and '..' segments (in any "
            "encoding) and control characters are refused.",
            code="invalid_path",
        )
    suffix = raw[3:].decode("latin-1")
    query: bytes = scope.get("query_string", b"")
    return suffix + "?" + query.decode("latin-1") if query else suffix


# the front doors' endpoints below /v1, as an upstream may read a path
# (`ownership.path_segments`, in lower case)
DOOR_ENDPOINTS = frozenset(
    (
        "chat/completions",
        "responses",
        "responses/compact",
        "responses/input_tokens",
        "messages",
        "messages/count_tokens",
    )
)


def check_not_door(scope: Scope, suffix: str) -> None:
    """BadRequest for a path an upstream may read as a front door's own
    (`/v1/RESPONSES`, `/v1/responses;x`, `/v1/responses/compact%20`,
    `/v1/chat%252Fcompletions`) that the dispatch did not take for it: passed
    through, it would skip the door's checks (a `previous_response_id` of
    another tenant's, continued under the route's key; a list of every
    client's stored completions)."""
    named = "/".join(ownership.path_segments(suffix)).lower()
    if named in DOOR_ENDPOINTS:
        as_dispatched = "/".join(piece for piece in scope["path"].split("/") if piece)
        if as_dispatched != "v1/" + named:  # the door itself hands /compact on
            raise BadRequest(
                f"The path names /v1/{named} written another way (case, escapes, ';' "
                f"parameters or spaces): write it as /v1/{named}.",
                code="invalid_path",
            )


# query parameters that carry a client's key (Gemini's `key`, and the
# spellings other APIs take), compared decoded and in lower case
QUERY_CREDENTIALS = frozenset(("key", "api_key", "api-key", "apikey", "x-api-key", "access_token"))


def without_query_credentials(suffix: str) -> str:
    """`suffix` without the query parameters that carry a key, the others
    as the client wrote them: for a route with its own key, whose upstream
    must not get the client's."""
    path, mark, query = suffix.partition("?")
    if not mark:
        return suffix
    kept = [
        piece
        for piece in query.split("&")
        if unquote_plus(piece.partition("=")[0]).strip().lower() not in QUERY_CREDENTIALS
    ]
    return path + "?" + "&".join(kept) if kept else path


# what an API's client sends (not TRACE, which echoes the request, nor
# CONNECT, which asks for a tunnel and has no path)
_PASSED = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
PASSED_METHODS = frozenset(_PASSED)
PASSED_ALLOW = ", ".join(_PASSED)  # a 405's Allow


def _in_query(token: str, suffix: str) -> bool:
    """A query parameter's value is `token`, decoded (`holds_token`; `;`
    separates parameters too, as some servers read it)."""
    query = suffix.partition("?")[2]
    pieces = re.split("[&;]", query) if query else []
    return any(holds_token(unquote_plus(p.partition("=")[2]), token) for p in pieces)


def path_model(suffix: str) -> str | None:
    """The model a `/models/{id}` path names (`GET` one model, `DELETE` a
    fine-tuned one), as an upstream reads it (`ownership.path_segments`; an
    id may hold a `/`), or None: such a request goes to the route that
    serves that model, as a body naming it would."""
    segments = ownership.path_segments(suffix)
    if len(segments) > 1 and segments[0].lower() == "models":
        return "/".join(segments[1:])
    return None


# whitespace, byte-order marks and UTF-16/32 padding, then the opening brace
_OBJECT_START = re.compile(rb"[ \t\r\n\x00\xef\xbb\xbf\xfe\xff]*\{")


def model_of(body: bytes, content_types: Sequence[str], limit: int) -> str | None:
    """The `model` the body names: of a body that is a JSON object, whatever
    the request's Content-Type (media types are case-insensitive, and
    upstreams parse the body as JSON regardless); else the `model` field of
    a multipart form, under the boundary the Content-Type gives; None when
    it names none. A `model` that is not a string is a BadRequest: no glob
    can match it, and an upstream may still read it; so is a body that
    starts like a JSON object and does not parse here, and a form whose
    `model` field cannot be read here or is given twice, differently."""
    if not body:
        return None
    data = _json_of(body)
    if data is None and _OBJECT_START.match(body):
        # what the proxy cannot read, an upstream's parser may (nested deeper
        # than ours allow, comments...): not sent on to the default route
        raise BadRequest(
            "The request body starts like a JSON object but does not parse.", code="invalid_json"
        )
    if not isinstance(data, dict):
        return _form_model(body, content_types, limit)
    require_type(data, "model", str)
    model: str | None = data.get("model")
    return model


def _form_model(body: bytes, content_types: Sequence[str], limit: int) -> str | None:
    """The `model` field of a multipart form (see formdata.py), or None."""
    try:
        models = form_values(content_types, body, b"model", limit)
    except UnreadableForm as exc:
        # the same reasoning as for JSON: what is not read here, an upstream may read
        raise BadRequest(
            f"The form's model field cannot be read here: {exc}.",
            param="model",
            code="invalid_form",
        ) from None
    if len(models) > 1:
        # servers differ on which one counts (Go's the first, Starlette's the last)
        raise BadRequest("The form gives more than one model.", param="model", code="invalid_form")
    return models[0] if models else None


def _json_of(body: bytes) -> Any:
    """The body as JSON, or None. What orjson refuses and Python's json
    reads (a byte-order mark, UTF-16 or UTF-32, NaN), an upstream written in
    Python reads too, so it counts."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(body)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
        return None
