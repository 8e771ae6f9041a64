"""`tool_choice: {"type": "none"}` on a Messages request to a Chat upstream
that is left with no function tool (none sent, or only server tools, which
are left out): OpenAI refuses a `tool_choice` without `tools`, so none goes;
with function tools it goes as `"none"`."""

from __future__ import annotations

from typing import Any

import pytest

from tests.harness import FakeUpstream, route_config, running_proxy
from tests.messages_wire import sdk_client

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}
GET = {"name": "get", "input_schema": {"type": "object"}}


@pytest.mark.parametrize(
    ("tools", "sent"),
    [([], None), ([WEB_SEARCH], None), ([WEB_SEARCH, GET], "none")],
    ids=["no-tools", "server-tools-only", "a-function-tool"],
)
def test_tool_choice_none_goes_only_with_tools(
    upstream: FakeUpstream, tools: list[Any], sent: str | None
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        answer = sdk_client(proxy.base, "sk-client").messages.create(
            model="m",
            max_tokens=10,
            messages=[{"role": "user", "content": "hi"}],
            tools=tools,  # type: ignore[arg-type]
            tool_choice={"type": "none"},
        )
    assert answer.content[0].type == "text"
    body = upstream.chat_requests()[-1].json
    assert body.get("tool_choice") == sent
    assert ("tools" in body) == (sent is not None)
