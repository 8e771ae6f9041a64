"""What the proxy did with each assistant message's reasoning on the way up,
and why: the notes the inspector shows per turn (and the explanation of a
provider's 400 about missing reasoning, or of its absence).

In: a request's assistant messages, the reasoning known for each (carried by
the message, or found in the store), what was sent, the settings and the
dialect. Out: plain JSON, stored with the turn the request produced. Pure.
A route of the door's own API (`api: messages`, `api: responses`) sends
the client's request as it came, so its notes (`native_notes`) say what it
did instead: the client's reasoning passed on, reasoning restored from the
store and why, pieces left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from proxy.dialects import Dialect
from proxy.history.egress import AssistantMessage, Reasoning
from proxy.history.keys import content_text

# an input message of a turn, as stored: at most this many characters each
MAX_INPUT_CHARS = 20_000
# a stored turn keeps the notes of its request's latest this many assistant
# messages, and counts the earlier ones by action (`stored_notes`)
MAX_STORED_NOTES = 50


def egress_notes(
    assistants: Sequence[AssistantMessage],
    known: Sequence[Reasoning | None],
    sent: Sequence[Reasoning | None],
    *,
    dialect: Dialect,
    include: Any,
    strip: str,
    compressed: str | None,
    needs: Sequence[bool] | None = None,
) -> dict[str, Any]:
    """One note per assistant message: `action` (reinjected, passed, stripped,
    none), where its reasoning came from, and why. `needs`: per message,
    whether the dialect's needs on tool-call turns apply to it
    (`egress.tool_turns`; by default, whether it calls tools)."""
    policy = compressed or strip
    messages = []
    if needs is None:
        needs = [bool(a.tool_call_ids) for a in assistants]
    for a, reasoning, out, tool_turn in zip(assistants, known, sent, needs, strict=True):
        note: dict[str, Any] = {"index": a.position, "toolCall": bool(a.tool_call_ids)}
        if reasoning is None or reasoning.empty:
            note["action"] = "none"
            note["why"] = (
                "no reasoning known: the message carries none and no stored turn matches it"
            )
        else:
            note["source"] = "store" if reasoning.from_store else "message"
            if out is not None:
                note["action"] = "reinjected" if reasoning.from_store else "passed"
                note["why"] = _why_sent(include, dialect, policy)
            else:
                note["action"] = "stripped"
                note["why"] = _why_not(include, dialect, tool_turn, strip, compressed)
        if tool_turn and dialect.tool_turn_placeholder is not None and out is None:
            note["placeholder"] = True  # the dialect requires the key on tool-call turns
        messages.append(note)
    return {
        "dialect": dialect.name,
        "include": include,
        "strip": strip,
        "compressed": compressed,
        "messages": messages,
    }


@dataclass(slots=True)
class NativeTurn:
    """What a route of the door's own API (`api: messages`, `api: responses`)
    did with one earlier assistant turn's reasoning: the request went as the
    client sent it, but for the pieces counted here. A piece is a thinking
    block (Messages) or a reasoning item (Responses)."""

    position: int  # index in the request's messages (Messages) or input items (Responses)
    tool_call: bool
    passed: int = 0  # pieces sent on as the client sent them
    opened: int = 0  # ...of which this proxy's envelopes, opened to the upstream's own
    left_out: int = 0  # pieces the client sent that did not go (`NATIVE[api]["left_out"]`)
    restored: int = 0  # pieces restored from the stored turn
    stored: bool = False  # a stored turn matched it (looked for only when the turn needs one)


# per API: why restored, why a stored turn gave nothing, why a piece was left
# out, and (Messages) what opening an envelope gave
NATIVE: dict[str, dict[str, str]] = {
    "messages": {
        "restored": (
            "the tool-use turn came without its thinking, which a Messages upstream "
            "needs: restored from the stored turn with the upstream's signature"
        ),
        "unusable": (
            "the stored turn holds no thinking with this upstream's signature (it was "
            "made through a route to another upstream, or came without one: a Messages "
            "upstream takes none without it)"
        ),
        "left_out": (
            "a thinking block whose signature did not open (another tenant's, another "
            "secret's, or altered) was left out"
        ),
        "opened": "its envelope opened to the upstream's own text and signature",
    },
    "responses": {
        "restored": (
            "the function calls came without their reasoning items: the upstream's own "
            "items (with encrypted_content, else by the id the upstream stored them "
            "under) restored from the stored turn before them"
        ),
        "unusable": (
            "the stored turn's reasoning is not this upstream's to read (it was made "
            "through a route to another upstream), or has no encrypted_content to send "
            "back (the request that made it did not ask for include: "
            "reasoning.encrypted_content), nor an id the upstream can read it by (that "
            "request, or this one, had store: false)"
        ),
        "left_out": (
            "a reasoning item of this proxy's own (an answer from a chat route, its "
            "envelope unreadable upstream) was left out"
        ),
    },
}


def native_notes(
    api: str, turns: Sequence[NativeTurn], *, include: Any, strip: str
) -> dict[str, Any]:
    """The notes of a request to an upstream of the door's own API: what went
    as the client sent it, what was restored from the store and why, and
    what was left out (`egress_notes`' shape; `dialect` names the API)."""
    texts = NATIVE[api]
    messages = []
    for t in turns:
        note: dict[str, Any] = {"index": t.position, "toolCall": t.tool_call}
        left = f"; {texts['left_out']}" if t.left_out else ""
        if t.restored:
            note.update(source="store", action="reinjected", why=texts["restored"] + left)
        elif t.passed:
            opened = texts.get("opened") if t.opened else None
            why = f"the client's own: {opened}" if opened else "the client's own, as it came"
            note.update(source="message", action="passed", why=why + left)
        elif t.stored:
            note.update(source="store", action="stripped", why=texts["unusable"] + left)
        elif t.left_out:
            note.update(source="message", action="stripped", why=texts["left_out"])
        else:
            note.update(action="none", why=_why_none(t, include))
        messages.append(note)
    return {
        "dialect": api,
        "api": api,
        "include": include,
        "strip": strip,
        "compressed": None,
        "messages": messages,
    }


def stored_notes(notes: dict[str, Any]) -> dict[str, Any]:
    """The notes as a turn keeps them: the latest MAX_STORED_NOTES messages'
    notes, and the earlier ones' count by action (`earlier`). Turn n of a
    conversation has a note for each of its n earlier assistant messages:
    kept whole, a conversation's notes would grow with the square of its
    length (a 1,000-step agent loop, half a million notes)."""
    messages = notes.get("messages")
    if not isinstance(messages, list) or len(messages) <= MAX_STORED_NOTES:
        return notes
    cut = len(messages) - MAX_STORED_NOTES
    earlier: dict[str, int] = {}
    for note in messages[:cut]:
        action = str(note.get("action"))
        earlier[action] = earlier.get(action, 0) + 1
    return {**notes, "messages": messages[cut:], "earlier": earlier}


def _why_none(t: NativeTurn, include: Any) -> str:
    if not t.tool_call:
        return "the message carries none (the store is asked only for tool-call turns)"
    if include is False:
        return "the message carries none; include_in_context false: nothing is restored"
    return "no reasoning known: the message carries none and no stored turn matches it"


def _why_sent(include: Any, dialect: Dialect, policy: str) -> str:
    if include == "auto":
        return f"include_in_context auto: the {dialect.name} dialect needs it on tool-call turns"
    return f"include_in_context {_word(include)}, strip_from_context {policy} keeps it"


def _why_not(
    include: Any, dialect: Dialect, tool_turn: bool, strip: str, compressed: str | None
) -> str:
    if dialect.never_send:
        return f"the {dialect.name} dialect never takes reasoning back"
    if include is False:
        return "include_in_context false"
    if include == "auto":
        where = "on this tool-call turn" if tool_turn else "on turns without tool calls"
        return f"include_in_context auto: the {dialect.name} dialect takes none back {where}"
    if compressed is not None:
        return (
            f"strip_from_context {compressed}: tightened from {strip} "
            "to fit compression_threshold x context_limit"
        )
    return f"strip_from_context {strip}"


def _word(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def turn_input(messages: Sequence[Any]) -> list[dict[str, Any]]:
    """What a request added after its latest assistant message (the user's
    message, tool results), as role, text and tool-call id."""
    start = 0
    for i, message in enumerate(messages):
        if isinstance(message, dict) and message.get("role") == "assistant":
            start = i + 1
    out = []
    for message in messages[start:]:
        if not isinstance(message, dict) or message.get("role") in ("system", "developer"):
            continue
        text = content_text(message.get("content"))
        item: dict[str, Any] = {"role": str(message.get("role")), "text": text[:MAX_INPUT_CHARS]}
        if len(text) > MAX_INPUT_CHARS:
            item["cut"] = len(text) - MAX_INPUT_CHARS
        if isinstance(message.get("tool_call_id"), str):
            item["toolCallId"] = message["tool_call_id"]
        out.append(item)
    return out
