"""The demo: the simulated upstream on its own (called as an ASGI app, each
provider's wire format and refusals), the demo's config, and the real
`python -m proxy demo` in a subprocess driven with the official openai SDK."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import openai
import pytest

from proxy.config import describe
from proxy.demo.run import (
    DEMO_ROUTES,
    ENV_DELAY_MS,
    MOUNT,
    _delay,
    banner,
    build_demo_config,
)
from proxy.demo.simulator import Simulator
from proxy.demo.wire import FINGERPRINT, MODELS
from proxy.errors import ConfigError
from tests.casefiles import WEATHER_CHAT_TOOL
from tests.harness import running_demo

REPO = Path(__file__).resolve().parent.parent
QUESTION = "What is 17 * 23?"
WEATHER_TOOL: Any = WEATHER_CHAT_TOOL


# -- the simulator as an ASGI app ----------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    def events(self) -> list[bytes]:
        """The SSE events, each without its trailing blank line."""
        assert self.body.endswith(b"\n\n")
        return self.body[:-2].split(b"\n\n")

    def chunks(self) -> list[dict[str, Any]]:
        out = []
        for event in self.events():
            if event.startswith(b":") or event == b"data: [DONE]":
                continue
            assert event.startswith(b"data: ")
            out.append(json.loads(event[len(b"data: ") :]))
        return out


def call(method: str, path: str, body: Any = None, *, leave: bool = False) -> Answer:
    """Call the simulator as an ASGI server would. `leave`: the client
    disconnects right after sending its request."""
    raw = b"" if body is None else json.dumps(body).encode()

    async def run() -> list[dict[str, Any]]:
        sent: list[dict[str, Any]] = []
        pending = [{"type": "http.request", "body": raw, "more_body": False}]
        if leave:
            pending.append({"type": "http.disconnect"})

        async def receive() -> dict[str, Any]:
            if pending:
                return pending.pop(0)
            await asyncio.Event().wait()  # the client stays until the answer ends
            raise AssertionError("unreachable")

        async def send(message: Any) -> None:
            sent.append(dict(message))

        scope = {"type": "http", "method": method, "path": path, "headers": []}
        await Simulator(delay=0.001 if leave else 0)(scope, receive, send)
        return sent

    sent = asyncio.run(run())
    start = sent[0]
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return Answer(start["status"], headers, b"".join(m.get("body", b"") for m in sent[1:]))


def chat(model: str, content: str = QUESTION, **extra: Any) -> Answer:
    body = {"model": model, "messages": [{"role": "user", "content": content}], **extra}
    return call("POST", "/v1/chat/completions", body)


def joined(chunks: list[dict[str, Any]], key: str) -> str:
    return "".join(c["choices"][0]["delta"].get(key) or "" for c in chunks if c.get("choices"))


@pytest.mark.parametrize("model", list(MODELS))
def test_every_stream_is_sse_with_utf8_json_and_done(model: str) -> None:
    answer = chat(model, "What is the weather like in Zürich?", stream=True)
    assert answer.status == 200
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert answer.headers["x-simulated-upstream"] == FINGERPRINT
    assert answer.events()[-1] == b"data: [DONE]"
    assert "Zürich".encode() in answer.body  # UTF-8, not \u-escaped
    chunks = answer.chunks()
    assert all(c["system_fingerprint"] == FINGERPRINT for c in chunks)
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"


def test_deepseek_streams_reasoning_content_then_content_with_reasoning_tokens() -> None:
    chunks = chat("demo-deepseek", stream=True).chunks()
    assert chunks[0]["choices"][0]["delta"] == {
        "role": "assistant",
        "content": None,
        "reasoning_content": "",
    }
    deltas = [c["choices"][0]["delta"] for c in chunks]
    kinds = ["reasoning" if d.get("reasoning_content") else "content" for d in deltas[1:-1]]
    assert kinds == sorted(kinds, key=lambda k: k != "reasoning")  # reasoning first
    assert "391" in joined(chunks, "reasoning_content")
    assert joined(chunks, "content") == "17 * 23 = 391."
    usage = chunks[-1]["usage"]
    assert usage["completion_tokens_details"]["reasoning_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_openrouter_sends_reasoning_twice_with_the_same_text_then_an_encrypted_item() -> None:
    answer = chat("demo-openrouter", stream=True)
    assert answer.events()[0] == b": OPENROUTER PROCESSING"
    chunks = answer.chunks()
    assert all(c["provider"] == "DemoSimulator" for c in chunks)
    details = [d for c in chunks for d in c["choices"][0]["delta"].get("reasoning_details", [])]
    texts = [d for d in details if d["type"] == "reasoning.text"]
    assert [d["index"] for d in texts] == [0] * len(texts)
    assert "".join(d["text"] for d in texts) == joined(chunks, "reasoning")
    assert details[-1]["type"] == "reasoning.encrypted"
    assert details[-1]["index"] == 1
    assert joined(chunks, "content") == "17 * 23 = 391."
    whole = chat("demo-openrouter").json["choices"][0]["message"]
    assert [d["type"] for d in whole["reasoning_details"]] == [
        "reasoning.text",
        "reasoning.encrypted",
    ]
    assert whole["reasoning_details"][0]["text"] == whole["reasoning"]


@pytest.mark.parametrize("model", ["demo-vllm", "demo-groq"])
def test_vllm_and_groq_use_the_reasoning_field(model: str) -> None:
    chunks = chat(model, stream=True).chunks()
    assert "391" in joined(chunks, "reasoning")
    assert not joined(chunks, "reasoning_content")
    assert chat(model).json["choices"][0]["message"]["reasoning"]


def test_groq_reports_stream_usage_in_x_groq() -> None:
    chunks = chat("demo-groq", stream=True).chunks()
    assert chunks[-1]["x_groq"]["usage"]["completion_tokens"] > 0
    assert "usage" not in chunks[-1]


def test_minimax_thinks_inline_and_splits_on_request() -> None:
    content = joined(chat("demo-minimax", stream=True).chunks(), "content")
    assert content.startswith("<think>\n")
    assert content.endswith("</think>\n\n17 * 23 = 391.")
    split = chat("demo-minimax", reasoning_split=True).json["choices"][0]["message"]
    assert split["content"] == "17 * 23 = 391."
    assert split["reasoning_details"][0]["type"] == "reasoning.text"


def test_qwen_starts_inside_the_reasoning_and_only_closes_the_tag() -> None:
    content = joined(chat("demo-qwen", stream=True).chunks(), "content")
    assert "<think>" not in content
    reasoning, answer = content.split("\n</think>\n\n")
    assert "391" in reasoning
    assert answer == "17 * 23 = 391."


@pytest.mark.parametrize("model", list(MODELS))
def test_stream_and_whole_answer_say_the_same(model: str) -> None:
    def text(message: dict[str, Any]) -> str:
        return json.dumps({k: v for k, v in message.items() if k != "role"}, sort_keys=True)

    whole = chat(model).json["choices"][0]["message"]
    chunks = chat(model, stream=True).chunks()
    for key in ("content", "reasoning_content", "reasoning"):
        if key in whole:
            assert joined(chunks, key) == whole[key], text(whole)


def test_the_same_request_gets_the_same_answer() -> None:
    def strip_time(chunks: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in c.items() if k != "created"} for c in chunks]

    first = strip_time(chat("demo-kimi", stream=True).chunks())
    assert first == strip_time(chat("demo-kimi", stream=True).chunks())


def test_usage_chunk_only_when_asked_for_where_openai_does_so() -> None:
    plain = chat("demo-vllm", stream=True).chunks()
    assert all("usage" not in c for c in plain)
    asked = chat("demo-vllm", stream=True, stream_options={"include_usage": True}).chunks()
    assert asked[-1]["choices"] == []
    assert asked[-1]["usage"]["completion_tokens"] > 0


def test_thinking_switched_off_means_no_reasoning() -> None:
    off = chat("demo-deepseek", thinking={"type": "disabled"}).json["choices"][0]["message"]
    assert "reasoning_content" not in off
    qwen = chat("demo-qwen", chat_template_kwargs={"enable_thinking": False}).json
    assert qwen["choices"][0]["message"]["content"] == "17 * 23 = 391."


def test_effort_changes_how_long_the_reasoning_is() -> None:
    def reasoning(effort: str) -> str:
        body = chat("demo-deepseek", reasoning_effort=effort).json
        return str(body["choices"][0]["message"]["reasoning_content"])

    assert len(reasoning("low")) < len(reasoning("medium")) < len(reasoning("high"))


def test_answers_are_topical() -> None:
    def answer(text: str) -> str:
        return str(chat("demo-vllm", text).json["choices"][0]["message"]["content"])

    assert answer("what is 12 + 30") == "12 + 30 = 42."
    assert answer("What is 1 / 0?").endswith("you cannot divide by zero.")
    assert "Lisbon" in answer("What's the weather in Lisbon?")
    assert "photosynthesis" in answer("Explain photosynthesis to me")
    assert answer("hello there").startswith("Hello!")


def test_kimi_calls_get_weather_with_arguments_in_pieces() -> None:
    body = {
        "model": "demo-kimi",
        "stream": True,
        "messages": [{"role": "user", "content": "What's the weather in Paris?"}],
        "tools": [WEATHER_TOOL],
    }
    chunks = call("POST", "/v1/chat/completions", body).chunks()
    deltas = [c["choices"][0]["delta"] for c in chunks]
    calls = [d["tool_calls"][0] for d in deltas if "tool_calls" in d]
    assert calls[0]["id"].startswith("call_")
    assert calls[0]["function"] == {"name": "get_weather", "arguments": ""}
    pieces = [c["function"]["arguments"] for c in calls[1:]]
    assert len(pieces) > 1
    assert json.loads("".join(pieces)) == {"city": "Paris"}
    assert "get_weather" in joined(chunks, "reasoning_content")
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert joined(chunks, "content") == ""


def agent_tool(name: str, *required: str) -> dict[str, Any]:
    properties = {n: {"type": "string"} for n in (*required, "timeout")}
    return {
        "type": "function",
        "function": {
            "name": name,
            "parameters": {"type": "object", "properties": properties, "required": list(required)},
        },
    }


def tool_call_of(content: str, tools: list[dict[str, Any]]) -> dict[str, Any]:
    body = {
        "model": "demo-kimi",
        "messages": [{"role": "user", "content": content}],
        "tools": tools,
    }
    message = call("POST", "/v1/chat/completions", body).json["choices"][0]["message"]
    function: dict[str, Any] = message["tool_calls"][0]["function"]
    return function


def test_the_tool_a_user_names_is_called_with_the_quoted_command() -> None:
    """A coding agent offers dozens of tools: the one the user names is the
    one called, every required parameter is filled, and a `quoted` span is
    taken as it is."""
    tools = [agent_tool("Agent", "description", "prompt"), agent_tool("Bash", "command")]
    function = tool_call_of("Use the Bash tool to run `echo hello-from-tool`", tools)
    assert function["name"] == "Bash"
    assert json.loads(function["arguments"]) == {"command": "echo hello-from-tool"}
    # a named tool gets all of its required parameters
    function = tool_call_of("Ask the Agent to plan a small refactoring of the parser", tools)
    assert function["name"] == "Agent"
    assert set(json.loads(function["arguments"])) == {"description", "prompt"}


SHELL = [agent_tool("Agent", "description", "prompt"), agent_tool("Bash", "command")]


def bash_calls(messages: list[dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
    """The tool calls of demo-kimi's streamed reply, put together by index as
    an OpenAI client does; [] for an answer."""
    body = {"model": "demo-kimi", "stream": True, "messages": messages, "tools": SHELL, **extra}
    chunks = call("POST", "/v1/chat/completions", body).chunks()
    calls: dict[int, dict[str, Any]] = {}
    for chunk in chunks:
        for piece in chunk["choices"][0]["delta"].get("tool_calls") or ():
            into = calls.setdefault(piece["index"], {"arguments": ""})
            if "id" in piece:  # a call's first piece: its id and name, then only arguments
                assert "id" not in into
                into.update(id=piece["id"], name=piece["function"]["name"])
            into["arguments"] += piece["function"]["arguments"]
    finish = chunks[-1]["choices"][0]["finish_reason"]
    assert finish == ("tool_calls" if calls else "stop")
    return [calls[i] for i in sorted(calls)]


def ran(messages: list[dict[str, Any]], calls: list[dict[str, Any]], order: Any = None) -> None:
    """The assistant turn with `calls`, then each call's result (the command's
    last word), in `order` (the order the client finished them)."""
    messages.append(
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "I should call Bash.",
            "tool_calls": [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": c["arguments"]},
                }
                for c in calls
            ],
        }
    )
    for c in order(calls) if order else calls:
        word = json.loads(c["arguments"])["command"].split()[-1]
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": word})


def test_commands_asked_in_a_row_are_called_one_per_turn() -> None:
    """`a`, then `b`, then `c`: one call per turn, in order, each after the
    result of the one before; then one answer from all the results."""
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": "Use the Bash tool to run `echo one`, then `echo two`, then `echo three`",
        }
    ]
    for command in ("echo one", "echo two", "echo three"):
        calls = bash_calls(messages)
        assert [json.loads(c["arguments"]) for c in calls] == [{"command": command}]
        ran(messages, calls)
    assert bash_calls(messages) == []
    answer = call(
        "POST", "/v1/chat/completions", {"model": "demo-kimi", "messages": messages, "tools": SHELL}
    )
    message = answer.json["choices"][0]["message"]
    assert (
        message["content"]
        == "According to Bash: one. According to Bash: two. According to Bash: three."
    )
    assert message["reasoning_content"].startswith("My earlier reasoning is back in the context")


def test_commands_asked_at_once_are_parallel_tool_calls() -> None:
    """ "at once": one turn with a call per command, each its own `index`
    (Kimi's and OpenAI's parallel tool calls); the results may come back in
    any order (Claude Code sends them as they finish)."""
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Use the Bash tool to run `echo alpha` and `echo beta` at once"}
    ]
    calls = bash_calls(messages)
    assert [json.loads(c["arguments"]) for c in calls] == [
        {"command": "echo alpha"},
        {"command": "echo beta"},
    ]
    assert calls[0]["id"] != calls[1]["id"]
    whole = call(
        "POST", "/v1/chat/completions", {"model": "demo-kimi", "messages": messages, "tools": SHELL}
    )
    assert [c["id"] for c in whole.json["choices"][0]["message"]["tool_calls"]] == [
        c["id"] for c in calls
    ]
    ran(messages, calls, order=lambda cs: cs[::-1])
    body = {"model": "demo-kimi", "messages": messages, "tools": SHELL}
    message = call("POST", "/v1/chat/completions", body).json["choices"][0]["message"]
    assert message["content"] == "According to Bash: beta. According to Bash: alpha."
    # a request that forbids parallel calls gets them one per turn
    assert len(bash_calls(messages[:1], parallel_tool_calls=False)) == 1


def test_a_tool_loop_whose_first_turn_lost_its_reasoning_is_refused_at_any_step() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Use the Bash tool to run `echo one`, then `echo two`"}
    ]
    ran(messages, bash_calls(messages))
    ran(messages, bash_calls(messages))
    del messages[1]["reasoning_content"]
    body = {"model": "demo-kimi", "messages": messages, "tools": SHELL}
    assert call("POST", "/v1/chat/completions", body).status == 400


def test_a_shell_result_is_quoted_without_its_header() -> None:
    """Codex's exec_command result starts with a header (chunk id, wall time,
    exit code); the answer quotes what the command printed."""
    result = (
        "Chunk ID: 9fba82\nWall time: 0.0000 seconds\nProcess exited with code 0\n"
        "Original token count: 4\nOutput:\nhello-from-tool\n"
    )
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "Use the Bash tool to run `echo hello-from-tool`"}
    ]
    calls = bash_calls(messages)
    ran(messages, calls)
    messages[-1]["content"] = result
    body = {"model": "demo-kimi", "messages": messages, "tools": SHELL}
    message = call("POST", "/v1/chat/completions", body).json["choices"][0]["message"]
    assert message["content"] == "According to Bash: hello-from-tool."


def test_a_question_that_names_no_tool_is_answered_without_one() -> None:
    """Coding agents offer tools with every request; a question that names
    none (and no get_weather on offer) is answered directly, not sent to the
    first tool (Claude Code's Agent tool then looped on itself)."""
    tools = [agent_tool("Agent", "description", "prompt"), agent_tool("Bash", "command")]
    body = {
        "model": "demo-kimi",
        "messages": [{"role": "user", "content": "What is 17 * 23?"}],
        "tools": tools,
    }
    message = call("POST", "/v1/chat/completions", body).json["choices"][0]["message"]
    assert "tool_calls" not in message or not message["tool_calls"]
    assert message["content"] == "17 * 23 = 391."


def tool_loop(reasoning: Any = None, *, with_key: bool = True) -> list[dict[str, Any]]:
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    if with_key:
        assistant["reasoning_content"] = reasoning
    return [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "What's the weather in Paris?"},
        assistant,
        {"role": "tool", "tool_call_id": "call_1", "content": "18°C, sunny"},
    ]


