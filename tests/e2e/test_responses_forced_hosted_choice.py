"""A `tool_choice` that forces a tool, in a request whose tools are all
hosted ones (which a Chat upstream cannot run, so none goes): the choice
cannot be honoured either, and is named in `X-Proxy-Dropped-Fields`, as an
`allowed_tools` choice of mode `required` naming only hosted tools is; a
choice that forces nothing is not named. Through the real server with the
openai SDK."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.harness import FakeUpstream, route_config, running_proxy

KEY = "sk-test-forced-hosted-choice"
HOSTED: Any = [{"type": "web_search"}]


@pytest.fixture
def sdk(upstream: FakeUpstream) -> Iterator[openai.OpenAI]:
    with (
        running_proxy(route_config(upstream)) as proxy,
        openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client,
    ):
        yield client


@pytest.mark.parametrize(
    ("choice", "named"),
    [
        ("required", True),
        ({"type": "web_search_preview"}, True),
        ("auto", False),
        ("none", False),
        ({"type": "allowed_tools", "mode": "auto", "tools": HOSTED}, False),
    ],
)
def test_a_forced_choice_with_no_tool_left_is_named(
    sdk: openai.OpenAI, upstream: FakeUpstream, choice: Any, named: bool
) -> None:
    raw = sdk.responses.with_raw_response.create(
        model="m", input="Search.", tools=HOSTED, tool_choice=choice
    )
    (sent,) = upstream.chat_requests()
    assert "tools" not in sent.json
    assert "tool_choice" not in sent.json
    assert raw.headers["x-proxy-dropped-tools"] == "web_search"
    assert ("tool_choice" in raw.headers.get("x-proxy-dropped-fields", "")) is named
