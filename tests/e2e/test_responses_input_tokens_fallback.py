"""`POST /v1/responses/input_tokens` to an `api: responses` route whose
upstream has no such endpoint (vLLM and most servers that serve
/v1/responses answer 404 or 405 there) is counted by the proxy, through a
real server and the openai SDK: the effective count of the body as
/v1/responses would send it, and for five minutes after that the route's
counts are the proxy's without asking; an upstream that counts, or fails
otherwise, is answered as it came.

Regression: the upstream's own 404 reached the client."""

from __future__ import annotations

import openai
import pytest

from tests.harness import FakeUpstream, Json, route_config, running_proxy

KEY = "sk-test-input-tokens-fallback"


def sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url, api_key=KEY, max_retries=0)


@pytest.mark.parametrize(
    "missing",
    [
        Json({"detail": "Not Found"}, status=404),  # vLLM, FastAPI servers
        Json({"detail": "Method Not Allowed"}, status=405),
        Json({"error": {"message": "not implemented"}}, status=501),
        Json({"object": "response", "output": []}),  # a 2xx without a count
    ],
)
def test_an_upstream_without_input_tokens_is_counted_by_the_proxy(
    upstream: FakeUpstream, missing: Json
) -> None:
    upstream.script(missing)
    config = route_config(upstream, api="responses")
    with running_proxy(config) as proxy, sdk(proxy.url) as client:
        short = client.responses.input_tokens.count(model="m", input="Hi")
        long = client.responses.input_tokens.count(model="m", input="Hi there " * 50)
    assert short.object == "response.input_tokens"
    assert 0 < short.input_tokens < 20
    assert long.input_tokens > short.input_tokens + 40
    # asked once: the route's later counts are the proxy's, nothing sent
    (request,) = upstream.requests
    assert request.path == "/v1/responses/input_tokens"
    assert request.json == {"model": "m", "input": "Hi"}


def test_the_count_is_the_effective_one_of_what_v1_responses_sends(
    upstream: FakeUpstream,
) -> None:
    upstream.script(
        Json({"detail": "Not Found"}, status=404),
        Json({"error": {"message": "stop here", "type": "invalid_request_error"}}, status=400),
    )
    body = {"model": "m", "input": "Count these words, please.", "instructions": "Be brief."}
    with running_proxy(route_config(upstream, api="responses")) as proxy, sdk(proxy.url) as client:
        counted = client.responses.input_tokens.count(**body)  # type: ignore[arg-type]
        sent = client.responses.with_raw_response.create
        with pytest.raises(openai.BadRequestError) as stopped:
            sent(**body)  # type: ignore[arg-type]
    effective = stopped.value.response.headers.get("x-context-tokens-effective")
    assert effective is not None
    assert counted.input_tokens == int(effective)


def test_an_upstream_that_counts_or_fails_is_answered_as_it_came(upstream: FakeUpstream) -> None:
    upstream.script(
        Json({"error": {"message": "overloaded"}}, status=503, headers={"Retry-After": "7"}),
        Json({"object": "response.input_tokens", "input_tokens": 4242}),
    )
    with running_proxy(route_config(upstream, api="responses")) as proxy, sdk(proxy.url) as client:
        with pytest.raises(openai.InternalServerError) as failed:
            client.responses.input_tokens.count(model="m", input="Hi")
        counted = client.responses.input_tokens.count(model="m", input="Hi")
    assert failed.value.status_code == 503
    assert failed.value.response.headers["retry-after"] == "7"
    assert counted.input_tokens == 4242
    assert len(upstream.requests) == 2
