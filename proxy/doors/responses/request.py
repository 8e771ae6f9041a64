"""A Responses request as a chat completions payload (pure).

`read_options()` checks the request's top-level fields and reads what the
door needs before translating (stream, store, previous_response_id,
include); `translate()` turns `instructions` and the input items (those of
the stored responses a `previous_response_id` chain names first, then the
request's own) into chat messages:

- `instructions`, and messages of role `system` or `developer`, become one
  system message at the start;
- a run of assistant-side items (reasoning, assistant messages, function
  and custom tool calls) becomes one assistant message, as the upstream
  produced it: its text (the messages' texts joined by a newline, as a
  message's parts are), its tool calls, and the reasoning of its reasoning
  items in `reasoning_content`: what a sealed `encrypted_content` holds (the
  text and the upstream's own artefacts, put back verbatim as
  `reasoning_details`), else the summary text the client kept;
- `function_call_output` and `custom_tool_call_output` become tool messages.

`include: ["message.output_text.logprobs"]` asks the upstream for chat's
`logprobs` (with `top_logprobs`); without it nothing more is asked.

Malformed input (a wrong type, a message without content, an output whose
`call_id` matches no call) is a BadRequest naming the field, before anything
goes upstream, and so are `conversation` and `prompt`
(`refuse_upstream_state`): a chat upstream keeps no conversation or prompt
template to use. A user message whose parts
were all dropped is left out (no empty message goes upstream); input with
nothing left is a BadRequest naming what was dropped. Fields and item types
a chat upstream has no use for are dropped and named
(`X-Proxy-Dropped-Fields`), never refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.doors.responses.tools import (
    CUSTOM_INPUT,
    ToolNames,
    chat_tool_choice,
    check_tool_choice,
    translate_tools,
)
from proxy.errors import BadRequest, require_type
from proxy.sealing import Sealed

Json = dict[str, Any]

ENCRYPTED_INCLUDE = "reasoning.encrypted_content"
LOGPROBS_INCLUDE = "message.output_text.logprobs"
MAX_TOP_LOGPROBS = 20
# top-level fields that are mapped (or used by the proxy itself)
MAPPED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "reasoning",
        "text",
        "stream",
        "store",
        "metadata",
        "previous_response_id",
        "include",
        "top_logprobs",
    }
)
# fields a chat upstream has no use for (dropped), which a Response repeats
ECHOED = ("user", "safety_identifier", "prompt_cache_key")
VERBOSITIES = ("low", "medium", "high")
ASSISTANT_SIDE = frozenset({"reasoning", "function_call", "custom_tool_call"})
TOOL_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output"})

# opens a reasoning item's encrypted_content: the envelope's content, or None
Opener = Callable[[Any], Sealed | None]


@dataclass(frozen=True, slots=True)
class Options:
    """What the door needs to know before translating."""

    model: str | None
    stream: bool
    store: bool
    include_encrypted: bool
    include_logprobs: bool  # the answer's token logprobs (asked of the upstream)
    previous_response_id: str | None
    metadata: Json | None


@dataclass(slots=True)
class Translation:
    payload: Json  # the chat completions body
    names: ToolNames
    input_items: list[Json]  # the request's own input, as items (kept with a stored response)
    effort: str | None  # reasoning.effort, the X-Reasoning-Effort control
    dropped_fields: list[str] = field(default_factory=list)
    dropped_tools: list[str] = field(default_factory=list)


def read_options(body: Json) -> Options:
    """The request's own options, its scalar fields checked (BadRequest names one)."""
    require_type(body, "model", str)
    require_type(body, "instructions", str)
    require_type(body, "stream", bool)
    require_type(body, "store", bool)
    require_type(body, "parallel_tool_calls", bool)
    require_type(body, "previous_response_id", str)
    require_type(body, "metadata", dict)
    require_type(body, "reasoning", dict)
    require_type(body, "text", dict)
    require_type(body, "include", list)
    for name in ECHOED:  # a Response repeats them
        require_type(body, name, str)
    for name in ("temperature", "top_p"):
        value = body.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise BadRequest(f"{name} must be a number.", param=name)
    limit = body.get("max_output_tokens")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise BadRequest("max_output_tokens must be a positive integer.", param="max_output_tokens")
    include = body.get("include") or []
    if not all(isinstance(i, str) for i in include):
        raise BadRequest("include must be an array of strings.", param="include")
    top = body.get("top_logprobs")
    if top is not None and (
        isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS
    ):
        raise BadRequest(
            f"top_logprobs must be an integer from 0 to {MAX_TOP_LOGPROBS}.", param="top_logprobs"
        )
    return Options(
        model=body.get("model"),
        stream=body.get("stream") is True,
        store=body.get("store") is not False,  # the API's default is true
        include_encrypted=ENCRYPTED_INCLUDE in include,
        include_logprobs=LOGPROBS_INCLUDE in include,
        previous_response_id=body.get("previous_response_id"),
        metadata=body.get("metadata"),
    )


