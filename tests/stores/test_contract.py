"""The ReasoningStore contract: the same tests against every backend
(memory, SQLite, Redis, Redis Cluster), so they behave alike wherever a
user or the proxy can tell."""

from __future__ import annotations

import pytest

from proxy.history.keys import ConversationKey
from proxy.reasoning.blocks import TextPart, ThinkingBlock, ToolCall, Turn
from proxy.stores.base import ReasoningStore, TurnRefs
from tests.stores.conftest import START, Backend

pytestmark = pytest.mark.anyio

ALICE, BOB = "t-alice", "t-bob"
REASONING = "Let me think about the weather in Paris. " * 100  # a few KB, as real turns


def turn(text: str, *, call: str | None = None, model: str | None = "m1") -> Turn:
    parts: list[ThinkingBlock | TextPart | ToolCall] = [
        ThinkingBlock(f"{REASONING}({text})", "reasoning_content"),
        TextPart(text),
    ]
    if call is not None:
        parts.append(ToolCall(call, "get_weather", '{"city": "Paris"}'))
    return Turn(parts=tuple(parts), finish_reason="stop", model=model)


def refs(call: str | None = None, fp: str | None = None) -> TurnRefs:
    return TurnRefs((call,) if call else (), fp)


async def test_append_returns_consecutive_indexes_and_turns_come_back_in_order(
    store: ReasoningStore,
) -> None:
    key = ConversationKey(ALICE, "c1")
    written = [turn(f"answer {i}") for i in range(3)]
    assert [await store.append(key, t, refs()) for t in written] == [0, 1, 2]
    assert await store.turns(key) == written
    assert await store.turns(ConversationKey(ALICE, "unknown")) == []


async def test_turn_round_trip_is_lossless(store: ReasoningStore) -> None:
    rich = Turn(
        parts=(
            ThinkingBlock('first thought \u2028 \x00 "quoted" \\ 🤔 思考', "reasoning_details"),
            ThinkingBlock(
                "",
                "reasoning_details",
                is_hidden=True,
                signature="sig==",
                encrypted=({"type": "reasoning.encrypted", "data": "b64==", "index": 1},),
                tokens=17,
            ),
            ThinkingBlock("tagged", "think_tag", is_hidden=True),
            TextPart("Visible answer, with <memory>unknown tags</memory>."),
            ToolCall("call_9", "lookup", '{"q": "é"}'),
            ToolCall(None, "no_id", "", type="custom"),
        ),
        finish_reason="tool_calls",
        usage={"completion_tokens": 9, "completion_tokens_details": {"reasoning_tokens": 7}},
        complete=False,
        persisted=True,
        model="provider/model:free",
        response_id="chatcmpl-1",
        reasoning_details=({"type": "reasoning.text", "text": "first thought", "index": 0},),
        error="upstream closed early",
        route="openrouter",
        created=START + 0.125,
        reasoning_truncated=True,
        extra={"context": {"effective": 10, "raw": 12}, "nested": [1, None, 2.5]},
    )
    key = ConversationKey(ALICE, "rich")
    await store.append(key, rich, refs("call_9", "fp-rich"))
    assert await store.turns(key) == [rich]
    assert await store.lookup(ALICE, "t:call_9") == rich
    assert await store.lookup(ALICE, "f:fp-rich") == rich


async def test_lookup_by_tool_call_id_and_by_fingerprint(store: ReasoningStore) -> None:
    key = ConversationKey(ALICE, "c1")
    first, second = turn("one", call="call_1"), turn("two")
    await store.append(key, first, TurnRefs(("call_1", "call_1b"), "fp-one"))
    await store.append(key, second, refs(fp="fp-two"))
    assert await store.lookup(ALICE, "t:call_1") == first
    assert await store.lookup(ALICE, "t:call_1b") == first
    assert await store.lookup(ALICE, "f:fp-one") == first
    assert await store.lookup(ALICE, "f:fp-two") == second
    assert await store.lookup(ALICE, "t:call_unknown") is None
    assert await store.lookup(ALICE, "f:fp-unknown") is None


