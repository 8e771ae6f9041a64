"""Which conversation a request without `X-Conversation-Id` belongs to.

A client that names no conversation still resends the history, and the
history says where it continues: the latest assistant message is a turn the
proxy stored, and a stored turn knows its conversation. So:

- a request with no assistant message opens a new conversation, under a
  random id (`auto-` and 24 hex digits): chats that open with the same words
  stay apart;
- otherwise it continues the conversation of the stored turn that matches
  its latest assistant message, found in the tenant's index by tool-call id,
  else by the fingerprint of its visible content and tool calls (the same
  match that finds reasoning to re-inject; of turns that say the same, the
  one stored at the same place in the history);
- a latest assistant message the proxy never stored (one a client wrote
  itself, as agents do when they resume after an interrupt: "No response
  requested.") hands over to the one before it, up to `WALK_BACK` of them;
- a history none of whose latest assistant messages the proxy stored (one
  written elsewhere, turns the store lost or let expire) opens a new
  conversation.

Limit: two conversations whose histories say the same up to the same latest
assistant message (same text, no tool-call ids) cannot be told apart by
content; the request joins the one written last. Clients that need them apart name them with
`X-Conversation-Id`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from proxy.history.egress import TurnReader, best_stored, read_assistants
from proxy.history.keys import AUTO_PREFIX
from proxy.reasoning.tags import TagSet

# the key a stored turn's `extra` names its conversation under
CONVERSATION = "conversation"
# assistant messages looked up, latest first, before a request opens a new
# conversation (a history written elsewhere costs this many lookups once)
WALK_BACK = 8


def new_conversation_id() -> str:
    return AUTO_PREFIX + secrets.token_hex(12)


async def continued_conversation(
    store: TurnReader, tenant: str, messages: Sequence[Any], tags: TagSet
) -> str | None:
    """The conversation of the stored turn that is one of the request's
    latest assistant messages (the latest that is one); None when there is
    none."""

    async def lookup(index_key: str) -> Any:
        return await store.lookup(tenant, index_key)

    for latest in reversed(read_assistants(messages, tags)[-WALK_BACK:]):
        turn = await best_stored(latest, lookup)
        if turn is not None:
            conversation = turn.extra.get(CONVERSATION)
            return conversation if isinstance(conversation, str) and conversation else None
    return None