@pytest.mark.parametrize(
    ("messages", "refused"),
    [
        pytest.param(tool_loop(with_key=False), True, id="key-missing"),
        pytest.param(tool_loop(None), True, id="null"),
        pytest.param(tool_loop(""), True, id="empty-string-counts-as-missing"),
        pytest.param(tool_loop(" "), False, id="one-space-placeholder"),
        pytest.param(tool_loop("I should call get_weather."), False, id="reasoning"),
    ],
)
def test_kimi_refuses_a_tool_call_turn_without_reasoning_content(
    messages: list[dict[str, Any]], refused: bool
) -> None:
    answer = call("POST", "/v1/chat/completions", {"model": "demo-kimi", "messages": messages})
    if refused:
        assert answer.status == 400
        assert answer.json == {
            "error": {
                "type": "invalid_request_error",
                "message": "thinking is enabled but reasoning_content is missing in assistant "
                "tool call message at index 2",
            },
            "type": "error",
        }
    else:
        assert answer.status == 200
        message = answer.json["choices"][0]["message"]
        assert message["content"] == "According to get_weather: 18°C, sunny."


def test_kimi_with_thinking_off_needs_no_reasoning() -> None:
    body = {"model": "demo-kimi", "messages": tool_loop(with_key=False)}
    answer = call("POST", "/v1/chat/completions", {**body, "thinking": {"type": "disabled"}})
    assert answer.status == 200