async def test_lookup_finds_the_latest_turn_indexed_under_a_key(
    store: ReasoningStore, backend: Backend
) -> None:
    older, newer = turn("same answer, first time"), turn("same answer, again")
    await store.append(ConversationKey(ALICE, "c1"), older, refs(fp="fp-same"))
    backend.tick()
    await store.append(ConversationKey(ALICE, "c2"), newer, refs(fp="fp-same"))
    assert await store.lookup(ALICE, "f:fp-same") == newer
    # deleting the older conversation leaves the newer one's entry alone
    assert await store.delete(ConversationKey(ALICE, "c1"))
    assert await store.lookup(ALICE, "f:fp-same") == newer


async def test_delete_removes_turns_index_entries_and_listing(store: ReasoningStore) -> None:
    key, other = ConversationKey(ALICE, "c1"), ConversationKey(ALICE, "c2")
    await store.append(key, turn("one", call="call_1"), refs("call_1", "fp-1"))
    await store.append(other, turn("kept", call="call_2"), refs("call_2"))
    assert await store.delete(key) is True
    assert await store.turns(key) == []
    assert await store.lookup(ALICE, "t:call_1") is None
    assert await store.lookup(ALICE, "f:fp-1") is None
    assert [c.conversation for c in await store.conversations(ALICE)] == ["c2"]
    assert await store.delete(key) is False
    assert await store.lookup(ALICE, "t:call_2") is not None
    # the id can be used again, from index 0
    assert await store.append(key, turn("again"), refs()) == 0
    assert await store.turns(key) == [turn("again")]


async def test_conversations_are_listed_most_recent_first(
    store: ReasoningStore, backend: Backend
) -> None:
    await store.append(ConversationKey(ALICE, "a1"), turn("x", model="m1"), refs())
    backend.tick()
    await store.append(ConversationKey(BOB, "b1"), turn("x", model="m2"), refs())
    backend.tick()
    await store.append(ConversationKey(ALICE, "a2"), turn("x", model="m3"), refs())
    backend.tick()
    await store.append(ConversationKey(ALICE, "a1"), turn("y", model=None), refs())

    mine = await store.conversations(ALICE)
    assert [(c.tenant, c.conversation, c.turns, c.model) for c in mine] == [
        (ALICE, "a1", 2, "m1"),  # a turn without a model keeps the last one known
        (ALICE, "a2", 1, "m3"),
    ]
    assert [c.updated for c in mine] == [START + 3, START + 2]
    everyone = await store.conversations(None)
    assert [(c.tenant, c.conversation) for c in everyone] == [
        (ALICE, "a1"),
        (ALICE, "a2"),
        (BOB, "b1"),
    ]
    assert [c.conversation for c in await store.conversations(None, limit=2)] == ["a1", "a2"]
    assert await store.conversations("t-nobody") == []


async def test_tenants_never_see_each_other(store: ReasoningStore) -> None:
    secret = turn("alice's", call="call_a")
    await store.append(ConversationKey(ALICE, "shared-id"), secret, refs("call_a", "fp-a"))
    bobs_view = ConversationKey(BOB, "shared-id")
    assert await store.turns(bobs_view) == []
    assert await store.lookup(BOB, "t:call_a") is None
    assert await store.lookup(BOB, "f:fp-a") is None
    assert await store.conversations(BOB) == []
    assert await store.delete(bobs_view) is False
    # Bob's own conversation of the same id is separate
    await store.append(bobs_view, turn("bob's"), refs("call_a"))
    assert await store.lookup(BOB, "t:call_a") == turn("bob's")
    assert await store.lookup(ALICE, "t:call_a") == secret
    assert await store.turns(ConversationKey(ALICE, "shared-id")) == [secret]


