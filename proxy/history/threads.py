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
  match that finds reasoning to re-inject);
- a latest assistant message the proxy never stored (a history written
  elsewhere, a turn the store lost or let expire) opens a new conversation.

Limit: two conversations whose latest assistant messages are the same (same
text, no tool-call ids) cannot be told apart by content; the request joins
the one written last. Clients that need them apart name them with
`X-Conversation-Id`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from proxy.history.egress import TurnReader, best_stored, read_assistant
from proxy.history.keys import AUTO_PREFIX
from proxy.reasoning.tags import TagSet

# the key a stored turn's `extra` names its conversation under
CONVERSATION = "conversation"


def new_conversation_id() -> str:
    return AUTO_PREFIX + secrets.token_hex(12)


async def continued_conversation(
    store: TurnReader, tenant: str, messages: Sequence[Any], tags: TagSet
) -> str | None:
    """The conversation whose stored turn is the request's latest assistant
    message; None when there is no assistant message or no such turn."""
    latest = next(
        (m for m in reversed(messages) if isinstance(m, dict) and m.get("role") == "assistant"),
        None,
    )
    if latest is None:
        return None
    message = read_assistant(0, latest, tags)

    async def lookup(index_key: str) -> Any:
        return await store.lookup(tenant, index_key)

    turn = await best_stored(message, lookup)
    if turn is None:
        return None
    conversation = turn.extra.get(CONVERSATION)
    return conversation if isinstance(conversation, str) and conversation else None