# fields whose meaning is state the upstream keeps (OpenAI's Conversations
# API, its stored prompt templates): a chat upstream has none, and dropping
# them would answer without the history or the instructions they name
_UPSTREAM_STATE = {
    "conversation": (
        "conversation needs an upstream that keeps conversations (a route with "
        "api: responses); this model's route goes to a Chat Completions upstream. "
        "Send the history in input, or continue a stored response with "
        "previous_response_id (X-Conversation-Id names the proxy's own conversation)."
    ),
    "prompt": (
        "prompt (a stored prompt template) needs an upstream that keeps them (a route "
        "with api: responses); this model's route goes to a Chat Completions upstream. "
        "Send the template's text in instructions or input."
    ),
}


def refuse_upstream_state(body: Json) -> None:
    """A BadRequest for a field that names state the upstream keeps
    (`_UPSTREAM_STATE`), which a chat upstream does not have."""
    for name, message in _UPSTREAM_STATE.items():
        if body.get(name) is not None:
            raise BadRequest(message, param=name, code="unsupported_parameter")


def input_items(body: Json) -> list[Json]:
    """The request's `input` as a list of items (a string is one user message)."""
    value = body.get("input")
    if value is None:
        return []
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    if not isinstance(value, list):
        raise BadRequest("input must be a string or an array of items.", param="input")
    return value


def translate(body: Json, prior: list[Json], open_envelope: Opener) -> Translation:
    """The chat completions payload for a Responses request whose history
    (from `previous_response_id`) is `prior`."""
    own = input_items(body)
    tools = translate_tools(body.get("tools"))
    check_tool_choice(body.get("tool_choice"), tools.names)
    dropped = [k for k, v in body.items() if k not in MAPPED and v is not None]
    writer = _Messages(tools.names, open_envelope, dropped)
    instructions = body.get("instructions")
    if instructions:
        writer.system.append(instructions)
    for item in prior:
        writer.item(item, "previous_response_id")
    for n, item in enumerate(own):
        writer.item(item, f"input[{n}]")
    messages = writer.finish()
    if not any(m["role"] != "system" for m in messages):
        left = sorted({d.rpartition(".")[2] for d in dropped if d.startswith("input.")})
        if left:  # there was input, none of it a chat upstream can take
            raise BadRequest(
                "input holds nothing a chat upstream can read: its content parts and "
                f"items ({', '.join(left)}) were all dropped.",
                param="input",
                code="invalid_input",
            )
        raise BadRequest(
            "input must hold at least one message or item.", param="input", code="invalid_input"
        )
    payload: Json = {"messages": messages}
    if body.get("model") is not None:
        payload["model"] = body["model"]
    offered, choice = chat_tool_choice(body.get("tool_choice"), tools.tools, tools.names, dropped)
    if offered:
        payload["tools"] = offered
        if choice is not None:
            payload["tool_choice"] = choice
        if isinstance(body.get("parallel_tool_calls"), bool):
            payload["parallel_tool_calls"] = body["parallel_tool_calls"]
    if body.get("max_output_tokens") is not None:
        payload["max_tokens"] = body["max_output_tokens"]
    for name in ("temperature", "top_p"):
        if body.get(name) is not None:
            payload[name] = body[name]
    if isinstance(body.get("text"), dict):
        _text_format(body["text"], payload, dropped)
    _logprobs(body, payload, dropped)
    if body.get("stream") is True:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    effort = _reasoning(body.get("reasoning"), dropped)
    return Translation(
        payload=payload,
        names=tools.names,
        input_items=own,
        effort=effort,
        dropped_fields=sorted(set(dropped)),
        dropped_tools=sorted(set(tools.dropped)),
    )