def test_deepseek_refuses_a_tool_call_turn_without_reasoning_content() -> None:
    missing = call(
        "POST",
        "/v1/chat/completions",
        {"model": "demo-deepseek", "messages": tool_loop(with_key=False)},
    )
    assert missing.status == 400
    assert missing.json["error"]["message"] == (
        "The reasoning_content in the thinking mode must be passed back to the API."
    )
    empty = {"model": "demo-deepseek", "messages": tool_loop("")}
    assert call("POST", "/v1/chat/completions", empty).status == 200


def test_groq_refuses_reasoning_content_in_the_input() -> None:
    echoed = {"model": "demo-groq", "messages": tool_loop(" ")}
    answer = call("POST", "/v1/chat/completions", echoed)
    assert answer.status == 400
    assert answer.json["error"]["message"] == (
        "'messages.2' : for 'role:assistant' the following must be satisfied"
        "[('messages.2' : property 'reasoning_content' is unsupported)]"
    )
    clean = {"model": "demo-groq", "messages": tool_loop(with_key=False)}
    assert call("POST", "/v1/chat/completions", clean).status == 200


def test_the_stream_stops_when_the_client_leaves() -> None:
    body = {"model": "demo-vllm", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    answer = call("POST", "/v1/chat/completions", body, leave=True)
    assert answer.status == 200
    assert b"[DONE]" not in answer.body


def test_models_are_listed_and_labelled_simulated() -> None:
    body = call("GET", "/v1/models").json
    assert [m["id"] for m in body["data"]] == list(MODELS)
    assert "SIMULATED" in body["note"]
    assert all(m["description"].startswith("SIMULATED") for m in body["data"])


@pytest.mark.parametrize(
    ("method", "path", "body", "status"),
    [
        ("POST", "/v1/chat/completions", {"model": "gpt-4o", "messages": [{"role": "user"}]}, 404),
        ("POST", "/v1/chat/completions", {"model": "demo-vllm", "messages": []}, 400),
        ("POST", "/v1/chat/completions", ["not", "an", "object"], 400),
        ("GET", "/v1/chat/completions", None, 405),
        ("POST", "/v1/models", None, 405),
        ("GET", "/v1/embeddings", None, 404),
    ],
)
def test_bad_requests_get_openai_shaped_errors(
    method: str, path: str, body: Any, status: int
) -> None:
    answer = call(method, path, body)
    assert answer.status == status
    assert set(answer.json["error"]) >= {"message", "type"}


# -- the demo's config -----------------------------------------------------------------


def test_the_demo_config_has_one_route_per_model_and_a_catch_all() -> None:
    config = build_demo_config("0.0.0.0", 9999, env={})
    assert [r.name for r in config.routes] == [*MODELS, "demo"]
    assert set(DEMO_ROUTES) == set(MODELS)
    assert all(r.upstream == f"http://127.0.0.1:9999{MOUNT}/v1" for r in config.routes)
    assert config.route_for(None) is config.routes[-1]
    by_name = {r.name: r for r in config.routes}
    assert by_name["demo-kimi"].dialect.name == "kimi"
    assert by_name["demo-kimi"].reasoning == {}  # include_in_context auto does the job
    assert by_name["demo-qwen"].implicit_open_tag
    assert not by_name["demo-deepseek"].implicit_open_tag
    for name in ("demo-openrouter", "demo-vllm", "demo-minimax"):
        assert by_name[name].reasoning == {"format": "native"}
        assert by_name[name].dialect.name == name.removeprefix("demo-")
    assert by_name["demo-groq"].dialect.never_send
    assert config.store.url == "memory://"
    assert config.secret is not None  # generated: nothing outlives a memory store


def test_the_demo_config_keeps_a_given_secret_and_store() -> None:
    config = build_demo_config(
        "::", 8000, store="sqlite:///demo.db", env={"REASONING_PROXY_SECRET": "s3cret"}
    )
    assert config.routes[0].upstream == f"http://[::1]:8000{MOUNT}/v1"
    assert config.store.url == "sqlite:///demo.db"
    assert config.secret is not None
    assert config.secret.get() == "s3cret"
    assert describe(config)["server"]["secret"] == "<set>"


def test_the_banner_says_simulated_and_shows_how_to_call_it() -> None:
    text = banner(build_demo_config("0.0.0.0", 8787, env={}))
    assert "SIMULATED" in text
    assert "http://127.0.0.1:8787/v1" in text
    assert "curl -sN http://127.0.0.1:8787/v1/chat/completions" in text
    assert 'OpenAI(base_url="http://127.0.0.1:8787/v1"' in text
    assert "http://127.0.0.1:8787/ui" in text
    assert all(model in text for model in MODELS)


@pytest.mark.parametrize(("raw", "seconds"), [(None, 0.03), ("0", 0.0), ("25", 0.025)])
def test_the_stream_delay_comes_from_the_environment(raw: str | None, seconds: float) -> None:
    env = {} if raw is None else {ENV_DELAY_MS: raw}
    assert _delay(env) == pytest.approx(seconds)


@pytest.mark.parametrize("raw", ["fast", "-1", "nan", "99999"])
def test_a_bad_stream_delay_is_a_config_error(raw: str) -> None:
    with pytest.raises(ConfigError, match=ENV_DELAY_MS):
        _delay({ENV_DELAY_MS: raw})


# -- the real `python -m proxy demo` ---------------------------------------------------


@dataclass
class Demo:
    base: str
    output: Path

    def client(self, path: str = "/v1", **headers: str) -> openai.OpenAI:
        return openai.OpenAI(
            base_url=self.base + path, api_key="demo", max_retries=0, default_headers=headers
        )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    output = tmp_path_factory.mktemp("demo") / "output.txt"
    with running_demo(output) as base:
        yield Demo(base, output)


def test_the_demo_prints_how_to_use_it(demo: Demo) -> None:
    text = demo.output.read_text()
    assert "SIMULATED" in text
    assert f"Base URL:   {demo.base}/v1" in text
    assert f"curl -sN {demo.base}/v1/chat/completions" in text
    assert f"{demo.base}/ui" in text
    assert "from openai import OpenAI" in text


def test_the_demo_lists_every_model(demo: Demo) -> None:
    with demo.client() as client:
        ids = {m.id for m in client.models.list()}
    assert ids >= set(MODELS)


@pytest.mark.parametrize("model", list(MODELS))
def test_every_demo_model_streams_reasoning_apart_from_the_answer(demo: Demo, model: str) -> None:
    content: list[str] = []
    reasoning: list[str] = []
    with (
        demo.client() as client,
        client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": QUESTION}], stream=True
        ) as stream,
    ):
        for chunk in stream:
            assert chunk.system_fingerprint == FINGERPRINT
            for choice in chunk.choices:
                content.append(choice.delta.content or "")
                reasoning.append((choice.delta.model_extra or {}).get("reasoning_content") or "")
    answer, thought = "".join(content), "".join(reasoning)
    assert answer == "17 * 23 = 391."
    assert "Working it out: 17 * 23 = 391." in thought
    for tag in ("<think>", "</think>"):
        assert tag not in answer
        assert tag not in thought


