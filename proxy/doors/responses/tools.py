"""Responses tools -> chat functions, and chat tool calls -> the client's names (pure).

A Responses request offers `function` tools (chat has them too), `custom`
tools (freeform text input: a chat function with one string parameter,
`input`), `namespace` tools (a named group of function and custom tools,
flattened to chat functions named `<namespace>__<name>`), and hosted tools
that only the provider runs (web_search, file_search, code_interpreter,
...), which a chat upstream cannot: those are left out and named, never
refused, since real clients send them on every request. `ToolNames` maps
each chat function name back to what the client offered, so a call comes
back as a `function_call` with its namespace, or a `custom_tool_call`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from typing import Any

import orjson

from proxy.errors import BadRequest

Json = dict[str, Any]

CUSTOM_INPUT = "input"  # the one parameter of a custom tool's chat function
NAMESPACE_SEPARATOR = "__"
_CHAT_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True, slots=True)
class ClientTool:
    """A tool as the client named it."""

    name: str
    namespace: str | None = None
    custom: bool = False


def flat_name(namespace: str | None, name: str) -> str:
    """The chat function name of a (namespaced) tool: `<namespace>__<name>`,
    kept to chat's 64 characters of [A-Za-z0-9_-] (a longer or stranger name
    is shortened with a hash, so it stays unique)."""
    if namespace is None:
        return name
    joined = namespace + NAMESPACE_SEPARATOR + name
    if _CHAT_NAME.fullmatch(joined):
        return joined
    digest = hashlib.sha256(joined.encode()).hexdigest()[:8]
    return _UNSAFE.sub("_", joined)[:55] + "_" + digest


@dataclass(slots=True)
class ToolNames:
    """Chat function name <-> the client's tool, for one request."""

    _client: dict[str, ClientTool] = field(default_factory=dict)
    _chat: dict[tuple[str | None, str], str] = field(default_factory=dict)

    def add(self, tool: ClientTool) -> str:
        chat = flat_name(tool.namespace, tool.name)
        if chat in self._client and self._client[chat] != tool:
            n = 2
            while f"{chat}_{n}" in self._client:
                n += 1
            chat = f"{chat}_{n}"
        self._client[chat] = tool
        self._chat[(tool.namespace, tool.name)] = chat
        return chat

    def chat_name(self, name: str, namespace: str | None = None) -> str:
        """The chat name of a call in the history (its tool may no longer be offered)."""
        return self._chat.get((namespace, name)) or flat_name(namespace, name)

    def client(self, chat_name: str) -> ClientTool:
        """What the client calls the chat function `chat_name` (a name the
        client never offered comes back as it is)."""
        return self._client.get(chat_name) or ClientTool(chat_name)

    def chosen(self, name: str) -> str:
        """The chat name of the tool a `tool_choice` names (it has no
        namespace): the one outside a namespace, else the first of that name
        in one (the choice is checked against `offers` first)."""
        found = self._chat.get((None, name))
        if found is not None:
            return found
        for chat, tool in self._client.items():
            if tool.name == name:
                return chat
        return name

    def offers(self, name: str) -> bool:
        """True when a function or custom tool of the request (in any
        namespace) is called `name`."""
        return any(tool.name == name for tool in self._client.values())

    def custom_input(self, arguments: str) -> str:
        """A custom tool's freeform input, from its chat function's arguments."""
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments
        if isinstance(parsed, dict) and isinstance(parsed.get(CUSTOM_INPUT), str):
            return str(parsed[CUSTOM_INPUT])
        return arguments


@dataclass(slots=True)
class ChatTools:
    tools: list[Json]
    names: ToolNames
    dropped: list[str]  # tools left out, by type (a hosted tool) or name


def translate_tools(tools: Any) -> ChatTools:
    """The request's `tools` as chat functions (BadRequest names a malformed one)."""
    out = ChatTools([], ToolNames(), [])
    if tools is None:
        return out
    if not isinstance(tools, list):
        raise BadRequest("tools must be an array.", param="tools")
    for i, tool in enumerate(tools):
        where = f"tools[{i}]"
        if not isinstance(tool, dict):
            raise BadRequest(f"{where} must be an object.", param=where)
        kind = tool.get("type")
        if kind == "function" or kind == "custom":
            out.tools.append(_function(tool, where, out.names, None))
        elif kind == "namespace":
            namespace = _name(tool, where)
            inner = tool.get("tools")
            if not isinstance(inner, list):
                raise BadRequest(f"{where}.tools must be an array.", param=f"{where}.tools")
            for j, member in enumerate(inner):
                at = f"{where}.tools[{j}]"
                if not isinstance(member, dict) or member.get("type") not in ("function", "custom"):
                    raise BadRequest(f"{at} must be a function or custom tool.", param=f"{at}.type")
                out.tools.append(_function(member, at, out.names, namespace, tool))
        elif isinstance(kind, str):
            out.dropped.append(kind)  # hosted (web_search, mcp, ...) or unknown
        else:
            raise BadRequest(f"{where}.type must be a string.", param=f"{where}.type")
    return out


def _name(tool: Json, where: str) -> str:
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}.name must be a non-empty string.", param=f"{where}.name")
    return name