async def test_profiles(store: ReasoningStore) -> None:
    assert await store.get_profile("deep") is None
    assert await store.list_profiles() == {}
    values = {"include_in_context": True, "effort": "high", "nested": {"a": [1, 2]}}
    await store.put_profile("deep", values)
    await store.put_profile("fast", {"enabled": False})
    assert await store.get_profile("deep") == values
    await store.put_profile("fast", {"effort": "low"})  # overwritten, not merged
    assert await store.list_profiles() == {"deep": values, "fast": {"effort": "low"}}
    assert await store.delete_profile("deep") is True
    assert await store.delete_profile("deep") is False
    assert await store.list_profiles() == {"fast": {"effort": "low"}}


async def test_the_first_tenant_secret_kept_wins(store: ReasoningStore, backend: Backend) -> None:
    first = await store.tenant_secret(b"drawn-by-the-first-process")
    second = await store.tenant_secret(b"drawn-by-the-second-process")
    if backend.kind == "memory":  # nothing outlives the process: each keeps its own
        assert (first, second) == (b"drawn-by-the-first-process", b"drawn-by-the-second-process")
        return
    assert first == second == b"drawn-by-the-first-process"
    # a secret is not a profile, a conversation, or anything a listing shows
    assert await store.list_profiles() == {}
    assert await store.conversations(None) == []
    assert (await store.stats()).conversations == 0


async def test_stats_count_conversations_turns_and_bytes(store: ReasoningStore) -> None:
    empty = await store.stats()
    assert (empty.conversations, empty.turns) == (0, 0)
    await store.append(ConversationKey(ALICE, "c1"), turn("1"), refs("call_1"))
    await store.append(ConversationKey(ALICE, "c1"), turn("2"), refs())
    await store.append(ConversationKey(BOB, "c1"), turn("3"), refs())
    stats = await store.stats()
    assert (stats.conversations, stats.turns) == (2, 3)
    assert stats.bytes > 0


async def test_ping(store: ReasoningStore) -> None:
    assert await store.ping() is True


async def test_conversations_expire_after_ttl(backend: Backend) -> None:
    store = await backend.open(ttl_seconds=0.3)
    key = ConversationKey(ALICE, "c1")
    await store.append(key, turn("old", call="call_old"), refs("call_old", "fp-old"))
    await backend.later(0.4)
    assert await store.turns(key) == []
    assert await store.lookup(ALICE, "t:call_old") is None
    assert await store.lookup(ALICE, "f:fp-old") is None
    assert await store.conversations(ALICE) == []
    assert await store.conversations(None) == []
    # the id starts afresh, and the old index entries do not point into it
    assert await store.append(key, turn("new"), refs()) == 0
    assert await store.turns(key) == [turn("new")]
    assert await store.lookup(ALICE, "t:call_old") is None
    assert (await store.stats()).conversations == 1


async def test_each_write_refreshes_the_ttl(backend: Backend) -> None:
    if backend.kind.startswith("redis"):
        pytest.skip("real-time TTLs would make this timing-sensitive: see test_redis_store")
    store = await backend.open(ttl_seconds=100)
    key = ConversationKey(ALICE, "c1")
    await store.append(key, turn("1"), refs("call_1"))
    await backend.later(60)
    await store.append(key, turn("2"), refs())
    await backend.later(60)  # 120 s after the first write, 60 s after the last
    assert await store.turns(key) == [turn("1"), turn("2")]
    assert await store.lookup(ALICE, "t:call_1") == turn("1")


