"""POST /v1/chat/completions: the front door whose wire is the exchange
path's own (no encoder). Its request is planned as it came; everything else
is the shared driver (`proxy.api.door`)."""

from __future__ import annotations

from proxy.api.asgi import Receive, read_body
from proxy.api.door import Door
from proxy.api.encoder import Encoder
from proxy.exchange import Exchange


class ChatEndpoint(Door):
    endpoint = "chat.completions"

    async def plan(
        self, headers: list[tuple[str, str]], receive: Receive
    ) -> tuple[Exchange, Encoder | None]:
        limit = self.rt.config.limits.max_body_bytes
        return await self.planner.chat(headers, lambda: read_body(receive, limit)), None
