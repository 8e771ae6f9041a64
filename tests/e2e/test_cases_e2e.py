"""Every conformance case through the real server: the proxy under uvicorn on
a real socket, a fake upstream on another, the official openai SDK and httpx
as clients."""

from __future__ import annotations

import copy
from typing import Any

import httpx
import openai
import pytest

from proxy.reasoning.tags import DEFAULT_TAG_SET
from tests.casefiles import load_cases, no_ws
from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy

INGRESS = load_cases("ingress")
EGRESS = load_cases("egress")


def answer(case_upstream: list[dict[str, Any]], stream: bool) -> Any:
    if stream:
        return Stream(copy.deepcopy(case_upstream))
    return Json(copy.deepcopy(case_upstream[0]) if case_upstream else {})


@pytest.mark.parametrize("case", INGRESS, ids=[c["id"] for c in INGRESS])
def test_ingress_case_with_the_openai_sdk(case: dict[str, Any], upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, **case["route"])) as proxy:
        client = openai.OpenAI(base_url=proxy.url, api_key="sk-test", max_retries=0)
        upstream.script(answer(case["upstream"], case["stream"]))
        messages: Any = [{"role": "user", "content": "hi"}]
        if case["stream"]:
            content, reasoning, ids, finish = [], [], [], None
            with client.chat.completions.create(
                model="any-model",
                messages=messages,
                stream=True,
                extra_headers={"X-Conversation-Id": "case-" + case["id"]},
            ) as stream:
                for chunk in stream:
                    for choice in chunk.choices:
                        content.append(choice.delta.content or "")
                        extra = choice.delta.model_extra or {}
                        reasoning.append(extra.get("reasoning_content") or "")
                        ids += [c.id for c in choice.delta.tool_calls or [] if c.id]
                        finish = choice.finish_reason or finish
            got_content, got_reasoning = "".join(content), "".join(reasoning)
        else:
            completion = client.chat.completions.create(
                model="any-model",
                messages=messages,
                extra_headers={"X-Conversation-Id": "case-" + case["id"]},
            )
            message = completion.choices[0].message
            got_content = message.content or ""
            got_reasoning = (message.model_extra or {}).get("reasoning_content") or ""
            ids = [c.id for c in message.tool_calls or []]
            finish = completion.choices[0].finish_reason
        expect = case["expect"]
        assert got_content.strip() == expect["content"]
        assert not any(d in got_content.lower() for d in DEFAULT_TAG_SET.delimiters())
        assert no_ws(got_reasoning) == no_ws("".join(expect["thinking"]))
        assert ids == expect["tool_call_ids"]
        assert finish == expect["finish_reason"]
        # what the store kept
        stored = httpx.get(
            f"{proxy.url}/conversations/case-{case['id']}",
            headers={"Authorization": "Bearer sk-test"},
        ).json()
        (turn,) = stored["turns"]
        thoughts = [b["thought"].strip() for b in turn["blocks"] if b["thought"]]
        assert thoughts == expect["thinking"]
        assert turn["toolCallIds"] == expect["tool_call_ids"]
        assert turn["finishReason"] == expect["finish_reason"]
        assert not any(d in turn["content"].lower() for d in DEFAULT_TAG_SET.delimiters())


def _norm(value: Any) -> Any:
    return no_ws(value) if isinstance(value, str) else value


def _check_message(expected: dict[str, Any], got: dict[str, Any], where: str) -> None:
    assert got.get("role") == expected.get("role"), where
    exp_content, got_content = expected.get("content"), got.get("content")
    if isinstance(exp_content, str) or isinstance(got_content, str):
        assert no_ws(exp_content or "") == no_ws(got_content or ""), where
    assert got.get("tool_call_id") == expected.get("tool_call_id"), where
    exp_calls, got_calls = expected.get("tool_calls") or [], got.get("tool_calls") or []
    assert len(exp_calls) == len(got_calls), where
    for e, g in zip(exp_calls, got_calls, strict=True):
        assert g["id"] == e["id"], where
        assert g["function"]["name"] == e["function"]["name"], where
        assert no_ws(g["function"]["arguments"]) == no_ws(e["function"]["arguments"]), where
    # thinking_blocks too: the project's own cases check what a litellm route sends
    for field in (
        "reasoning_content",
        "reasoning",
        "reasoning_details",
        "thinking",
        "thinking_blocks",
    ):
        if field not in expected:
            assert field not in got, f"{where}: unexpected {field}"
            continue
        value = expected[field]
        if value is None:
            assert no_ws(got.get(field) or "") == "", f"{where}: {field} should carry no text"
        elif isinstance(value, str):
            assert isinstance(got.get(field), str), f"{where}: {field} missing"
            assert no_ws(got[field]) == no_ws(value), f"{where}: {field}"
        else:
            assert got.get(field) == value, f"{where}: {field}"


@pytest.mark.parametrize("case", EGRESS, ids=[c["id"] for c in EGRESS])
def test_egress_case(case: dict[str, Any], upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, **case["route"])) as proxy:
        for n, step in enumerate(case["steps"]):
            where = f"{case['id']} step {n + 1}"
            before = len(upstream.chat_requests())
            stream = bool(step["request"].get("stream"))
            if step["upstream"]:
                upstream.script(answer(step["upstream"], stream))
            with httpx.Client(timeout=30) as client:
                response = client.post(
                    f"{proxy.url}/chat/completions", json=step["request"], headers=step["headers"]
                )
                body = response.read()
            assert response.status_code == step.get("expect_status", 200), (where, body)
            received = upstream.chat_requests()[before:]
            expected = step.get("expect_upstream_request")
            if expected is None:
                assert received == [], where
            else:
                assert len(received) == 1, where
                sent = received[0].json
                assert len(sent["messages"]) == len(expected["messages"]), where
                for i, (e, g) in enumerate(
                    zip(expected["messages"], sent["messages"], strict=True)
                ):
                    _check_message(e, g, f"{where} message {i}")
                for key, value in expected.items():
                    if key in ("messages", "absent_keys"):
                        continue
                    assert sent.get(key) == value, f"{where}: {key}"
                for key in expected.get("absent_keys", []):
                    assert key not in sent, f"{where}: {key} should be absent"
            if "expect_error" in step:
                error = response.json()["error"]
                spec = step["expect_error"]
                for key in ("type", "param", "code"):
                    assert error[key] == spec[key], (where, key)
                for text in spec.get("message_contains", []):
                    assert text in error["message"], where
                for text in spec.get("message_not_contains", []):
                    assert text not in error["message"], where
            upstream.script()  # leftover answers are not carried into the next step
