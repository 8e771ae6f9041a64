"""The default store: bounded, in-process memory.

Conversations live in an LRU order (least recently used first). Turns are
kept serialized, so the byte count is what the data really takes. Bounds:
`max_conversations`, `max_bytes` (records plus a fixed per-entry overhead),
`ttl_seconds` after the last write, and `max_turns_per_conversation` (the
oldest turns go first). Stored response objects (the Responses API's) live
in their own LRU order under the same TTL, at most `max_conversations` of
them, and their bytes count toward the same `max_bytes`. One process only:
several workers would each hold their own history, so more than one worker
with this store is refused.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any, Final

import orjson

from proxy.reasoning.blocks import Turn
from proxy.stores.base import (
    ConversationInfo,
    ConversationKey,
    StoreStats,
    TurnRefs,
    decode_turn,
    decode_turns,
    encode_turn,
)

# Bytes of bookkeeping per turn, conversation and index entry (dict entries,
# keys, list slots; measured with tracemalloc), counted with the records so the cap holds for
# many tiny conversations too.
TURN_OVERHEAD = 200
CONVERSATION_OVERHEAD = 640
INDEX_OVERHEAD = 160
RESPONSE_OVERHEAD = 300


# What the store holds must cost the cyclic collector nothing, since a full
# pass visits every entry of every tracked container (a cache miss each: with
# 10,000 conversations held as tuples, every full pass took about 4 ms under
# load, a pause that every request in flight waits out).
#
#   _turns: turn key -> record (bytes)
#   _turn_refs: turn key -> its index keys as a JSON list (only turns that have any)
#   _index: tenant -> index key -> turn key
#
# These dicts hold only str and bytes, which the collector does not track, so
# CPython never tracks the dicts either. A turn key is a str: the conversation's
# prefix (`_prefix`) and the turn's index; nothing but the index follows its
# last NUL, so no two conversations' keys meet.
#
#   _conversations: (tenant, conversation) -> (first, count, size, updated, model)
#       turns first .. first + count - 1 are kept (older ones were dropped)
#
# An OrderedDict is always tracked, so `_conversations` and `_responses` are
# visited on each full pass: `serve` freezes them with the rest of start-up
# (`gc.freeze`), and their flat tuples of atoms are untracked at the first pass.
_Key = tuple[str, str]
_Conv = tuple[int, int, int, float, str | None]
_NEW: _Conv = (0, 0, CONVERSATION_OVERHEAD, 0.0, None)
UPDATED: Final = 3


class MemoryStore:
    name = "memory"

    def __init__(
        self,
        *,
        max_conversations: int = 10_000,
        max_bytes: int = 256 * 1024 * 1024,
        ttl_seconds: float = 7 * 24 * 3600,
        max_turns: int = 1000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._max_conversations = max_conversations
        self._max_bytes = max_bytes
        self._ttl = ttl_seconds
        self._max_turns = max_turns
        self._clock = clock
        self._conversations: OrderedDict[_Key, _Conv] = OrderedDict()
        self._turns: dict[str, bytes] = {}
        self._turn_refs: dict[str, bytes] = {}
        self._index: dict[str, dict[str, str]] = {}
        self._profiles: dict[str, dict[str, Any]] = {}
        # (tenant, response id) -> (record, time written), least recently written first
        self._responses: OrderedDict[tuple[str, str], tuple[bytes, float]] = OrderedDict()
        self._bytes = 0
        self.evictions = 0

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def ping(self) -> bool:
        return True

    async def append(self, key: ConversationKey, turn: Turn, refs: TurnRefs) -> int:
        now = self._clock()
        self._expire(now)
        record = encode_turn(turn)
        tenant, conversation = k = (key.tenant, key.conversation)
        conv = self._conversations.pop(k, None)  # re-inserted last: most recently used
        if conv is None:
            conv = _NEW
            self._bytes += CONVERSATION_OVERHEAD
        first, count, size, _, model = conv
        index_keys = refs.index_keys()
        index = first + count
        turn_key = _prefix(tenant, conversation) + str(index)
        self._turns[turn_key] = record
        if index_keys:
            self._turn_refs[turn_key] = bytes(memoryview(orjson.dumps(index_keys)))  # exact size
            tenant_index = self._index.setdefault(tenant, {})
            for index_key in index_keys:
                tenant_index[index_key] = turn_key
        added = _turn_size(record, index_keys)
        self._bytes += added
        self._conversations[k] = (first, count + 1, size + added, now, turn.model or model)
        if count + 1 > self._max_turns:
            self._drop_oldest(k, count + 1 - self._max_turns)
        self._evict(keep=k)
        return index

    async def turns(self, key: ConversationKey) -> list[Turn]:
        tenant, conversation = k = (key.tenant, key.conversation)
        conv = self._live(k)
        if conv is None:
            return []
        first, count = conv[0], conv[1]
        turns = self._turns
        prefix = _prefix(tenant, conversation)
        return decode_turns([turns[prefix + str(i)] for i in range(first, first + count)])

    async def lookup(self, tenant: str, index_key: str) -> Turn | None:
        turn_key = self._index.get(tenant, {}).get(index_key)
        if turn_key is None:
            return None
        if self._live((tenant, _conversation_of(tenant, turn_key))) is None:
            return None
        found = self._turns.get(turn_key)
        return decode_turn(found) if found is not None else None

    async def delete(self, key: ConversationKey) -> bool:
        k = (key.tenant, key.conversation)
        conv = self._conversations.pop(k, None)
        if conv is None:
            return False
        self._forget(k, conv)
        return True

    async def conversations(self, tenant: str | None, limit: int = 100) -> list[ConversationInfo]:
        now = self._clock()
        self._expire(now)
        out: list[ConversationInfo] = []
        expired: list[_Key] = []
        for k in reversed(self._conversations):
            if tenant is not None and k[0] != tenant:
                continue
            _, count, _, updated, model = self._conversations[k]
            if now - updated > self._ttl:
                # read since its last write, so past the live ones `_expire` stopped at
                expired.append(k)
                continue
            out.append(ConversationInfo(k[0], k[1], count, updated, model))
            if len(out) >= limit:
                break
        for k in expired:
            self._forget(k, self._conversations.pop(k))
        return sorted(out, key=lambda c: c.updated, reverse=True)

    async def get_profile(self, name: str) -> dict[str, Any] | None:
        value = self._profiles.get(name)
        return dict(value) if value is not None else None

    async def put_profile(self, name: str, values: dict[str, Any]) -> None:
        self._profiles[name] = dict(values)

    async def delete_profile(self, name: str) -> bool:
        return self._profiles.pop(name, None) is not None

    async def list_profiles(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self._profiles.items()}

    async def tenant_secret(self, drawn: bytes) -> bytes:
        return drawn  # nothing here outlives the process

    async def put_response(self, tenant: str, response_id: str, record: bytes) -> None:
        now = self._clock()
        self._expire_responses(now)
        key = (tenant, response_id)
        old = self._responses.pop(key, None)
        if old is not None:
            self._bytes -= _response_size(key, old[0])
        record = bytes(record)
        self._responses[key] = (record, now)
        self._bytes += _response_size(key, record)
        # the new one goes last: older responses first, then conversations
        while len(self._responses) > 1 and (
            len(self._responses) > self._max_conversations or self._bytes > self._max_bytes
        ):
            self._drop_response()
        while self._bytes > self._max_bytes and self._conversations:
            self._forget(*self._conversations.popitem(last=False))
            self.evictions += 1

    async def get_response(self, tenant: str, response_id: str) -> bytes | None:
        found = self._responses.get((tenant, response_id))
        if found is None:
            return None
        if self._clock() - found[1] > self._ttl:
            self._responses.pop((tenant, response_id))
            self._bytes -= _response_size((tenant, response_id), found[0])
            return None
        return found[0]

    async def delete_response(self, tenant: str, response_id: str) -> bool:
        live = await self.get_response(tenant, response_id)
        if live is None:
            return False
        key = (tenant, response_id)
        self._responses.pop(key)
        self._bytes -= _response_size(key, live)
        return True

    async def stats(self) -> StoreStats:
        turns = len(self._turns)
        extra = {"evictions": self.evictions, "responses": len(self._responses)}
        return StoreStats(len(self._conversations), turns, self._bytes, extra)

    # -- internals -------------------------------------------------------------

    def _live(self, k: _Key) -> _Conv | None:
        conv = self._conversations.get(k)
        if conv is None:
            return None
        if self._clock() - conv[UPDATED] > self._ttl:
            self._conversations.pop(k)
            self._forget(k, conv)
            return None
        self._conversations.move_to_end(k)
        return conv

    def _expire(self, now: float) -> None:
        """Drop expired conversations from the least recently used end. Reads
        refresh the LRU order but not the expiry, so stop at the first live
        one only as an approximation; `_live` catches the rest on access."""
        while self._conversations:
            k, conv = next(iter(self._conversations.items()))
            if now - conv[UPDATED] <= self._ttl:
                return
            self._conversations.popitem(last=False)
            self._forget(k, conv)

    def _evict(self, keep: _Key) -> None:
        """Least recently used conversations go first; `keep` (just written,
        so last in order) goes last: its own oldest turns are dropped instead."""
        while len(self._conversations) > 1 and (
            len(self._conversations) > self._max_conversations or self._bytes > self._max_bytes
        ):
            self._forget(*self._conversations.popitem(last=False))
            self.evictions += 1
        while self._bytes > self._max_bytes and self._responses:
            self._drop_response()
        while self._bytes > self._max_bytes and self._conversations[keep][1] > 1:
            self._drop_oldest(keep, 1)

    def _drop_response(self) -> None:
        key, (record, _) = self._responses.popitem(last=False)
        self._bytes -= _response_size(key, record)
        self.evictions += 1

    def _expire_responses(self, now: float) -> None:
        """Stored responses are kept in write order, so the expired ones come first."""
        while self._responses:
            key, (record, written) = next(iter(self._responses.items()))
            if now - written <= self._ttl:
                return
            self._responses.popitem(last=False)
            self._bytes -= _response_size(key, record)

    def _drop_oldest(self, k: _Key, drop: int) -> None:
        """Drop a conversation's `drop` oldest turns with their index entries
        and bytes (its place in the LRU order stays)."""
        first, count, size, updated, model = self._conversations[k]
        size -= self._drop_turns(k, first, drop)
        self._conversations[k] = (first + drop, count - drop, size, updated, model)

    def _forget(self, k: _Key, conv: _Conv) -> None:
        """Drop a conversation that left `_conversations`: its turns, index
        entries and bytes."""
        first, count, size, _, _ = conv
        freed = self._drop_turns(k, first, count)
        self._bytes -= size - freed  # the conversation's own overhead

    def _drop_turns(self, k: _Key, first: int, count: int) -> int:
        """Drop turns first .. first + count - 1; return their bytes."""
        tenant, conversation = k
        prefix = _prefix(tenant, conversation)
        freed = 0
        for index in range(first, first + count):
            turn_key = prefix + str(index)
            record = self._turns.pop(turn_key)
            refs = self._turn_refs.pop(turn_key, None)
            index_keys: list[str] = orjson.loads(refs) if refs is not None else []
            self._unindex(tenant, index_keys, turn_key)
            freed += _turn_size(record, index_keys)
        self._bytes -= freed
        return freed

    def _unindex(self, tenant: str, index_keys: Sequence[str], turn_key: str) -> None:
        """Remove index entries that still point at this turn (a later turn
        may have taken the same key over)."""
        tenant_index = self._index.get(tenant)
        if tenant_index is None:
            return
        for index_key in index_keys:
            if tenant_index.get(index_key) == turn_key:
                del tenant_index[index_key]
        if not tenant_index:
            del self._index[tenant]


def _prefix(tenant: str, conversation: str) -> str:
    """The start of a conversation's turn keys: the tenant's length tells
    where the tenant ends, the last NUL where the conversation does."""
    return f"{len(tenant)}:{tenant}{conversation}\0"


def _conversation_of(tenant: str, turn_key: str) -> str:
    start = len(_prefix(tenant, ""))
    return turn_key[start - 1 : turn_key.rindex("\0")]


def _turn_size(record: bytes, index_keys: Sequence[str]) -> int:
    return len(record) + TURN_OVERHEAD + sum(len(k) + INDEX_OVERHEAD for k in index_keys)


def _response_size(key: tuple[str, str], record: bytes) -> int:
    return len(record) + len(key[0]) + len(key[1]) + RESPONSE_OVERHEAD
