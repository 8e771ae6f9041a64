"""Which tool call a streamed `tool_calls` piece belongs to (pure).

Chat streams a call in pieces that share an `index`: the first carries the
call's `id` and name, the rest pieces of its arguments. Servers that speak
chat without being OpenAI bend that: Ollama streams every one of several
parallel calls at `index` 0 (each whole, with its own `id`), older Ollama
builds and Gemini's compatible API send no `index` at all. Keyed by `index`
alone, such calls merge into one whose arguments are two JSON objects run
together, and the second call is lost.

`CallSlots.slot(piece, position)` numbers the calls of one choice in the
order they begin (0, 1, ...): a piece whose `index` is new begins a call; a
piece at a known `index` continues its call unless it brings another `id`.
Without an `index`, a piece continues the last call unless it brings an
`id` or a name that call does not have, or it is not the first call of its
chunk (`position`). `wire(slot)` is the `index` the call carries for a
client that reads chat: the upstream's own, except for a call that arrived
at an `index` another call already held (then the next free one).

`arguments_text` reads a call's `arguments` as chat's string of JSON: some
servers (llama.cpp's, in some versions) send the object itself.
`as_chat_call` rewrites a piece for a chat client: its slot's `index`, its
arguments as a string.
"""

from __future__ import annotations

from typing import Any

import orjson

from proxy.reasoning.blocks import Json, index_key


class CallSlots:
    __slots__ = ("_at", "_ids", "_named", "_next", "_wire")

    def __init__(self) -> None:
        self._at: dict[Any, int] = {}  # the upstream's index -> the slot it names now
        self._ids: list[str | None] = []  # slot -> its call's id
        self._named: list[bool] = []  # slot -> its call has a name
        self._wire: list[Any] = []  # slot -> its index for a chat client
        self._next = 0  # the least int index no call has taken

    def slot(self, piece: Json, position: int = 0) -> int:
        """The slot of the call this piece belongs to (a new one if it
        begins a call)."""
        found = piece.get("id")
        call_id = found if type(found) is str and found else None
        function = piece.get("function")
        named = type(function) is dict and bool(function.get("name"))
        index = piece.get("index")
        if index is None:
            last = len(self._ids) - 1
            if (
                last < 0
                or position > 0
                or (call_id is not None and self._ids[last] not in (None, call_id))
                or (named and self._named[last] and call_id != self._ids[last])
            ):
                return self._begin(None, call_id, named)
            return self._continue(last, call_id, named)
        key = index_key(index)
        at = self._at.get(key)
        if at is None:
            return self._begin(key, call_id, named)
        held = self._ids[at]
        if call_id is not None and held is not None and held != call_id:
            return self._begin(key, call_id, named, taken=True)
        return self._continue(at, call_id, named)

    def wire(self, slot: int) -> Any:
        return self._wire[slot]

    def __len__(self) -> int:
        return len(self._ids)

    def _begin(self, key: Any, call_id: str | None, named: bool, taken: bool = False) -> int:
        slot = len(self._ids)
        self._ids.append(call_id)
        self._named.append(named)
        if key is not None:
            self._at[key] = slot
        wire = key if key is not None and not taken and key not in self._wire else self._next
        if type(wire) is int and wire >= self._next:
            self._next = wire + 1
        self._wire.append(wire)
        return slot

    def _continue(self, slot: int, call_id: str | None, named: bool) -> int:
        if self._ids[slot] is None:
            self._ids[slot] = call_id
        if named:
            self._named[slot] = True
        return slot


def as_chat_call(call: Json, index: Any) -> bool:
    """Put a chat tool-call piece in OpenAI's shape, in place: `index` (when
    not None and an int) as its index, an object of arguments as their JSON
    string. True if it changed."""
    changed = False
    if type(index) is int and call.get("index") != index:
        call["index"] = index
        changed = True
    function = call.get("function")
    if type(function) is dict:
        arguments = function.get("arguments")
        if type(arguments) is dict or type(arguments) is list:
            function["arguments"] = arguments_text(arguments)
            changed = True
    return changed


def arguments_text(value: Any) -> str | None:
    """A call's `arguments` as a string of JSON: as it came if a string, an
    object or array written out, else None."""
    if type(value) is str:
        return value
    if type(value) is dict or type(value) is list:
        return orjson.dumps(value).decode()
    return None
