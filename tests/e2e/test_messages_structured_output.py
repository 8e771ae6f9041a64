"""Structured outputs through the Messages door to a Chat upstream: the
anthropic SDK's `messages.parse(output_format=Model)` sends
`output_config.format` (a JSON schema), which the chat upstream gets as
`response_format: json_schema`, and the SDK parses the answer into the
model. A malformed format is a 400 in Anthropic's shape, nothing sent."""

from __future__ import annotations

import anthropic
import pytest
from pydantic import BaseModel

from tests.harness import FakeUpstream, Json, route_config, running_proxy
from tests.messages_wire import sdk_client


class Person(BaseModel):
    name: str
    age: int


def answer(content: str) -> Json:
    return Json(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "reasoning_content": "Fill the schema.",
                        "content": content,
                    },
                    "finish_reason": "stop",
                }
            ],
        }
    )


def test_messages_parse_gets_its_model(upstream: FakeUpstream) -> None:
    upstream.script(answer('{"name": "Ada", "age": 36}'))
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk_client(proxy.base, "sk-ant-test")
        message = client.messages.parse(
            model="m",
            max_tokens=200,
            messages=[{"role": "user", "content": "Who wrote the first program?"}],
            output_format=Person,
        )
    assert message.parsed_output == Person(name="Ada", age=36)
    sent = upstream.chat_requests()[0].json
    fmt = sent["response_format"]
    assert fmt["type"] == "json_schema"
    assert fmt["json_schema"]["name"] == "response"
    assert set(fmt["json_schema"]["schema"]["properties"]) == {"name", "age"}
    assert "output_config" not in sent


@pytest.mark.parametrize(
    ("output_config", "param"),
    [
        ({"format": "json"}, "output_config.format"),
        ({"format": {"type": "xml", "schema": {}}}, "output_config.format.type"),
        ({"format": {"type": "json_schema"}}, "output_config.format.schema"),
    ],
)
def test_a_malformed_format_is_refused(
    upstream: FakeUpstream, output_config: dict[str, object], param: str
) -> None:
    with running_proxy(route_config(upstream)) as proxy:
        client = sdk_client(proxy.base, "sk-ant-test")
        with pytest.raises(anthropic.BadRequestError) as refused:
            client.messages.create(
                model="m",
                max_tokens=20,
                messages=[{"role": "user", "content": "Hi"}],
                extra_body={"output_config": output_config},
            )
    assert param in refused.value.message
    assert upstream.requests == []
