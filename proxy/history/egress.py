"""Egress: the client's messages -> the messages sent upstream.

For each assistant message, its reasoning is what the message itself carries
(`reasoning_content`, `reasoning`, `thinking`, `reasoning_details`,
`thinking_blocks`, or inline tags in `content`, which are always removed
from `content`; the proxy's own `<think>` output is recognized on every
route), else the stored turn it matches (by tool-call id, then by content
fingerprint). Reasoning a client carried back as text alone (a shape that
loses signatures and details) keeps the stored turn's artefacts when the
turn matches it and says the same. Then, read
fresh for this request: the strip policy picks which messages keep it,
include-in-context decides whether any is sent (`auto`: on tool-call turns,
where the dialect wants it there, in the dialect's own form), and the
dialect decides how. The client's message objects and the stored turns are
never modified: changed messages are copies.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from proxy.dialects import Dialect
from proxy.history.keys import ConversationKey, fingerprint, without_whitespace
from proxy.reasoning.blocks import (
    Json,
    StripPolicy,
    Turn,
    blocks_for_context,
    filter_for_context,
    join_reasoning,
)
from proxy.reasoning.native import REASONING_FIELDS, native_text
from proxy.reasoning.output import unescape_inner_close
from proxy.reasoning.tags import Reasoning as TagReasoning
from proxy.reasoning.tags import TagSet, TagSplitter, Visible
from proxy.settings import IncludeInContext


@dataclass(frozen=True, slots=True, init=False)
class Reasoning:
    """The reasoning of one assistant message, as it could be sent back."""

    text: str
    details: tuple[Json, ...] | None = None
    from_store: bool = False
    blocks: tuple[Json, ...] | None = None  # thinking_blocks, as the upstream sent them

    # written out, as proxy/reasoning/blocks.py says why (one per assistant
    # message of every request)
    def __init__(
        self,
        text: str,
        details: tuple[Json, ...] | None = None,
        from_store: bool = False,
        blocks: tuple[Json, ...] | None = None,
    ) -> None:
        object.__setattr__(self, "text", text)
        object.__setattr__(self, "details", details)
        object.__setattr__(self, "from_store", from_store)
        object.__setattr__(self, "blocks", blocks)

    @property
    def empty(self) -> bool:
        return not self.text and not self.details and not self.blocks

    @property
    def whole(self) -> bool:
        """It has every artefact a round trip may need (details and blocks)."""
        return bool(self.details and self.blocks)


@dataclass(frozen=True, slots=True, init=False)
class AssistantMessage:
    """An assistant message of the request, its content cleaned of tags."""

    position: int  # index in the request's messages
    content: Any  # the content with inline reasoning tags removed
    tool_call_ids: tuple[str, ...]
    tool_calls: tuple[tuple[str, str], ...]  # (name, arguments)
    own: Reasoning | None  # what the message itself carries
    # chat's `refusal`: a refused turn's text, stored as its content
    refusal: str = ""
    # where it sits: the digest of the history before it (`place_of`)
    place: str | None = None

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(
        self,
        position: int,
        content: Any,
        tool_call_ids: tuple[str, ...],
        tool_calls: tuple[tuple[str, str], ...],
        own: Reasoning | None,
        refusal: str = "",
        place: str | None = None,
    ) -> None:
        object.__setattr__(self, "position", position)
        object.__setattr__(self, "content", content)
        object.__setattr__(self, "tool_call_ids", tool_call_ids)
        object.__setattr__(self, "tool_calls", tool_calls)
        object.__setattr__(self, "own", own)
        object.__setattr__(self, "refusal", refusal)
        object.__setattr__(self, "place", place)

    @property
    def fingerprint(self) -> str | None:
        return fingerprint(content_text(self.content) + self.refusal, self.tool_calls)

    @property
    def fingerprints(self) -> tuple[str, ...]:
        """The fingerprint, then those of the same message with its tool
        calls' JSON arguments written with and without `\\u` escapes (a
        client that parses the arguments and writes them again, as
        LangChain does, escapes what the model wrote as is)."""
        text = content_text(self.content) + self.refusal
        out: list[str] = []
        for calls in (self.tool_calls, *_rewritten(self.tool_calls)):
            fp = fingerprint(text, calls)
            if fp is not None and fp not in out:
                out.append(fp)
        return tuple(out)


@dataclass(frozen=True, slots=True, init=False)
class EgressResult:
    messages: list[Json]
    reinjected: int = 0  # assistant messages sent with reasoning from the store
    stripped: int = 0  # assistant messages whose known reasoning was not sent
    sent: list[Reasoning | None] = field(default_factory=list)
    place: str | None = None  # where the answer to these messages sits (`place_of`)

    # written out, as proxy/reasoning/blocks.py says why
    def __init__(
        self,
        messages: list[Json],
        reinjected: int = 0,
        stripped: int = 0,
        sent: list[Reasoning | None] | None = None,
        place: str | None = None,
    ) -> None:
        object.__setattr__(self, "messages", messages)
        object.__setattr__(self, "reinjected", reinjected)
        object.__setattr__(self, "stripped", stripped)
        object.__setattr__(self, "sent", [] if sent is None else sent)
        object.__setattr__(self, "place", place)


def split_tags(text: str, tags: TagSet) -> tuple[str, str]:
    """(visible, reasoning) of a history message's content with inline tags;
    several blocks are joined with a blank line."""
    splitter = TagSplitter(tags)
    visible: list[str] = []
    blocks: list[str] = []
    current: list[str] = []
    for event in splitter.feed(text) + splitter.flush():
        if isinstance(event, Visible):
            visible.append(event.text)
        elif isinstance(event, TagReasoning):
            current.append(event.text)
        else:
            blocks.append("".join(current))
            current = []
    return "".join(visible), "\n\n".join(b for b in blocks if b)


def read_assistant(
    position: int, message: Json, tags: TagSet, place: str | None = None
) -> AssistantMessage:
    content = message.get("content")
    tagged = ""
    if isinstance(content, str):
        if tags.starts.search(content):
            content, tagged = split_tags(content, tags)
    elif isinstance(content, list):
        content, tagged = _split_parts(content, tags)
    own: Reasoning | None = None
    found = native_text(message)
    items = _objects(message.get("reasoning_details"))
    blocks = _objects(message.get("thinking_blocks"))
    if found is not None or items or blocks:
        own = Reasoning(found[0] if found else "", items or None, blocks=blocks or None)
    elif tagged:
        own = Reasoning(unescape_inner_close(tagged))
    calls = message.get("tool_calls")
    ids: list[str] = []
    named: list[tuple[str, str]] = []
    if isinstance(calls, list):
        for call in calls:
            if not isinstance(call, dict):
                continue
            if isinstance(call.get("id"), str):
                ids.append(call["id"])
            function = call.get("function")
            if not isinstance(function, dict):
                function = {}
            named.append((str(function.get("name", "")), str(function.get("arguments", ""))))
    legacy = message.get("function_call")  # chat's older form of one call (no id)
    if isinstance(legacy, dict):
        named.append((str(legacy.get("name", "")), str(legacy.get("arguments", ""))))
    refusal = message.get("refusal")
    refusal = refusal if isinstance(refusal, str) else ""
    return AssistantMessage(position, content, tuple(ids), tuple(named), own, refusal, place)


def _split_parts(parts: list[Any], tags: TagSet) -> tuple[list[Any], str]:
    """`split_tags` over content given as parts: each text part's tags
    removed (a part left empty goes), the reasoning of all joined. The list
    itself when no part has a tag."""
    texts = [_text_of(p) for p in parts]
    if not any(t is not None and tags.starts.search(t) for t in texts):
        return parts, ""
    out: list[Any] = []
    found: list[str] = []
    for part, text in zip(parts, texts, strict=True):
        if text is None or not tags.starts.search(text):
            out.append(part)
            continue
        visible, reasoning = split_tags(text, tags)
        if reasoning:
            found.append(reasoning)
        if visible.strip():
            out.append({**part, "text": visible})
    return out, "\n\n".join(found)


def _text_of(part: Any) -> str | None:
    """A text part's text (chat's `{"type": "text", "text": ...}`)."""
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return str(part["text"])
    return None


def content_text(content: Any) -> str:
    """The text of a message's content: a string, or its text parts joined."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(t for t in map(_text_of, content) if t is not None)
    return ""


