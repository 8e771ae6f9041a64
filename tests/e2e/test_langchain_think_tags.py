"""LangChain's ChatOpenAI keeps no reasoning field (tests/e2e/test_clients.py
shows it dropping `reasoning_content`); with `X-Reasoning-Output:
think_tags` the reasoning reaches it inline, at the start of the content a
chat UI renders, streamed with whole tags, and the conversation it sends
back is matched to the stored turn. The real proxy on a socket, a fake
LiteLLM-style upstream with signed thinking blocks."""

from __future__ import annotations

import copy

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_openai import ChatOpenAI

from tests.harness import FakeUpstream, Json, Stream, route_config, running_proxy
from tests.shapecases import CASES

(THINKING,) = [c for c in CASES if c.id == "litellm-thinking-blocks"]
(TOOLS,) = [c for c in CASES if c.id == "thinking-blocks-around-tool-calls"]
SHOWN = "<think>\nLet me think.\n</think>\n\nParis."


def chat(url: str, conversation: str) -> ChatOpenAI:
    return ChatOpenAI(
        base_url=url,
        api_key="sk-test",  # type: ignore[arg-type]
        model="claude-via-litellm",
        max_retries=0,
        default_headers={"X-Reasoning-Output": "think_tags", "X-Conversation-Id": conversation},
    )


def test_chat_openai_shows_the_reasoning_with_think_tags(upstream: FakeUpstream) -> None:
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        message = chat(proxy.url, "lc-whole").invoke([HumanMessage("Capital of France?")])
        assert message.content == SHOWN
        assert "reasoning_content" not in message.additional_kwargs

        upstream.script(Stream(copy.deepcopy(THINKING.chunks)))
        pieces = [c.content for c in chat(proxy.url, "lc-stream").stream("Capital of France?")]
        assert "".join(str(p) for p in pieces) == SHOWN
        # a UI that renders as it reads never sees half a tag
        assert sum(str(p).count("<think>") for p in pieces) == 1
        assert sum(str(p).count("</think>") for p in pieces) == 1
        assert str(pieces[1]).startswith("<think>\n")


def test_chat_openai_history_goes_back_with_the_stored_signatures(upstream: FakeUpstream) -> None:
    """A tool loop: ChatOpenAI sends its AIMessage back with the <think>
    blocks in its content; the upstream gets the content without them and
    the stored thinking blocks, signatures unchanged."""
    with running_proxy(route_config(upstream, dialect="litellm")) as proxy:
        model = chat(proxy.url, "lc-tools")
        upstream.script(Stream(copy.deepcopy(TOOLS.chunks)))
        first = None
        for piece in model.stream("Look up a and b."):
            first = piece if first is None else first + piece
        assert isinstance(first, AIMessage)
        assert str(first.content).startswith("<think>\nFirst look up a.\n</think>")
        assert [c["id"] for c in first.tool_calls] == ["toolu_01", "toolu_02"]

        upstream.script(Json(copy.deepcopy(THINKING.completion)))
        answer = model.invoke(
            [
                HumanMessage("Look up a and b."),
                first,
                ToolMessage("a", tool_call_id="toolu_01"),
                ToolMessage("b", tool_call_id="toolu_02"),
            ]
        )
        assert answer.content == SHOWN
    sent = upstream.chat_requests()[-1].json["messages"][1]
    assert not sent.get("content")
    assert sent["thinking_blocks"] == [
        {"type": "thinking", "thinking": "First look up a.", "signature": TOOLS.blocks[0][1]},  # type: ignore[index]
        {"type": "thinking", "thinking": "Then b.", "signature": TOOLS.blocks[1][1]},  # type: ignore[index]
    ]