async def test_max_turns_drops_the_oldest_turns_and_their_index_entries(
    backend: Backend,
) -> None:
    store = await backend.open(max_turns=2)
    key = ConversationKey(ALICE, "c1")
    turns = [turn(f"t{i}", call=f"call_{i}") for i in range(4)]
    for i, t in enumerate(turns):
        assert await store.append(key, t, refs(f"call_{i}")) == i  # indexes stay absolute
    assert await store.turns(key) == turns[2:]
    assert await store.lookup(ALICE, "t:call_0") is None
    assert await store.lookup(ALICE, "t:call_1") is None
    assert await store.lookup(ALICE, "t:call_3") == turns[3]
    (info,) = await store.conversations(ALICE)
    assert info.turns == 2  # the turns kept, as GET /v1/conversations/{id} returns them


async def test_max_conversations_drops_the_least_recently_written(backend: Backend) -> None:
    # Redis lets the count run one over a limit of 2 (its eviction slack), then
    # sweeps back down to it: after four conversations every store holds two
    store = await backend.open(max_conversations=2)
    for name in ("c1", "c2", "c3", "c4"):
        await store.append(ConversationKey(ALICE, name), turn(name), refs(f"call_{name}"))
        backend.tick()
    for gone in ("c1", "c2"):
        assert await store.turns(ConversationKey(ALICE, gone)) == []
        assert await store.lookup(ALICE, f"t:call_{gone}") is None
    assert [c.conversation for c in await store.conversations(None)] == ["c4", "c3"]
    assert await store.lookup(ALICE, "t:call_c3") == turn("c3")


# -- stored response objects (the Responses API's `store: true`) ------------------------


async def test_stored_responses_round_trip_per_tenant(store: ReasoningStore) -> None:
    record = b'{"id": "resp_1", "output": ["\\u00e9", "' + REASONING.encode() + b'"]}'
    await store.put_response(ALICE, "resp_1", record)
    assert await store.get_response(ALICE, "resp_1") == record
    # another tenant's id looks exactly like an unknown one
    assert await store.get_response(BOB, "resp_1") is None
    assert await store.delete_response(BOB, "resp_1") is False
    assert await store.get_response(ALICE, "resp_unknown") is None
    # a second write of one id replaces the first
    await store.put_response(ALICE, "resp_1", b"{}")
    assert await store.get_response(ALICE, "resp_1") == b"{}"
    assert await store.delete_response(ALICE, "resp_1") is True
    assert await store.get_response(ALICE, "resp_1") is None
    assert await store.delete_response(ALICE, "resp_1") is False


async def test_stored_responses_leave_conversations_alone(store: ReasoningStore) -> None:
    key = ConversationKey(ALICE, "c1")
    await store.append(key, turn("one", call="call_1"), refs("call_1"))
    await store.put_response(ALICE, "c1", b"{}")  # the same name, another kind
    assert await store.turns(key) == [turn("one", call="call_1")]
    assert await store.delete(key) is True
    assert await store.get_response(ALICE, "c1") == b"{}"


async def test_stored_responses_expire_after_ttl(backend: Backend) -> None:
    store = await backend.open(ttl_seconds=0.3)
    await store.put_response(ALICE, "resp_old", b"{}")
    await backend.later(0.4)
    assert await store.get_response(ALICE, "resp_old") is None
    assert await store.delete_response(ALICE, "resp_old") is False
    await store.put_response(ALICE, "resp_new", b"{}")
    assert await store.get_response(ALICE, "resp_new") == b"{}"


async def test_max_conversations_caps_stored_responses_too(backend: Backend) -> None:
    store = await backend.open(max_conversations=2)
    for name in ("r1", "r2", "r3"):
        await store.put_response(ALICE if name != "r2" else BOB, name, name.encode())
        backend.tick()
    assert await store.get_response(ALICE, "r1") is None
    assert await store.get_response(BOB, "r2") == b"r2"
    assert await store.get_response(ALICE, "r3") == b"r3"
    # rewriting one makes it the most recent
    await store.put_response(BOB, "r2", b"again")
    backend.tick()
    await store.put_response(ALICE, "r4", b"r4")
    assert await store.get_response(ALICE, "r3") is None
    assert await store.get_response(BOB, "r2") == b"again"