@pytest.mark.parametrize("model", list(MODELS))
def test_every_demo_model_answers_whole_with_reasoning_content(demo: Demo, model: str) -> None:
    with demo.client() as client:
        completion = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": QUESTION}]
        )
    message = completion.choices[0].message
    assert message.content == "17 * 23 = 391."
    assert "391" in (message.model_extra or {})["reasoning_content"]


def kimi_tool_loop(client: openai.OpenAI, city: str) -> tuple[str, str]:
    """Ask, get a tool call, send it back as agent frameworks do (the SDK's
    typed fields only: no reasoning), plus the tool's result. Returns the
    final (answer, reasoning)."""
    question: list[Any] = [{"role": "user", "content": f"What's the weather in {city}?"}]
    calls: dict[int, dict[str, Any]] = {}
    with client.chat.completions.create(
        model="demo-kimi",
        messages=question,
        tools=[WEATHER_TOOL],
        stream=True,
    ) as stream:
        for chunk in stream:
            for choice in chunk.choices:
                for delta in choice.delta.tool_calls or []:
                    call = calls.setdefault(delta.index, {"arguments": ""})
                    if delta.id:
                        call["id"] = delta.id
                    if delta.function and delta.function.name:
                        call["name"] = delta.function.name
                    if delta.function and delta.function.arguments:
                        call["arguments"] += delta.function.arguments
    assert [c["name"] for c in calls.values()] == ["get_weather"]
    assert json.loads(calls[0]["arguments"]) == {"city": city}
    assistant: Any = {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for c in calls.values()
        ],
    }
    result: Any = {"role": "tool", "tool_call_id": calls[0]["id"], "content": "18°C, sunny"}
    final = client.chat.completions.create(
        model="demo-kimi",
        messages=[*question, assistant, result],
        tools=[WEATHER_TOOL],
    )
    message = final.choices[0].message
    return message.content or "", (message.model_extra or {}).get("reasoning_content") or ""