def _objects(value: Any) -> tuple[Json, ...]:
    return tuple(v for v in value if isinstance(v, dict)) if isinstance(value, list) else ()


def read_assistants(messages: Sequence[Any], tags: TagSet) -> list[AssistantMessage]:
    """The request's assistant messages, each with its place."""
    return read_history(messages, tags)[0]


def read_history(messages: Sequence[Any], tags: TagSet) -> tuple[list[AssistantMessage], str]:
    """The request's assistant messages, each with its place, and the place
    of an answer to the whole request (`place_of`, in the same pass)."""
    tags = tags.with_pair("think")  # the `think_tags` output shape, sent back
    digest = hashlib.sha256()
    out: list[AssistantMessage] = []
    for i, m in enumerate(messages):
        a: AssistantMessage | None = None
        if isinstance(m, dict) and m.get("role") == "assistant":
            a = read_assistant(i, m, tags, digest.hexdigest()[:32])
            out.append(a)
        _step(digest, m, a)
    return out, digest.hexdigest()[:32]


def place_of(messages: Sequence[Any], assistants: Sequence[AssistantMessage]) -> str:
    """Where an answer to `messages` sits: a digest of the user, assistant
    and tool messages before it, by what they say (their text without
    whitespace; an assistant message by its fingerprint, whatever reasoning
    it carries). Two answers that say the same in two branches of a history
    (a regenerated answer, an edited tool result, Kimi's per-conversation
    tool-call ids) are told apart by it."""
    by_position = {a.position: a for a in assistants}
    digest = hashlib.sha256()
    for i, m in enumerate(messages):
        _step(digest, m, by_position.get(i))
    return digest.hexdigest()[:32]


