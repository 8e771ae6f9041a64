"""A Responses client that drops the reasoning items before its function
calls, with `store` on and no `encrypted_content` asked for, through an
`api: responses` route, against an upstream that keeps what it answered
with `store` on and, as OpenAI does, refuses a function call sent back
without the reasoning item that preceded it: the proxy restores that item
by its id alone (the upstream knows it), streamed and whole. With `store`
off (on the request that made the turn, or on the one sending it back) no
id goes back: the upstream kept nothing, or the client asked it to read
nothing it keeps."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from aiohttp import web
from multidict import CIMultiDict

from tests.harness import FakeUpstream, ProxyServer, Received, route_config, running_proxy

KEY = "sk-stored-reasoning-ids"
AUTH = {"Authorization": f"Bearer {KEY}", "X-Conversation-Id": "ids"}
QUESTION = {"role": "user", "content": "Weather in Oslo?"}
# what the Agents SDK sends back when it keeps calls and outputs only: the
# call with its id, which names the stored item
CALL = {
    "id": "fc_1",
    "type": "function_call",
    "call_id": "call_1",
    "name": "get_weather",
    "arguments": '{"city":"Oslo"}',
}
OUTPUT = {"type": "function_call_output", "call_id": "call_1", "output": "-3 °C"}
RESTORED = {"type": "reasoning", "id": "rs_1", "summary": []}


class KeepingUpstream(FakeUpstream):
    """A Responses upstream with OpenAI's rules for stored items: a response
    made with `store` on keeps its items, which later input may name by id
    alone; a reasoning item by id that it did not keep is a 404, and a
    function call it keeps, sent without its reasoning item, a 400."""

    def __init__(self) -> None:
        super().__init__()
        self.kept: set[str] = set()
        self.needs: dict[str, str] = {}  # a kept call's id -> its reasoning item's id

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        headers = CIMultiDict(request.headers)
        self.requests.append(Received(request.method, request.path, "", headers, raw))
        body = json.loads(raw)
        refused = self._refused(body["input"])
        if refused is not None:
            status, message = refused
            error = {"message": message, "type": "invalid_request_error", "param": "input"}
            return web.json_response({"error": {**error, "code": None}}, status=status)
        answered = any(i.get("type") == "function_call_output" for i in body["input"])
        response = self._response(body, answered)
        if not body.get("stream"):
            return web.json_response(response)
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": {**response, "output": []}}
        ]
        for n, item in enumerate(response["output"]):
            events.append({"type": "response.output_item.added", "output_index": n, "item": item})
            events.append({"type": "response.output_item.done", "output_index": n, "item": item})
        events.append({"type": "response.completed", "response": response})
        for n, event in enumerate(events):
            data = json.dumps({**event, "sequence_number": n})
            await stream.write(f"event: {event['type']}\ndata: {data}\n\n".encode())
        await stream.write_eof()
        return stream

    def _refused(self, items: list[Any]) -> tuple[int, str] | None:
        given: set[str] = set()
        for item in items:
            if item.get("type") == "reasoning" and "encrypted_content" not in item:
                if item.get("id") not in self.kept:
                    return 404, (
                        f"Item with id '{item.get('id')}' not found. Items are not persisted "
                        "when `store` is set to false. Try again with `store` set to true, "
                        "or remove this item from your input."
                    )
                given.add(item["id"])
            needed = self.needs.get(str(item.get("id")))
            if item.get("type") == "function_call" and needed and needed not in given:
                return 400, (
                    f"Item '{item['id']}' of type 'function_call' was provided without its "
                    f"required 'reasoning' item: '{needed}'."
                )
        return None

    def _response(self, body: Any, answered: bool) -> dict[str, Any]:
        if answered:
            output: list[Any] = [
                {
                    "id": "msg_2",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Cold.", "annotations": []}],
                }
            ]
        else:
            output = [
                {"id": "rs_1", "type": "reasoning", "summary": []},
                {**CALL, "status": "completed"},
            ]
            if body.get("store") is not False:
                self.kept |= {"rs_1", "fc_1"}
                self.needs["fc_1"] = "rs_1"
        return {
            "id": f"resp_{len(self.requests)}",
            "object": "response",
            "created_at": 1,
            "model": body["model"],
            "status": "completed",
            "output": output,
            "usage": {"input_tokens": 10, "output_tokens": 5, "total_tokens": 15},
        }


@pytest.fixture
def keeping() -> Iterator[KeepingUpstream]:
    server = KeepingUpstream()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def proxy(keeping: KeepingUpstream) -> Iterator[ProxyServer]:
    with running_proxy(route_config(keeping, api="responses")) as server:
        yield server


def respond(proxy: ProxyServer, items: Any, **fields: Any) -> httpx.Response:
    body = {"model": "gpt-5", "input": items, **fields}
    if not body.get("stream"):
        return httpx.post(f"{proxy.url}/responses", headers=AUTH, json=body, timeout=30)
    with httpx.stream(
        "POST", f"{proxy.url}/responses", headers=AUTH, json=body, timeout=30
    ) as response:
        response.read()
    return response


def sent_inputs(upstream: FakeUpstream) -> list[Any]:
    return [r.json["input"] for r in upstream.requests]


@pytest.mark.parametrize("stream", [False, True])
def test_a_stored_reasoning_item_goes_back_by_its_id(
    proxy: ProxyServer, keeping: KeepingUpstream, stream: bool
) -> None:
    first = respond(proxy, [QUESTION], stream=stream)
    assert first.status_code == 200, first.text
    second = respond(proxy, [QUESTION, CALL, OUTPUT], stream=stream)
    assert second.status_code == 200, second.text
    assert sent_inputs(keeping)[1] == [QUESTION, RESTORED, CALL, OUTPUT]
    turns = httpx.get(f"{proxy.url}/conversations/ids", headers=AUTH).json()["turns"]
    (note,) = turns[1]["egress"]["messages"]
    assert (note["action"], note["source"]) == ("reinjected", "store")


def test_reasoning_made_with_store_off_goes_back_by_no_id(
    proxy: ProxyServer, keeping: KeepingUpstream
) -> None:
    assert respond(proxy, [QUESTION], store=False).status_code == 200
    answer = respond(proxy, [QUESTION, CALL, OUTPUT])
    assert answer.status_code == 200, answer.text
    assert sent_inputs(keeping)[1] == [QUESTION, CALL, OUTPUT]  # no id the upstream lacks


def test_a_request_with_store_off_gets_no_id_back(
    proxy: ProxyServer, keeping: KeepingUpstream
) -> None:
    assert respond(proxy, [QUESTION]).status_code == 200
    respond(proxy, [QUESTION, CALL, OUTPUT], store=False)
    assert sent_inputs(keeping)[1] == [QUESTION, CALL, OUTPUT]
