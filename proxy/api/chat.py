"""POST /v1/chat/completions: the front door whose wire is the exchange
path's own (no encoder). Its request is planned as it came; everything else
is the shared driver (`proxy.api.door`)."""

from __future__ import annotations

from proxy.api.asgi import Receive, read_plain_body
from proxy.api.door import Door
from proxy.api.encoder import Encoder
from proxy.errors import BadRequest
from proxy.exchange import Exchange


class ChatEndpoint(Door):
    endpoint = "chat.completions"

    async def plan(
        self, headers: list[tuple[str, str]], receive: Receive
    ) -> tuple[Exchange, Encoder | None]:
        limit = self.rt.config.limits.max_body_bytes
        ex = await self.planner.chat(headers, lambda: read_plain_body(receive, headers, limit))
        if ex.route.api != "chat":  # (a Responses or Messages upstream has no chat endpoint)
            raise BadRequest(
                f"This route's upstream speaks the {ex.route.api} API, not chat completions.",
                param="model",
                code="unsupported_upstream_api",
            )
        return ex, None