def _step(digest: Any, message: Any, assistant: AssistantMessage | None) -> None:
    role = _role(message)
    if assistant is not None:
        said = assistant.fingerprint or ""
    elif role in ("user", "tool"):
        said = without_whitespace(content_text(message.get("content")))
    else:  # system and developer prompts may change along a conversation
        return
    digest.update(f"{role}\x1e{said}\x1f".encode())


def placed(place: str, fp: str) -> str:
    """How a turn with fingerprint `fp` at `place` is found (index `p:`)."""
    return hashlib.sha256(f"{place}\x1d{fp}".encode()).hexdigest()[:32]


def turn_placed(turn: Turn, fp: str | None) -> str | None:
    """`placed` of a stored turn whose fingerprint is `fp` (None for a turn
    stored without its place, or with nothing to match)."""
    place = turn.extra.get(PLACE)
    return placed(place, fp) if isinstance(place, str) and place and fp else None


# the key a stored turn's `extra` keeps its place under
PLACE = "place"


def turn_reasoning(turn: Turn) -> Reasoning:
    blocks = blocks_for_context(turn)
    thinking_blocks = tuple(
        item for b in blocks if b.source_field == "thinking_blocks" for item in b.encrypted or ()
    )
    return Reasoning(
        join_reasoning(blocks),
        turn.reasoning_details,
        from_store=True,
        blocks=thinking_blocks or None,
    )


def turn_refs_of(turn: Turn) -> tuple[tuple[str, ...], str | None]:
    """How a stored turn is found again: its tool-call ids and fingerprint."""
    calls = [(c.name, c.arguments) for c in turn.tool_calls]
    return tuple(turn.tool_call_ids), fingerprint(turn.content, calls)


class TurnReader(Protocol):
    """The two store reads finding stored turns needs (a ReasoningStore is one)."""

    async def lookup(self, tenant: str, index_key: str) -> Turn | None: ...

    async def turns(self, key: ConversationKey) -> list[Turn]: ...