def _function(
    tool: Json, where: str, names: ToolNames, namespace: str | None, group: Json | None = None
) -> Json:
    name = _name(tool, where)
    custom = tool.get("type") == "custom"
    chat = names.add(ClientTool(name, namespace, custom))
    description = tool.get("description")
    if description is not None and not isinstance(description, str):
        raise BadRequest(f"{where}.description must be a string.", param=f"{where}.description")
    prefix = group.get("description") if group is not None else None
    if isinstance(prefix, str) and prefix:  # the namespace's description, for its members
        description = f"{prefix}\n\n{description}" if description else prefix
    function: Json = {"name": chat}
    if custom:
        description = _with_format(description, tool.get("format"))
        function["parameters"] = {
            "type": "object",
            "properties": {
                CUSTOM_INPUT: {"type": "string", "description": "The tool's freeform input."}
            },
            "required": [CUSTOM_INPUT],
            "additionalProperties": False,
        }
    else:
        parameters = tool.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise BadRequest(f"{where}.parameters must be an object.", param=f"{where}.parameters")
        function["parameters"] = parameters or {"type": "object", "properties": {}}
        if isinstance(tool.get("strict"), bool):
            function["strict"] = tool["strict"]
    if description:
        function["description"] = description
    return {"type": "function", "function": function}


def _with_format(description: str | None, fmt: Any) -> str | None:
    """A custom tool's grammar goes into its description: the chat function
    cannot enforce it, but the model can follow it."""
    if not isinstance(fmt, dict) or fmt.get("type") != "grammar":
        return description
    definition = fmt.get("definition")
    if not isinstance(definition, str) or not definition:
        return description
    syntax = fmt.get("syntax") if isinstance(fmt.get("syntax"), str) else "grammar"
    rule = f"The input must follow this {syntax} grammar:\n{definition}"
    return f"{description}\n\n{rule}" if description else rule


_CHOICE_MODES = ("auto", "none", "required")
_ALLOWED_MODES = ("auto", "required")


def check_tool_choice(choice: Any, names: ToolNames) -> None:
    """BadRequest for a `tool_choice` that is malformed: not a mode nor an
    object, a function or custom choice naming no tool of the request, or an
    `allowed_tools` choice with another mode, no list of tools, or a function
    or custom entry naming no tool of the request (a hosted tool's choice or
    entry, or one of a type this door does not know, is dropped by
    `chat_tool_choice`, never refused)."""
    if choice is None or choice in _CHOICE_MODES:
        return
    if not isinstance(choice, dict):
        raise BadRequest(
            "tool_choice must be one of: " + ", ".join(_CHOICE_MODES) + "; or an object.",
            param="tool_choice",
        )
    if choice.get("type") in ("function", "custom"):
        _check_named(choice, names, "tool_choice")
    elif choice.get("type") == "allowed_tools":
        if choice.get("mode") not in _ALLOWED_MODES:
            raise BadRequest(
                "tool_choice.mode must be one of: " + ", ".join(_ALLOWED_MODES) + ".",
                param="tool_choice.mode",
            )
        allowed = choice.get("tools")
        if not isinstance(allowed, list):
            raise BadRequest("tool_choice.tools must be an array.", param="tool_choice.tools")
        for i, entry in enumerate(allowed):
            where = f"tool_choice.tools[{i}]"
            if not isinstance(entry, dict) or not isinstance(entry.get("type"), str):
                raise BadRequest(f"{where}.type must be a string.", param=f"{where}.type")
            if entry["type"] in ("function", "custom"):
                _check_named(entry, names, where)


def _check_named(choice: Json, names: ToolNames, where: str) -> None:
    name = choice.get("name")
    if not isinstance(name, str) or not name:
        raise BadRequest(f"{where}.name must be a non-empty string.", param=f"{where}.name")
    if not names.offers(name):
        raise BadRequest(
            f"{where}.name names no function or custom tool in tools.", param=f"{where}.name"
        )


def chat_tool_choice(
    choice: Any, tools: list[Json], names: ToolNames, dropped: list[str]
) -> tuple[list[Json], Any]:
    """The chat tools and `tool_choice` for the request's `tools` (as chat
    functions) and `tool_choice` (None: leave it out). An `allowed_tools`
    choice keeps the tools it names (a `namespace` entry: its members) and
    its mode: chat has no list of allowed tools, so the others are not sent
    (with none left, no tools go, and a `required` mode is named dropped).
    With no tool to offer at all (hosted ones only), a choice that forces
    one (`required`, a hosted tool's) is named dropped too."""
    if choice is None:
        return tools, None
    if not tools:
        if choice == "required" or (isinstance(choice, dict) and choice.get("mode") != "auto"):
            dropped.append("tool_choice")
        return [], None
    if choice in _CHOICE_MODES:
        return tools, choice
    if isinstance(choice, dict):
        kind = choice.get("type")
        if kind in ("function", "custom") and isinstance(choice.get("name"), str):
            named = {"type": "function", "function": {"name": names.chosen(choice["name"])}}
            return tools, named
        if kind == "allowed_tools" and choice.get("mode") in _ALLOWED_MODES:
            kept = [t for t in tools if _allows(choice["tools"], names.client(_chat_name(t)))]
            if kept:
                return kept, choice["mode"]
            if choice["mode"] == "required":
                dropped.append("tool_choice")
            return [], None
    dropped.append("tool_choice")  # a hosted tool's, or a shape chat has no use for
    return tools, None


def _chat_name(tool: Json) -> str:
    return str(tool["function"]["name"])


def _allows(allowed: list[Json], tool: ClientTool) -> bool:
    """Whether an entry of an `allowed_tools` list names `tool`: a function
    or custom entry by name (and namespace, when it gives one), a namespace
    entry every tool in it."""
    for entry in allowed:
        kind = entry.get("type")
        if kind == "namespace":
            if tool.namespace is not None and entry.get("name") == tool.namespace:
                return True
        elif kind in ("function", "custom") and entry.get("name") == tool.name:
            namespace = entry.get("namespace")
            if namespace is None or namespace == tool.namespace:
                return True
    return False