def test_the_kimi_tool_loop_works_because_the_proxy_reinjects_reasoning(demo: Demo) -> None:
    with demo.client() as client:
        answer, reasoning = kimi_tool_loop(client, "Paris")
    assert answer == "According to get_weather: 18°C, sunny."
    assert "My earlier reasoning is back in the context" in reasoning


def test_the_simulator_refuses_the_same_loop_without_the_proxy(demo: Demo) -> None:
    with demo.client(MOUNT + "/v1") as client, pytest.raises(openai.BadRequestError) as refused:
        kimi_tool_loop(client, "Oslo")
    assert refused.value.status_code == 400
    assert (
        "thinking is enabled but reasoning_content is missing in assistant tool call "
        "message at index 1"
    ) in str(refused.value)


def test_without_include_in_context_kimi_gets_only_the_placeholder(demo: Demo) -> None:
    # The kimi dialect keeps the key on tool-call turns with the one-space
    # placeholder Kimi accepts, so the loop goes on, but without the reasoning.
    with demo.client(**{"X-Reasoning-Include-In-Context": "false"}) as client:
        answer, reasoning = kimi_tool_loop(client, "Berlin")
    assert answer == "According to get_weather: 18°C, sunny."
    assert "My earlier reasoning is not in the context" in reasoning


def test_groq_gets_no_reasoning_even_when_the_client_echoes_it(demo: Demo) -> None:
    history: list[Any] = [
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": "Hello!", "reasoning_content": "The user greets me."},
        {"role": "user", "content": QUESTION},
    ]
    with demo.client() as client:
        through = client.chat.completions.create(model="demo-groq", messages=history)
    assert through.choices[0].message.content == "17 * 23 = 391."
    with (
        demo.client(MOUNT + "/v1") as client,
        pytest.raises(openai.BadRequestError, match="property 'reasoning_content' is unsupported"),
    ):
        client.chat.completions.create(model="demo-groq", messages=history)