async def find_stored(
    store: TurnReader,
    key: ConversationKey,
    scoped: bool,
    assistants: Iterable[AssistantMessage],
) -> dict[int, Turn]:
    """Stored turns matching the assistant messages that carry no reasoning
    (or carry it without some artefact), by position. `scoped`: the client named the
    conversation, so look only in it; otherwise look through the tenant's
    index."""
    wanted = [a for a in assistants if a.own is None or not a.own.whole]
    if not wanted:
        return {}
    found: dict[int, Turn] = {}
    if scoped:
        by_key: dict[str, Turn] = {}
        for turn in await store.turns(key):
            ids, fp = turn_refs_of(turn)
            for call_id in ids:
                by_key[f"t:{call_id}"] = turn
            if fp:
                by_key[f"f:{fp}"] = turn  # the latest turn with that content wins
            at = turn_placed(turn, fp)
            if at:
                by_key[f"p:{at}"] = turn
        for a in wanted:
            match = await best_stored(a, by_key.get)
            if match is not None:
                found[a.position] = match
        return found

    async def lookup(index_key: str) -> Turn | None:
        return await store.lookup(key.tenant, index_key)

    for a in wanted:
        match = await best_stored(a, lookup)
        if match is not None:
            found[a.position] = match
    return found


async def best_stored(a: AssistantMessage, get: Any) -> Turn | None:
    """The turn `_matching`, unless another turn that says the same was
    stored at the message's place (a branch of the history, a regenerated
    answer): then that one."""
    found = await _matching(a, get)
    if found is None or a.place is None or found.extra.get(PLACE) == a.place:
        return found
    for fp in a.fingerprints:
        here = await _get(get, f"p:{placed(a.place, fp)}")
        if here is not None and _same_calls(a, here):
            return here
    return found


async def _matching(a: AssistantMessage, get: Any) -> Turn | None:
    """By tool-call id, else by fingerprint. Some upstreams and models reuse
    tool-call ids (Kimi numbers them `functions.name:0` per conversation,
    others `call_0` per turn), so a turn found by id whose content differs
    yields to one whose fingerprint matches, and is not a match at all when
    its tool calls are not the message's (another chat's call under the same
    id, or a call the client edited). A turn found by fingerprint whose
    calls have ids none of the message's has is another answer that said
    the same (another chat's identical call): not a match."""
    fps = a.fingerprints
    for call_id in a.tool_call_ids:
        turn = await _get(get, f"t:{call_id}")
        if turn is None:
            continue
        if not fps or turn_refs_of(turn)[1] in fps:
            return turn
        for fp in fps:
            exact = await _get(get, f"f:{fp}")
            if exact is not None and _same_calls(a, exact):
                return exact
        if _agree(a, turn):
            return turn  # the same calls, the text around them changed
    for fp in fps:
        found = await _get(get, f"f:{fp}")
        if found is not None and _same_calls(a, found):
            return found
    return None


def _rewritten(calls: tuple[tuple[str, str], ...]) -> list[tuple[tuple[str, str], ...]]:
    """The calls with their JSON arguments written again, with `\\u` escapes
    and without (none when no argument is JSON)."""
    parsed = [_parsed(args) for _, args in calls]
    if all(p is _NOT_JSON for p in parsed):
        return []
    return [
        tuple(
            (name, args if p is _NOT_JSON else json.dumps(p, ensure_ascii=escaped))
            for (name, args), p in zip(calls, parsed, strict=True)
        )
        for escaped in (False, True)
    ]


_NOT_JSON = object()


def _parsed(args: str) -> Any:
    try:
        return json.loads(args)
    except ValueError:
        return _NOT_JSON


def _canonical(calls: Iterable[tuple[str, str]]) -> list[tuple[str, Any]]:
    """Tool calls compared by what they say: names, and arguments as parsed
    JSON (else their text without whitespace)."""
    out: list[tuple[str, Any]] = []
    for name, args in calls:
        parsed = _parsed(args)
        out.append((name, "".join(args.split()) if parsed is _NOT_JSON else parsed))
    return out


