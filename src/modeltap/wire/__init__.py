"""Sans-I/O framings: bytes in, events out, no sockets.

Server-sent events (:mod:`~modeltap.wire.sse`), a JSON array that arrives piece
by piece (:mod:`~modeltap.wire.json_array`), HTTP content codings
(:mod:`~modeltap.wire.decoding`), AWS event-stream framing
(:mod:`~modeltap.wire.eventstream`) and what an AWS SigV4 signature covers
(:mod:`~modeltap.wire.sigv4`). They know framings, not APIs: what an event
means is in :mod:`modeltap.apis`.
"""
