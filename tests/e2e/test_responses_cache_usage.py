"""A Responses answer from a chat upstream counts the prompt cache as the
upstream reported it, streamed and whole, and its stored copy alike (the
real server, a fake chat upstream, the openai SDK): cache reads in
`cached_tokens` and cache writes in `cache_write_tokens`, whichever of the
chat dialects' names the upstream used."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Json, ProxyServer, Stream, route_config, running_proxy

KEY = "sk-test-cache-usage"
BASE = {"prompt_tokens": 100, "completion_tokens": 9, "total_tokens": 109}
USAGES = {
    "openrouter": {
        **BASE,
        "prompt_tokens_details": {"cached_tokens": 40, "cache_write_tokens": 25},
    },
    "deepseek": {**BASE, "prompt_cache_hit_tokens": 40, "prompt_cache_miss_tokens": 60},
    "litellm": {
        **BASE,
        "prompt_tokens_details": {"cached_tokens": 40},
        "cache_creation_input_tokens": 25,
    },
}
WRITTEN = {"openrouter": 25, "deepseek": 0, "litellm": 25}


@pytest.fixture
def proxy(upstream: FakeUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(upstream)) as server:
        yield server


@pytest.fixture
def sdk(proxy: ProxyServer) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0) as client:
        yield client


def _completion(usage: dict[str, Any]) -> dict[str, Any]:
    return {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "Hi"}, "finish_reason": "stop"}
        ],
        "usage": usage,
    }


def _usage_chunk(usage: dict[str, Any]) -> dict[str, Any]:
    return {**chunk({}), "choices": [], "usage": usage}


@pytest.mark.parametrize("dialect", list(USAGES))
def test_cache_reads_and_writes_are_counted_streamed_and_stored(
    sdk: openai.OpenAI, upstream: FakeUpstream, dialect: str
) -> None:
    usage = USAGES[dialect]
    upstream.script(Stream([chunk({"content": "Hi"}), chunk({}, "stop"), _usage_chunk(usage)]))
    with sdk.responses.stream(model="m", input="Hi") as events:
        final = events.get_final_response()
    assert final.usage is not None
    details = final.usage.input_tokens_details
    assert (details.cached_tokens, details.cache_write_tokens) == (40, WRITTEN[dialect])
    assert final.usage.input_tokens == 100
    stored = sdk.responses.retrieve(final.id)
    assert stored.usage == final.usage


@pytest.mark.parametrize("dialect", list(USAGES))
def test_cache_reads_and_writes_are_counted_whole(
    sdk: openai.OpenAI, upstream: FakeUpstream, dialect: str
) -> None:
    upstream.script(Json(_completion(USAGES[dialect])))
    response = sdk.responses.create(model="m", input="Hi")
    assert response.usage is not None
    details = response.usage.input_tokens_details
    assert (details.cached_tokens, details.cache_write_tokens) == (40, WRITTEN[dialect])
    assert response.usage.input_tokens == 100
