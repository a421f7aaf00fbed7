"""The core: one exchange and one connection as data.

The request gate (:mod:`~modeltap.core.gate`), the audit of a request's body
(:mod:`~modeltap.core.body_audit`), the HTTP exchange's life
(:mod:`~modeltap.core.exchange`) and the WebSocket connection's
(:mod:`~modeltap.core.ws_connection`), what they share (:mod:`~modeltap.core.run`,
:mod:`~modeltap.core.sessions`), what they publish (:mod:`~modeltap.core.notices`)
and to whom (:mod:`~modeltap.core.listeners`),
the answers modeltap gives itself (:mod:`~modeltap.core.answers`) and the
observation of response bodies and streams (:mod:`~modeltap.core.observe`).
Facts in, lines and notices out: nothing here imports mitmproxy or OpenTelemetry.
"""
