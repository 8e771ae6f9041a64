"""The Messages door to an upstream that speaks Messages itself (`api: messages`).

The request was planned like every other (route, tenant, conversation,
settings) and its body prepared by `proxy.doors.messages.native.native_request`;
here it goes to the upstream's `/messages` and the answer comes back read
by read through a `NativeReader`: signatures sealed, the turn stored before
the stream's last bytes, a client that leaves cancels the upstream request
(the cut turn is stored as incomplete). Upstream errors keep their status
and (Anthropic) body.
"""

from __future__ import annotations

from proxy.config import CREDENTIAL_HEADERS, Route, Secret
from proxy.exchange import BODY_HEADERS, OWN_HEADERS, refuse_admin_token
from proxy.upstream import (
    strip_hop_by_hop,
)

ANTHROPIC_VERSION = "2023-06-01"  # sent when the client names none


def native_headers(
    headers: list[tuple[str, str]], route: Route, admin: Secret | None = None
) -> list[tuple[str, str]]:
    """The client's headers for a Messages upstream: its credential as it
    came (`x-api-key` or `Authorization`) unless the route has its own key
    (then that key alone: `x-api-key: <api_key>`, or the credential in its
    `headers:`), `anthropic-*` headers kept, the body's own (`BODY_HEADERS`)
    not; the route's own headers in place of the client's of the same name.
    One that carries the `admin` token is a 403 (`refuse_admin_token`)."""
    out = [
        (k, v)
        for k, v in strip_hop_by_hop(headers)
        if not k.startswith(OWN_HEADERS) and k not in BODY_HEADERS and k not in route.header_names
    ]
    out.append(("content-type", "application/json"))
    if route.keyed:
        out = [(k, v) for k, v in out if k not in CREDENTIAL_HEADERS]
    refuse_admin_token(out, admin)
    if route.api_key is not None:
        out.append(("x-api-key", route.api_key.get()))
    if "anthropic-version" not in route.header_names and not any(
        k == "anthropic-version" for k, _ in out
    ):
        out.append(("anthropic-version", ANTHROPIC_VERSION))
    out.extend(route.headers)
    return out
