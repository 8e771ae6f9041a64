"""The sans-IO core: upstream bytes in, normalized bytes and Turns out.

`sse` splits server-sent events, `tags` finds reasoning delimiters split
anywhere, `native` reads the providers' reasoning fields, `channels` and
`shapes` separate reasoning from answer per choice (`shapes` reads chunks of
a learned shape without a JSON parse), `builder` assembles the Turn,
`normalizer` drives a whole stream or response, `tap` records what a
stream's client is shown (for the live view), `blocks` holds the values
(ThinkingBlock, Turn). Nothing here does I/O, logs, reads settings or
imports anything of the proxy outside this package; per-stream memory is
bounded by a few bytes of carry.
"""
