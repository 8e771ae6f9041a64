"""An upstream that answers a 2xx with an error object (OpenRouter's rate
limit, whole or as a stream's first event) gets the error's status, and the
client gets the upstream's headers with it, whichever mode the request and
the answer came in: the `openai` SDK reads `request_id` from `X-Request-Id`
and waits as `Retry-After` says before it tries again. The real server, a
fake upstream."""

from __future__ import annotations

import openai
import pytest

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

ERROR = {"error": {"message": "Rate limit exceeded", "code": 429}}
HEADERS = {"X-Request-Id": "req-2xx-error", "Retry-After": "5", "X-Generation-Id": "gen-1"}


@pytest.mark.parametrize("answer", ["whole", "stream"])
@pytest.mark.parametrize("stream", [False, True], ids=["whole-request", "streamed-request"])
def test_the_upstream_headers_come_with_the_error(
    upstream: FakeUpstream, answer: str, stream: bool
) -> None:
    if answer == "whole":
        upstream.script(Json(ERROR, headers=HEADERS))
    else:
        upstream.script(Stream([ERROR], done=False, headers=HEADERS))
    with running_proxy(route_config(upstream, dialect="openrouter")) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-client", max_retries=0)
        with pytest.raises(openai.RateLimitError) as caught:
            client.chat.completions.create(
                model="a/b", messages=[{"role": "user", "content": "hi"}], stream=stream
            )
    error = caught.value
    assert error.status_code == 429
    assert error.request_id == "req-2xx-error"
    assert error.response.headers["retry-after"] == "5"
    assert error.response.headers["x-generation-id"] == "gen-1"
    assert error.response.headers["content-type"] == "application/json"
    assert error.response.headers["x-reasoning-dialect"] == "openrouter"
    assert error.body == {
        "message": "Rate limit exceeded",
        "type": "upstream_error",
        "param": None,
        "code": 429,
    }
