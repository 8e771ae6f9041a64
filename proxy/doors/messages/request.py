"""A Messages request -> a Chat Completions payload (pure).

What maps is mapped: `system` (a string or text blocks) becomes the system
message; text, image, tool_use and tool_result blocks become chat content
parts, `tool_calls` and `tool` messages (a tool_result's images, which a
tool message cannot hold, go in the user message after it; one with
`is_error` says so first, `Error: ...`, as chat has no such flag); a plain-text
document and a search result (in a message or a tool_result) become text;
custom tools become function tools;
`tool_choice`, `max_tokens`, `stop_sequences`, `temperature`, `top_p`,
`top_k` and `stream` have their chat counterparts; a `system` message
mid-conversation stays a system message where it stands.
`thinking` and `output_config.effort` become the proxy's reasoning settings
(as X-Reasoning-* header pairs the door adds unless the client sent them).

Thinking blocks sent back carry a `signature` that is a sealed envelope
(`proxy.sealing`): opened, its reasoning becomes the assistant message's
`reasoning_content` (the upstream's own `thinking_blocks` items, or its
signature, go back in `thinking_blocks`, its reasoning_details items in
`reasoning_details`), so the egress writes it in the upstream's dialect. A
block this proxy cannot open is left out and counted, never refused.

What a Chat upstream has no use for (`context_management`, `cache_control`,
`metadata`, `service_tier`, unknown fields and block types of newer clients) is dropped
and named in `dropped_fields`; server tools (typed tools without an
`input_schema`: web search, code execution, ...) are left out and named in
`dropped_tools`. Malformed input is a BadRequest naming where it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.doors.messages.blocks import unnumbered
from proxy.errors import BadRequest
from proxy.sealing import Sealed
from proxy.settings import SETTINGS

Json = dict[str, Any]
Opener = Callable[[Any], Sealed | None]

# top-level fields the translation reads; every other one is dropped and named
_READ = frozenset(
    (
        "model",
        "messages",
        "max_tokens",
        "system",
        "tools",
        "tool_choice",
        "stop_sequences",
        "temperature",
        "top_p",
        "top_k",
        "metadata",
        "stream",
        "thinking",
        "output_config",
    )
)
_EFFORTS = ("low", "medium", "high", "xhigh", "max")
# what a tool_result with `is_error` says first, in its tool message
TOOL_ERROR = "Error"


def _effort_choices() -> tuple[str, ...]:
    return next(s.choices for s in SETTINGS if s.field == "effort")


def effort_setting(effort: str) -> str:
    """Anthropic's effort as the proxy's effort setting: `max` is `xhigh`
    (`high` where the settings know no `xhigh`)."""
    if effort in ("max", "xhigh"):
        return "xhigh" if "xhigh" in _effort_choices() else "high"
    return effort


@dataclass(slots=True)
class Translation:
    """A Messages request as the exchange path takes it."""

    payload: Json  # the chat completions body
    settings: list[tuple[str, str]]  # X-Reasoning-* pairs the body asks for
    dropped_fields: list[str] = field(default_factory=list)
    dropped_tools: list[str] = field(default_factory=list)
    unopened: int = 0  # thinking blocks sent back that this proxy could not open
    show_thinking: bool = True  # thinking.display is not "omitted"
    stop_sequences: tuple[str, ...] = ()


def bad(where: str, message: str) -> BadRequest:
    return BadRequest(f"{where}: {message}", param=where, code="invalid_request")


class _Translator:
    def __init__(self, open_signature: Opener) -> None:
        self.open = open_signature
        self.dropped: list[str] = []
        self.dropped_tools: list[str] = []
        self.unopened = 0
        self.tool_ids: set[str] = set()

    def drop(self, name: str) -> None:
        if name not in self.dropped:
            self.dropped.append(name)

    # -- messages --------------------------------------------------------------------

    def messages(self, raw: Any) -> list[Json]:
        if not isinstance(raw, list) or not raw:
            raise bad("messages", "must be a non-empty array")
        out: list[Json] = []
        for n, message in enumerate(raw):
            where = f"messages[{n}]"
            if not isinstance(message, dict):
                raise bad(where, "must be an object")
            role = message.get("role")
            content = message.get("content")
            if role not in ("user", "assistant", "system"):
                raise bad(f"{where}.role", "must be 'user', 'assistant' or 'system'")
            if not isinstance(content, str | list):
                raise bad(f"{where}.content", "must be a string or an array of blocks")
            for key in message:
                if key not in ("role", "content"):
                    self.drop(f"messages[].{key}")
            if role == "system":  # a system message mid-conversation (newer clients)
                out.append(
                    {"role": "system", "content": _system(content, self, f"{where}.content")}
                )
            elif isinstance(content, str):
                out.append({"role": role, "content": content})
            elif role == "user":
                out += self.user(content, where)
            else:
                out.append(self.assistant(content, where))
        return out

    def _blocks(self, content: list[Any], path: str) -> list[tuple[str, str, Json]]:
        """(where, type, block) of each block of the list at `path` (a
        message's `content`, or the top-level `system`), checked to be a typed
        object."""
        out = []
        for n, block in enumerate(content):
            at = f"{path}[{n}]"
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise bad(at, "must be an object with a string 'type'")
            if "cache_control" in block:
                self.drop("cache_control")
            out.append((at, block["type"], block))
        return out

    def user(self, content: list[Any], where: str) -> list[Json]:
        tools: list[Json] = []
        parts: list[Json] = []
        for at, kind, block in self._blocks(content, f"{where}.content"):
            if kind == "text":
                parts.append({"type": "text", "text": _text(block, at)})
            elif kind == "image":
                image = self.image(block, at)
                if image is not None:
                    parts.append(image)
            elif kind == "document":
                text = self.document(block, at)
                if text is not None:
                    parts.append({"type": "text", "text": text})
            elif kind == "search_result":
                parts.append({"type": "text", "text": self.search_result(block, at)})
            elif kind == "tool_result":
                tools.append(self.tool_result(block, at, parts))
            elif kind == "tool_use":
                raise bad(at, "tool_use blocks belong in assistant messages")
            else:
                self.drop(f"content.{kind}")
        out = list(tools)
        if parts:
            if all(p["type"] == "text" for p in parts):
                out.append({"role": "user", "content": "\n\n".join(p["text"] for p in parts)})
            else:
                out.append({"role": "user", "content": parts})
        elif not tools:
            out.append({"role": "user", "content": ""})
        return out

    def image(self, block: Json, at: str) -> Json | None:
        source = block.get("source")
        if not isinstance(source, dict):
            raise bad(f"{at}.source", "must be an object")
        kind = source.get("type")
        if kind == "base64":
            media, data = source.get("media_type"), source.get("data")
            if not isinstance(media, str) or not isinstance(data, str):
                raise bad(f"{at}.source", "base64 images need string media_type and data")
            url = f"data:{media};base64,{data}"
        elif kind == "url":
            if not isinstance(source.get("url"), str):
                raise bad(f"{at}.source.url", "must be a string")
            url = source["url"]
        else:
            self.drop(f"content.image.{kind}")
            return None
        return {"type": "image_url", "image_url": {"url": url}}

    def document(self, block: Json, at: str) -> str | None:
        """A document a Chat upstream can read: its text (a plain-text
        source, or text blocks), after its title. A PDF or a URL has no chat
        counterpart: dropped and named by its source type."""
        source = block.get("source")
        if not isinstance(source, dict):
            raise bad(f"{at}.source", "must be an object")
        kind = source.get("type")
        if kind == "text":
            if not isinstance(source.get("data"), str):
                raise bad(f"{at}.source.data", "must be a string")
            text: str = source["data"]
        elif kind == "content" and isinstance(source.get("content"), str):
            text = source["content"]
        elif kind == "content" and isinstance(source.get("content"), list):
            pieces = []
            for inner_at, inner_kind, inner in self._blocks(
                source["content"], f"{at}.source.content"
            ):
                if inner_kind == "text":
                    pieces.append(_text(inner, inner_at))
                else:
                    self.drop(f"content.document.content.{inner_kind}")
            text = "\n\n".join(pieces)
        else:
            self.drop(f"content.document.{kind}")
            return None
        self.citations(block, "document")
        heads = [block.get(key) for key in ("title", "context")]
        return "\n\n".join([*(h for h in heads if isinstance(h, str) and h), text])

    def citations(self, block: Json, kind: str) -> None:
        """A document or search result that asks for citations: a Chat
        upstream cites nothing, so the answer will have none (named)."""
        wanted = block.get("citations")
        if isinstance(wanted, dict) and wanted.get("enabled") is True:
            self.drop(f"content.{kind}.citations")

    def search_result(self, block: Json, at: str) -> str:
        """A search result (a RAG tool's answer, or the user's) as the text a
        Chat model reads: its title, its source, then its text blocks."""
        self.citations(block, "search_result")
        pieces = []
        for key in ("title", "source"):
            value = block.get(key)
            if not isinstance(value, str):
                raise bad(f"{at}.{key}", "must be a string")
            if value:
                pieces.append(value)
        content = block.get("content")
        if not isinstance(content, list):
            raise bad(f"{at}.content", "must be an array of text blocks")
        for inner_at, kind, inner in self._blocks(content, f"{at}.content"):
            if kind == "text":
                pieces.append(_text(inner, inner_at))
            else:
                self.drop(f"content.search_result.content.{kind}")
        return "\n\n".join(pieces)

    def tool_result(self, block: Json, at: str, images: list[Json]) -> Json:
        """The tool message of a tool_result. Its images cannot go in a tool
        message: they join `images`, the parts of the user message that
        follows the tool messages."""
        call_id = block.get("tool_use_id")
        if not isinstance(call_id, str) or not call_id:
            raise bad(f"{at}.tool_use_id", "must be a non-empty string")
        if call_id not in self.tool_ids:
            raise bad(
                f"{at}.tool_use_id",
                "a tool_result must answer a tool_use block of an earlier assistant message",
            )
        content = block.get("content", "")
        moved = len(images)
        if isinstance(content, str):
            text = content
        elif isinstance(content, list):
            pieces = []
            for inner_at, kind, inner in self._blocks(content, f"{at}.content"):
                if kind == "text":
                    pieces.append(_text(inner, inner_at))
                elif kind == "image":
                    image = self.image(inner, inner_at)
                    if image is not None:
                        images.append(image)
                elif kind == "document":
                    document = self.document(inner, inner_at)
                    if document is not None:
                        pieces.append(document)
                elif kind == "search_result":
                    pieces.append(self.search_result(inner, inner_at))
                else:
                    self.drop(f"tool_result.content.{kind}")
            text = "\n\n".join(pieces)
        else:
            raise bad(f"{at}.content", "must be a string or an array of blocks")
        if not text and len(images) > moved:
            text = "[image]"  # what the tool answered follows, in the user message
        is_error = block.get("is_error")
        if is_error is not None and not isinstance(is_error, bool):
            raise bad(f"{at}.is_error", "must be a boolean")
        if is_error:
            # chat's tool message has no such flag: the model reads it in the text
            text = f"{TOOL_ERROR}: {text}" if text else TOOL_ERROR
        return {"role": "tool", "tool_call_id": call_id, "content": text}

    def assistant(self, content: list[Any], where: str) -> Json:
        texts: list[str] = []
        calls: list[Json] = []
        reasoning: list[str] = []
        signatures: list[Json] = []
        details: list[Json] = []
        for at, kind, block in self._blocks(content, f"{where}.content"):
            if kind == "text":
                texts.append(_text(block, at))
            elif kind == "tool_use":
                calls.append(self.tool_use(block, at))
            elif kind == "thinking":
                if not isinstance(block.get("thinking"), str):
                    raise bad(f"{at}.thinking", "must be a string")
                sealed = self.open(block.get("signature"))
                if sealed is None:
                    self.unopened += 1
                    continue
                if sealed.reasoning:
                    reasoning.append(sealed.reasoning)
                blocks = sealed.artefacts.get("thinking_blocks")
                signature = sealed.artefacts.get("signature")
                if isinstance(blocks, list):  # (envelopes sealed with an `index` exist)
                    signatures += [unnumbered(b) for b in blocks if isinstance(b, dict)]
                elif isinstance(signature, str) and signature:
                    signatures.append(
                        {"type": "thinking", "thinking": sealed.reasoning, "signature": signature}
                    )
                items = sealed.artefacts.get("reasoning_details")
                if isinstance(items, list):
                    details += [i for i in items if isinstance(i, dict)]
            else:
                self.drop(f"content.{kind}")
        message: Json = {"role": "assistant", "content": "".join(texts) if texts else None}
        if not calls and message["content"] is None:
            message["content"] = ""
        if calls:
            message["tool_calls"] = calls
        if reasoning:
            message["reasoning_content"] = "\n\n".join(reasoning)
        if signatures:
            message["thinking_blocks"] = signatures
        if details:
            message["reasoning_details"] = details
        return message

    def tool_use(self, block: Json, at: str) -> Json:
        call_id, name, arguments = block.get("id"), block.get("name"), block.get("input", {})
        if not isinstance(call_id, str) or not call_id:
            raise bad(f"{at}.id", "must be a non-empty string")
        if not isinstance(name, str) or not name:
            raise bad(f"{at}.name", "must be a non-empty string")
        if not isinstance(arguments, dict):
            raise bad(f"{at}.input", "must be an object")
        self.tool_ids.add(call_id)
        return {
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": orjson.dumps(arguments).decode()},
        }

    # -- tools -----------------------------------------------------------------------

    def tools(self, raw: Any) -> list[Json]:
        if not isinstance(raw, list):
            raise bad("tools", "must be an array")
        out: list[Json] = []
        for n, tool in enumerate(raw):
            at = f"tools[{n}]"
            if not isinstance(tool, dict):
                raise bad(at, "must be an object")
            kind = tool.get("type")
            if kind not in (None, "custom"):
                # a server tool (web search, code execution, a typed client tool):
                # a Chat upstream can neither run it nor knows its schema
                label = tool.get("name") if isinstance(tool.get("name"), str) else kind
                shown = str(label) if label is not None else at
                if shown not in self.dropped_tools:
                    self.dropped_tools.append(shown)
                continue
            name, schema = tool.get("name"), tool.get("input_schema")
            if not isinstance(name, str) or not name:
                raise bad(f"{at}.name", "must be a non-empty string")
            if not isinstance(schema, dict):
                raise bad(f"{at}.input_schema", "must be an object")
            function: Json = {"name": name, "parameters": schema}
            description = tool.get("description")
            if description is not None:
                if not isinstance(description, str):
                    raise bad(f"{at}.description", "must be a string")
                function["description"] = description
            if isinstance(tool.get("strict"), bool):
                function["strict"] = tool["strict"]
            for key in tool:
                if key not in ("type", "name", "input_schema", "description", "strict"):
                    self.drop("cache_control" if key == "cache_control" else f"tools[].{key}")
            out.append({"type": "function", "function": function})
        return out

    def tool_choice(self, raw: Any, tools: list[Json], payload: Json) -> None:
        if not isinstance(raw, dict) or not isinstance(raw.get("type"), str):
            raise bad("tool_choice", "must be an object with a string 'type'")
        kind = raw["type"]
        names = {t["function"]["name"] for t in tools}
        if kind == "none":
            if tools:  # without tools nothing can be called; OpenAI refuses the pair
                payload["tool_choice"] = "none"
            return
        if kind not in ("auto", "any", "tool"):
            raise bad("tool_choice.type", "must be one of: auto, any, tool, none")
        if kind == "tool" and not isinstance(raw.get("name"), str):
            raise bad("tool_choice.name", "must be a string")
        if kind == "tool" and raw["name"] not in names and raw["name"] not in self.dropped_tools:
            raise bad("tool_choice.name", "names no tool of the request")
        if not tools or (kind == "tool" and raw["name"] not in names):
            self.drop("tool_choice")  # it names (or needs) tools that were dropped
            return
        if kind == "auto":
            payload["tool_choice"] = "auto"
        elif kind == "any":
            payload["tool_choice"] = "required"
        else:
            payload["tool_choice"] = {"type": "function", "function": {"name": raw["name"]}}
        parallel = raw.get("disable_parallel_tool_use")
        if parallel is not None and not isinstance(parallel, bool):
            raise bad("tool_choice.disable_parallel_tool_use", "must be a boolean")
        if parallel:
            payload["parallel_tool_calls"] = False


def _text(block: Json, at: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise bad(f"{at}.text", "must be a string")
    return text


def _system(raw: Any, t: _Translator, where: str = "system") -> str:
    """`system` (a string or a list of text blocks), or the content of a
    system message (`where` names it)."""
    if isinstance(raw, str):
        return raw
    if not isinstance(raw, list):
        raise bad(where, "must be a string or an array of text blocks")
    pieces = []
    for at, kind, block in t._blocks(raw, where):
        if kind != "text":
            raise bad(at, "system blocks must be text blocks")
        pieces.append(_text(block, at))
    return "\n\n".join(pieces)


def _number(body: Json, key: str, payload: Json, *, integer: bool = False) -> None:
    value = body.get(key)
    if value is None:
        return
    kinds: tuple[type, ...] = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds):
        raise bad(key, "must be an integer" if integer else "must be a number")
    payload[key] = value


def _settings(body: Json, t: _Translator, translation: Translation) -> list[tuple[str, str]]:
    """X-Reasoning-* pairs for `thinking` and `output_config.effort`."""
    pairs: list[tuple[str, str]] = []
    thinking = body.get("thinking")
    if thinking is not None:
        if not isinstance(thinking, dict) or not isinstance(thinking.get("type"), str):
            raise bad("thinking", "must be an object with a string 'type'")
        kind = thinking["type"]
        if kind == "enabled":
            budget = thinking.get("budget_tokens")
            if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
                raise bad("thinking.budget_tokens", "must be a positive integer")
            pairs += [("x-reasoning-enabled", "true"), ("x-reasoning-max-tokens", str(budget))]
        elif kind in ("adaptive", "between_tools"):
            pairs.append(("x-reasoning-enabled", "true"))
        elif kind == "disabled":
            pairs.append(("x-reasoning-enabled", "false"))
        else:
            # a type this proxy does not know (a newer API's) is dropped and
            # named, not refused: the client's next request must not break
            t.drop("thinking")
        display = thinking.get("display")
        if display is not None and display not in ("summarized", "omitted"):
            raise bad("thinking.display", "must be 'summarized' or 'omitted'")
        translation.show_thinking = display != "omitted"
    config = body.get("output_config")
    if config is not None:
        if not isinstance(config, dict):
            raise bad("output_config", "must be an object")
        effort = config.get("effort")
        if effort is not None:
            if effort not in _EFFORTS:
                raise bad("output_config.effort", "must be one of: " + ", ".join(_EFFORTS))
            pairs.append(("x-reasoning-effort", effort_setting(effort)))
        fmt = config.get("format")
        if fmt is not None:
            translation.payload["response_format"] = response_format(fmt)
        for key in config:
            if key not in ("effort", "format"):
                t.drop(f"output_config.{key}")
    return pairs


def response_format(fmt: Any) -> Json:
    """`output_config.format` (structured outputs: `{"type": "json_schema",
    "schema": {...}}`) as chat's `response_format`. Anthropic constrains the
    answer to the schema; chat's `strict` is left to the upstream's default,
    as not every schema Anthropic takes is one OpenAI's strict mode takes."""
    if not isinstance(fmt, dict):
        raise bad("output_config.format", "must be an object")
    if fmt.get("type") != "json_schema":
        raise bad("output_config.format.type", "must be 'json_schema'")
    schema = fmt.get("schema")
    if not isinstance(schema, dict):
        raise bad("output_config.format.schema", "must be an object")
    return {"type": "json_schema", "json_schema": {"name": "response", "schema": schema}}


def translate(body: Json, open_signature: Opener, *, counting: bool = False) -> Translation:
    """The chat payload for a Messages request (`counting`: a count_tokens
    request, which has no max_tokens)."""
    t = _Translator(open_signature)
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad("model", "must be a non-empty string")
    payload: Json = {"model": model}
    translation = Translation(payload, [])
    messages: list[Json] = []
    if "system" in body and body["system"] is not None:
        system = _system(body["system"], t)
        if system:
            messages.append({"role": "system", "content": system})
    messages += t.messages(body.get("messages"))
    payload["messages"] = messages
    max_tokens = body.get("max_tokens")
    if not counting or max_tokens is not None:
        # 0 is Anthropic's prompt-cache warm-up (no answer): it goes as it is,
        # for the upstream to take (a Messages one) or refuse
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 0:
            raise bad("max_tokens", "must be a non-negative integer")
        payload["max_tokens"] = max_tokens
    tools: list[Json] = []
    if body.get("tools") is not None:
        tools = t.tools(body["tools"])
        if tools:
            payload["tools"] = tools
    if body.get("tool_choice") is not None:
        t.tool_choice(body["tool_choice"], tools, payload)
    stops = body.get("stop_sequences")
    if stops is not None:
        if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
            raise bad("stop_sequences", "must be an array of strings")
        if stops:
            payload["stop"] = stops
            translation.stop_sequences = tuple(stops)
    _number(body, "temperature", payload)
    _number(body, "top_p", payload)
    _number(body, "top_k", payload, integer=True)
    metadata = body.get("metadata")
    if metadata is not None:
        if not isinstance(metadata, dict):
            raise bad("metadata", "must be an object")
        if metadata:
            # user_id is the client's own identifier (Claude Code: a device and
            # session id); it is not sent to another provider
            t.drop("metadata")
    stream = body.get("stream")
    if stream is not None and not isinstance(stream, bool):
        raise bad("stream", "must be a boolean")
    if stream and not counting:
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
    translation.settings = _settings(body, t, translation)
    for key, value in body.items():
        if key not in _READ and value is not None:  # a null drops nothing
            t.drop(key)
    translation.dropped_fields = t.dropped
    translation.dropped_tools = t.dropped_tools
    translation.unopened = t.unopened
    return translation