def _logprobs(body: Json, payload: Json, dropped: list[str]) -> None:
    """`include: ["message.output_text.logprobs"]` (and `top_logprobs`) as
    chat's `logprobs` (and `top_logprobs`); without the include, nothing is
    asked of the upstream and `top_logprobs` is named as dropped."""
    include = body.get("include") or ()
    top = body.get("top_logprobs")
    if LOGPROBS_INCLUDE not in include:
        if top is not None:
            dropped.append("top_logprobs")
        return
    payload["logprobs"] = True
    if top is not None:
        payload["top_logprobs"] = top


def _text_format(text: Json, payload: Json, dropped: list[str]) -> None:
    """`text.format` as chat's `response_format`."""
    for key in text:
        if key != "format":
            dropped.append(f"text.{key}")  # verbosity: chat has no such control
    if text.get("verbosity") not in (None, *VERBOSITIES):  # a Response repeats it
        raise BadRequest(
            "text.verbosity must be one of: " + ", ".join(VERBOSITIES) + ".",
            param="text.verbosity",
        )
    fmt = text.get("format")
    if fmt is None:
        return
    if not isinstance(fmt, dict):
        raise BadRequest("text.format must be an object.", param="text.format")
    kind = fmt.get("type")
    if kind == "json_schema":
        if not isinstance(fmt.get("schema"), dict):
            raise BadRequest("text.format.schema must be an object.", param="text.format.schema")
        schema: Json = {"name": fmt.get("name") or "response", "schema": fmt["schema"]}
        for key in ("strict", "description"):
            if fmt.get(key) is not None:
                schema[key] = fmt[key]
        payload["response_format"] = {"type": "json_schema", "json_schema": schema}
    elif kind == "json_object":
        payload["response_format"] = {"type": "json_object"}
    elif kind != "text":
        raise BadRequest(
            "text.format.type must be text, json_object or json_schema.",
            param="text.format.type",
        )


def _reasoning(reasoning: Any, dropped: list[str]) -> str | None:
    """`reasoning.effort` (the effort control); `summary` is accepted: the
    reasoning is shown as summary text whenever the settings show it."""
    if not isinstance(reasoning, dict):
        return None
    for key in reasoning:
        if key not in ("effort", "summary", "generate_summary"):
            dropped.append(f"reasoning.{key}")
    effort = reasoning.get("effort")
    if effort is not None and not isinstance(effort, str):
        raise BadRequest("reasoning.effort must be a string.", param="reasoning.effort")
    return effort


