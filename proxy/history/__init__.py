"""What earlier turns mean for the next request.

In: a request's messages and the stored turns of its conversation. Out: the
messages as they go upstream (reasoning re-injected or stripped per dialect
and settings), the context accounting, and, after the response, the turn
stored (`service.History.plan()` before the upstream call, `remember()`
after it). Keys (`keys`) are tenant HMACs and content fingerprints: history
never stores or logs a credential.
"""
