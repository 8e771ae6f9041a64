"""The wires of the front doors that are not chat completions (sans-IO).

Each door's package turns its API's requests into a chat completions payload
and the normalized chat output back into its own wire: bytes and values in,
bytes and values out, no I/O, no settings, no store. The endpoints in
`proxy.api` drive them on the one exchange path.
"""
