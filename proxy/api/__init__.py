"""The front doors and the proxy's own endpoints, as ASGI apps.

In: client requests. Out: responses in the door's own wire shape. The hot
paths (chat completions, pass-through) are raw ASGI; the rest is FastAPI.
A door parses its wire, asks the planner (`proxy.exchange`) for an Exchange,
drives it through the upstream, and encodes the answer. Doors never touch
stores, credentials or dialects directly, and never buffer a stream.
"""