def _calls_of(turn: Turn) -> list[tuple[str, Any]]:
    return _canonical((c.name, c.arguments) for c in turn.tool_calls)


def _agree(a: AssistantMessage, turn: Turn) -> bool:
    """The calls the message and the turn share by id say the same (names,
    and arguments as parsed JSON): a message may keep only some of a turn's
    parallel calls. Without an id on every call, all the calls compared."""
    if len(a.tool_call_ids) != len(a.tool_calls):
        return _calls_of(turn) == _canonical(a.tool_calls)
    stored = {c.id: (c.name, c.arguments) for c in turn.tool_calls}
    shared = [
        (stored[i], call)
        for i, call in zip(a.tool_call_ids, a.tool_calls, strict=True)
        if i in stored
    ]
    return bool(shared) and all(_canonical([s]) == _canonical([m]) for s, m in shared)


def _same_calls(a: AssistantMessage, turn: Turn) -> bool:
    """The message's tool-call ids and the turn's do not contradict: one side
    has none, or they share one."""
    ids = turn.tool_call_ids
    return not ids or not a.tool_call_ids or not set(ids).isdisjoint(a.tool_call_ids)


async def _get(get: Any, index_key: str) -> Turn | None:
    """`get` may be a dict's get or an async store lookup."""
    result = get(index_key)
    if asyncio.iscoroutine(result):
        result = await result
    return result  # type: ignore[no-any-return]


def known_reasoning(
    assistants: Sequence[AssistantMessage], stored: dict[int, Turn]
) -> list[Reasoning | None]:
    out: list[Reasoning | None] = []
    for a in assistants:
        if a.own is not None:
            out.append(_with_artefacts(a.own, stored.get(a.position)))
        elif a.position in stored:
            out.append(turn_reasoning(stored[a.position]))
        else:
            out.append(None)
    return out


def _with_artefacts(own: Reasoning, turn: Turn | None) -> Reasoning:
    """Reasoning a client carried back in a shape that loses artefacts (text
    in `<think>` tags or `reasoning`, details without thinking blocks) gets
    the ones the stored turn that says the same kept (signatures, details)."""
    if turn is None:
        return own
    kept = turn_reasoning(turn)
    details = own.details or kept.details
    blocks = own.blocks or kept.blocks
    if (details, blocks) == (own.details, own.blocks):
        return own
    if "".join(kept.text.split()) != "".join(own.text.split()):
        return own
    return Reasoning(own.text, details, blocks=blocks)


def build_upstream_messages(
    messages: Sequence[Any],
    assistants: Sequence[AssistantMessage],
    known: Sequence[Reasoning | None],
    *,
    dialect: Dialect,
    include: IncludeInContext,
    strip: StripPolicy,
    native_format: bool,
    place: str | None = None,
) -> EgressResult:
    """The messages to send upstream, with reasoning stripped or written in
    the dialect's way. `place`: the request's `place_of`, when the caller
    has it."""
    kept = filter_for_context(list(known), strip) if include else [None] * len(known)
    if dialect.never_send:
        kept = [None] * len(known)
    needs = tool_turns(messages, assistants, dialect)
    if include == "auto":
        # the dialect decides: its own form, on the tool-call turns it needs
        native_format = True
        kept = [
            k if dialect.auto_include and need else None
            for need, k in zip(needs, kept, strict=True)
        ]
    out: list[Json] = list(messages)
    reinjected = stripped = 0
    sent: list[Reasoning | None] = []
    for a, reasoning, keep, need in zip(assistants, known, kept, needs, strict=True):
        if keep is not None and keep.empty:
            keep = None
        original = messages[a.position]
        message = {k: v for k, v in original.items() if k not in REASONING_FIELDS}
        if "content" in original:
            message["content"] = a.content
        _write(message, keep, dialect, native_format, need)
        if a.tool_call_ids and dialect.tool_call_signature is not None:
            _sign_first_call(message, *dialect.tool_call_signature)
        out[a.position] = message
        sent.append(keep)
        if keep is not None and keep.from_store:
            reinjected += 1
        if reasoning is not None and not reasoning.empty and keep is None:
            stripped += 1
    if place is None:
        place = place_of(messages, assistants)
    return EgressResult(out, reinjected, stripped, sent, place)


