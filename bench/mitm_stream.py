"""The streaming reference for the bench: bare mitmdump plus this one hook.

``mitmdump -s bench/mitm_stream.py`` streams exactly the responses modeltap
streams (event streams: SSE and AWS's binary event stream) and buffers the
rest, as bare mitmdump does. ``--set stream_large_bodies=1`` would be the
option-only way, but it also streams request bodies and every response,
which modeltap does not (it reads a request whole before its audit line), so
it would not be the same work.
"""

from mitmproxy import http

STREAMED = ("text/event-stream", "application/vnd.amazon.eventstream")


def responseheaders(flow: http.HTTPFlow) -> None:
    assert flow.response is not None
    if flow.response.headers.get("content-type", "").lower().startswith(STREAMED):
        flow.response.stream = True
