"""Groq streams its usage inside `x_groq` on the last chunk: the Responses and
Messages doors report it, and the stored turn keeps it."""

from __future__ import annotations

import httpx
import orjson
import pytest

from tests.casefiles import chunk
from tests.harness import FakeUpstream, Stream, route_config, running_proxy

USAGE = {"prompt_tokens": 11, "completion_tokens": 29, "total_tokens": 40}


def groq_stream() -> Stream:
    first = {**chunk({"content": "6"}), "x_groq": {"id": "req_1"}}
    last = {**chunk({}, "stop"), "x_groq": {"id": "req_1", "usage": USAGE}}
    return Stream([first, last])


@pytest.mark.parametrize("path", ["responses", "messages"])
def test_groq_usage_in_x_groq_is_reported(upstream: FakeUpstream, path: str) -> None:
    upstream.script(groq_stream())
    body = {"model": "m", "stream": True, "max_tokens": 50}
    body["input" if path == "responses" else "messages"] = [{"role": "user", "content": "2*3?"}]
    auth = {"Authorization": "Bearer sk-groq-usage"}
    with running_proxy(route_config(upstream)) as proxy:
        r = httpx.post(f"{proxy.url}/{path}", json=body, headers=auth, timeout=30)
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}", headers=auth
        ).json()
    assert r.status_code == 200
    events = [orjson.loads(line[6:]) for line in r.text.split("\n") if line.startswith("data: {")]
    if path == "responses":
        (done,) = [e for e in events if e["type"] == "response.completed"]
        usage = done["response"]["usage"]
        assert (usage["input_tokens"], usage["output_tokens"]) == (11, 29)
    else:
        (delta,) = [e for e in events if e["type"] == "message_delta"]
        assert delta["usage"]["output_tokens"] == 29
    assert stored["turns"][0]["usage"] == USAGE
