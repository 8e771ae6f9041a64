"""The Anthropic Messages wire, translated to and from the exchange path (sans-IO).

The `/v1/messages` door (`proxy.api.messages`) speaks Anthropic's Messages
API to its clients and drives the one exchange path, which speaks Chat
Completions. Everything here is pure: dicts and bytes in, dicts and bytes
out; no I/O, no settings, no store.

- `request`: a Messages request -> a Chat Completions payload, the reasoning
  settings its `thinking` and `output_config.effort` ask for, and what was
  dropped because a Chat upstream has no use for it (named for the client).
  Thinking blocks coming back are opened (their `signature` is a sealed
  envelope) and become the assistant message's reasoning.
- `stream`: normalized chat SSE -> Messages SSE events, read by read, and a
  whole chat completion -> a Message. Every thinking block leaves with a
  sealed `signature`.
- `shapes`: Anthropic's error objects and stop reasons.
- `native`: an upstream that speaks Messages itself (`api: messages`): its
  stream read into a Turn for the store, its thinking signatures sealed on
  the way out and opened on the way back.
"""