def tool_turns(
    messages: Sequence[Any], assistants: Sequence[AssistantMessage], dialect: Dialect
) -> list[bool]:
    """Per assistant message, whether the dialect's needs on tool-call turns
    apply to it: it calls tools, or (`whole_tool_turns`) it belongs to a user
    turn (the messages between two user messages) in which one does."""
    calls = [bool(a.tool_call_ids) for a in assistants]
    if not dialect.whole_tool_turns:
        return calls
    turns: list[int] = []  # per assistant message: the user messages before it
    users = at = 0
    for a in assistants:
        users += sum(1 for m in messages[at : a.position] if _role(m) == "user")
        at = a.position
        turns.append(users)
    calling = {turn for turn, call in zip(turns, calls, strict=True) if call}
    return [turn in calling for turn in turns]


def _role(message: Any) -> Any:
    return message.get("role") if isinstance(message, dict) else None


def _sign_first_call(message: Json, path: tuple[str, ...], value: str) -> None:
    """Put `value` at `path` in the message's first tool call when the client
    sent nothing there (a copy: the client's objects stay as they were)."""
    calls = message.get("tool_calls")
    if not isinstance(calls, list) or not calls or not isinstance(calls[0], dict):
        return
    first = calls[0]
    target: Any = first
    for key in path[:-1]:
        target = target.get(key) if isinstance(target, dict) else None
    if isinstance(target, dict) and target.get(path[-1]):
        return
    message["tool_calls"] = [_with_path(first, path, value), *calls[1:]]


def _with_path(obj: Json, path: tuple[str, ...], value: str) -> Json:
    """A copy of `obj` with `value` at `path` (dicts on the way copied too)."""
    out = dict(obj)
    head = path[0]
    if len(path) == 1:
        out[head] = value
    else:
        child = obj.get(head)
        out[head] = _with_path(child if isinstance(child, dict) else {}, path[1:], value)
    return out


def _write(
    message: Json, reasoning: Reasoning | None, dialect: Dialect, native: bool, tool_turn: bool
) -> None:
    if dialect.never_send:
        return
    if reasoning is None or reasoning.empty:
        if tool_turn and dialect.tool_turn_placeholder is not None:
            message["reasoning_content"] = dialect.tool_turn_placeholder
        return
    where = dialect.native_field if native else "reasoning_content"
    if where == "reasoning_details":
        if reasoning.details:
            message["reasoning_details"] = [dict(d) for d in reasoning.details]
        else:
            message["reasoning"] = reasoning.text
    elif where == "thinking_blocks":
        if reasoning.blocks:
            # without the `index` a stream numbered their pieces by (a block has
            # none; Anthropic refuses one): a client's kept as they came, or a
            # turn stored so
            message["thinking_blocks"] = [
                {k: v for k, v in b.items() if k != "index"} for b in reasoning.blocks
            ]
        elif reasoning.text:  # text without its signature cannot be a thinking block
            message["reasoning_content"] = reasoning.text
    elif where == "think_in_content":
        if reasoning.details:  # it came in reasoning_details (reasoning_split): back there
            message["reasoning_details"] = [dict(d) for d in reasoning.details]
            return
        think = f"<think>\n{reasoning.text}\n</think>\n\n"
        content = message.get("content")
        if isinstance(content, list) and any(_text_of(p) is None for p in content):
            # parts that are not text stay parts: the block goes first
            message["content"] = [{"type": "text", "text": think}, *content]
        else:  # text, or text parts (joined: the dialect's own shape is a string)
            message["content"] = think + content_text(content)
    elif reasoning.text:
        message[where] = reasoning.text
    elif tool_turn and dialect.tool_turn_placeholder is not None:
        message["reasoning_content"] = dialect.tool_turn_placeholder
