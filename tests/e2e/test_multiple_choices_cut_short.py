"""With `n` > 1, one choice's `finish_reason` does not end the answer: an
upstream that closes the connection after it, while another choice is still
being written, has cut that choice short. The client gets the error (an
error event and no `[DONE]` on a stream, a 502 for a whole answer), as when
the only choice is cut, not a made-up end. The real server, a fake upstream,
the `openai` SDK."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from tests.harness import FakeUpstream, Stream, route_config, running_proxy

KEY = "sk-test-two-choices"
ASK: dict[str, Any] = {"model": "deepseek-chat", "messages": [{"role": "user", "content": "hi"}]}


def chunk(index: int, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-two",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "deepseek-chat",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


def collect(parts: Any, texts: dict[int, str]) -> None:
    """Each choice's text, as the parts of a stream add it up."""
    for part in parts:
        for choice in part.choices:
            texts[choice.index] += choice.delta.content or ""


def two_choices(*, cut: str | None) -> Stream:
    """Choice 0 ends; choice 1 goes on, and before its end, by `cut`: the
    body ends ("end": a whole body, no [DONE]) or the connection breaks
    ("break": a chunked body cut off)."""
    chunks = [
        chunk(0, {"role": "assistant", "content": "First."}),
        chunk(1, {"role": "assistant", "content": "Second"}),
        chunk(0, {}, "stop"),
        chunk(1, {"content": " goes on"}),
        chunk(1, {"content": " and ends."}),
        chunk(1, {}, "stop"),
    ]
    if cut == "end":
        return Stream(chunks[:4], done=False)
    return Stream(chunks, cut_after=4 if cut == "break" else None)


@pytest.mark.parametrize("cut", ["end", "break"])
def test_a_stream_cut_after_one_choice_ended_is_an_error(upstream: FakeUpstream, cut: str) -> None:
    upstream.script(two_choices(cut=cut))
    with running_proxy(route_config(upstream, dialect="deepseek")) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        texts = {0: "", 1: ""}
        parts = client.chat.completions.create(**ASK, n=2, stream=True)
        with pytest.raises(openai.APIError) as caught:
            collect(parts, texts)
    assert texts == {0: "First.", 1: "Second goes on"}
    code = caught.value.body["code"]  # type: ignore[index]
    assert code == ("upstream_closed" if cut == "end" else "upstream_disconnected")


def test_a_raw_stream_cut_after_one_choice_ended_has_no_done(upstream: FakeUpstream) -> None:
    upstream.script(two_choices(cut="end"))
    with running_proxy(route_config(upstream, dialect="deepseek")) as proxy:
        r = httpx.post(
            f"{proxy.url}/chat/completions",
            json={**ASK, "n": 2, "stream": True},
            headers={"Authorization": f"Bearer {KEY}"},
            timeout=30,
        )
        stored = httpx.get(
            f"{proxy.url}/conversations/{r.headers['x-conversation-id']}",
            headers={"Authorization": f"Bearer {KEY}"},
        ).json()
    assert r.status_code == 200
    assert b"[DONE]" not in r.content
    assert b'"upstream_closed"' in r.content
    assert stored["turns"][0]["complete"] is False


def test_a_stream_whose_every_choice_ended_is_whole_without_done(
    upstream: FakeUpstream,
) -> None:
    stream = two_choices(cut=None)
    stream.done = False  # the upstream closes after the last finish_reason
    upstream.script(stream)
    with running_proxy(route_config(upstream, dialect="deepseek")) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        texts = {0: "", 1: ""}
        collect(client.chat.completions.create(**ASK, n=2, stream=True), texts)
    assert texts == {0: "First.", 1: "Second goes on and ends."}


def test_a_whole_answer_cut_after_one_choice_ended_is_a_502(upstream: FakeUpstream) -> None:
    # the upstream streams what was asked whole (it ignores `stream`)
    upstream.script(two_choices(cut="end"))
    with running_proxy(route_config(upstream, dialect="deepseek")) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key=KEY, max_retries=0)
        with pytest.raises(openai.InternalServerError) as caught:
            client.chat.completions.create(**ASK, n=2)
    assert caught.value.status_code == 502
    assert caught.value.body["code"] == "upstream_closed"  # type: ignore[index]