class _Messages:
    """Builds the chat messages, item by item."""

    def __init__(self, names: ToolNames, open_envelope: Opener, dropped: list[str]) -> None:
        self.names = names
        self.open = open_envelope
        self.dropped = dropped
        self.system: list[str] = []
        self.messages: list[Json] = []
        self.calls: set[str] = set()
        self.group: _Assistant | None = None

    def item(self, item: Any, where: str) -> None:
        if not isinstance(item, dict):
            raise BadRequest(f"{where} must be an object.", param=where)
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"  # the short form: {"role": ..., "content": ...}
        if not isinstance(kind, str):
            raise BadRequest(f"{where}.type must be a string.", param=f"{where}.type")
        if kind == "message":
            self.message(item, where)
        elif kind in ASSISTANT_SIDE:
            group = self.group = self.group or _Assistant()
            if kind == "reasoning":
                group.reasoning(self._opened(item, where))
            else:
                call_id = _string(item, "call_id", where)
                self.calls.add(call_id)
                group.tool_calls.append(self._call(item, kind, call_id, where))
        elif kind in TOOL_OUTPUTS:
            self.flush()
            call_id = _string(item, "call_id", where)
            if call_id not in self.calls:
                raise BadRequest(
                    f"{where}.call_id matches no function call before it.",
                    param=f"{where}.call_id",
                    code="invalid_function_call_output",
                )
            self.messages.append(
                {"role": "tool", "tool_call_id": call_id, "content": self._output(item, where)}
            )
        else:
            self.dropped.append(f"input.{kind}")  # a hosted tool's item, or a newer kind

    def message(self, item: Json, where: str) -> None:
        role = item.get("role")
        if "content" not in item or item["content"] is None:
            raise BadRequest(f"{where}.content is missing.", param=f"{where}.content")
        content = item["content"]
        if role in ("system", "developer"):
            self.flush()
            text = _texts(content, where, self.dropped)
            if text:
                self.system.append(text)
        elif role == "user":
            self.flush()
            user = _user_content(content, where, self)
            if user != "" or isinstance(content, str):
                self.messages.append({"role": "user", "content": user})
            # else every part was dropped (and named): no empty message goes up
        elif role == "assistant":
            group = self.group = self.group or _Assistant()
            group.texts.append(_texts(content, where, self.dropped))
        else:
            raise BadRequest(
                f"{where}.role must be user, assistant, system or developer.",
                param=f"{where}.role",
            )

    def _opened(self, item: Json, where: str) -> tuple[str, Json]:
        """A reasoning item's text and artefacts: the envelope's, when it opens."""
        sealed = self.open(item["encrypted_content"]) if item.get("encrypted_content") else None
        if sealed is not None:
            return sealed.reasoning, sealed.artefacts
        parts: list[str] = []
        for key, kind in (("summary", "summary_text"), ("content", "reasoning_text")):
            value = item.get(key)
            if value is None:
                continue
            if not isinstance(value, list):
                raise BadRequest(f"{where}.{key} must be an array.", param=f"{where}.{key}")
            for n, part in enumerate(value):
                if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                    at = f"{where}.{key}[{n}].text"
                    raise BadRequest(f"{at} must be a string.", param=at)
                if part.get("type", kind) == kind and part["text"]:
                    parts.append(part["text"])
            if parts:
                break  # the summary, else the full text
        return "\n\n".join(parts), {}

    def _call(self, item: Json, kind: str, call_id: str, where: str) -> Json:
        name = _string(item, "name", where)
        arguments: Any
        if kind == "custom_tool_call":
            text = item.get("input")
            if not isinstance(text, str):
                raise BadRequest(f"{where}.input must be a string.", param=f"{where}.input")
            arguments = orjson.dumps({CUSTOM_INPUT: text}).decode()
            chat = self.names.chat_name(name)
        else:
            arguments = item.get("arguments")
            if isinstance(arguments, dict):
                arguments = orjson.dumps(arguments).decode()
            if not isinstance(arguments, str):
                raise BadRequest(f"{where}.arguments must be a string.", param=f"{where}.arguments")
            namespace = item.get("namespace")
            if namespace is not None and not isinstance(namespace, str):
                raise BadRequest(f"{where}.namespace must be a string.", param=f"{where}.namespace")
            chat = self.names.chat_name(name, namespace)
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": chat, "arguments": arguments},
        }

    def _output(self, item: Json, where: str) -> str:
        output = item.get("output")
        if isinstance(output, str):
            return output
        if isinstance(output, list):
            return _texts(output, f"{where}.output", self.dropped, key="output")
        raise BadRequest(f"{where}.output must be a string or an array.", param=f"{where}.output")

    def flush(self) -> None:
        group, self.group = self.group, None
        if group is not None:
            message = group.message()
            if message is not None:
                self.messages.append(message)

    def finish(self) -> list[Json]:
        self.flush()
        if self.system:
            return [{"role": "system", "content": "\n\n".join(self.system)}, *self.messages]
        return self.messages


