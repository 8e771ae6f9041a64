"""The OpenAI Responses API over chat completions upstreams.

`request` turns a Responses request (instructions, input items, tools) into a
chat completions payload; `tools` flattens the Responses tool kinds into chat
functions and gives the names back; `objects` builds the Response object and
its output items; `encoder` turns normalized chat SSE (or a whole chat
completion) into the Responses event stream (or a Response object); `native`
normalizes what an upstream that speaks Responses itself sends.
"""