class _Assistant:
    """One assistant message being gathered from consecutive items."""

    __slots__ = ("artefacts", "texts", "thoughts", "tool_calls")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.tool_calls: list[Json] = []
        self.thoughts: list[str] = []
        self.artefacts: Json = {}

    def reasoning(self, opened: tuple[str, Json]) -> None:
        text, artefacts = opened
        if text:
            self.thoughts.append(text)
        for key, value in artefacts.items():
            if isinstance(value, list):  # reasoning_details: each item's pieces, in order
                self.artefacts.setdefault(key, []).extend(value)
            else:
                self.artefacts.setdefault(key, value)

    def message(self) -> Json | None:
        # each assistant message item's text, a newline between them (as
        # between the parts of one): "Hello." and "World" never run together
        text = "\n".join(t for t in self.texts if t)
        if not text and not self.tool_calls:
            return None  # reasoning alone is no message: the upstream never made one
        message: Json = {"role": "assistant", "content": text or None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        if self.thoughts:
            message["reasoning_content"] = "\n\n".join(self.thoughts)
        for key, value in self.artefacts.items():
            message.setdefault(key, value)
        return message


def _string(item: Json, name: str, where: str) -> str:
    value = item.get(name)
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{where}.{name} must be a non-empty string.", param=f"{where}.{name}")
    return value


# content part types that carry text, and the key holding it
_TEXT_KEYS = {"input_text": "text", "output_text": "text", "text": "text", "refusal": "refusal"}


def _texts(content: Any, where: str, dropped: list[str], key: str = "content") -> str:
    """The text of a message's content (a string, or text parts joined by a
    newline; other parts are dropped and named)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where} must be a string or an array.", param=where)
    texts: list[str] = []
    for n, part in enumerate(content):
        text = _part_text(part, f"{where}[{n}]" if key == "output" else f"{where}.content[{n}]")
        if text is None:
            dropped.append(f"input.{key}.{part['type']}")
        else:
            texts.append(text)
    return "\n".join(texts)


def _part_text(part: Any, where: str) -> str | None:
    if not isinstance(part, dict) or not isinstance(part.get("type"), str):
        raise BadRequest(f"{where}.type must be a string.", param=f"{where}.type")
    text_key = _TEXT_KEYS.get(part["type"])
    if text_key is None:
        return None
    text = part.get(text_key)
    if not isinstance(text, str):
        raise BadRequest(f"{where}.{text_key} must be a string.", param=f"{where}.{text_key}")
    return text


def _user_content(content: Any, where: str, writer: _Messages) -> Any:
    """A user message's content for chat: a string when it is all text, else
    chat's parts (text and image_url)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise BadRequest(f"{where}.content must be a string or an array.", param=f"{where}.content")
    parts: list[Json] = []
    for n, part in enumerate(content):
        at = f"{where}.content[{n}]"
        text = _part_text(part, at)
        if text is not None:
            parts.append({"type": "text", "text": text})
        elif part["type"] == "input_image" and part.get("image_url") is not None:
            if not isinstance(part["image_url"], str):
                raise BadRequest(f"{at}.image_url must be a string.", param=f"{at}.image_url")
            image: Json = {"url": part["image_url"]}
            if isinstance(part.get("detail"), str):
                image["detail"] = part["detail"]
            parts.append({"type": "image_url", "image_url": image})
        else:
            writer.dropped.append(f"input.content.{part['type']}")  # a file, a file_id image
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts
