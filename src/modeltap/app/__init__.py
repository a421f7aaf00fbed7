"""What a user starts: the command line (:mod:`~modeltap.app.cli`), the proxy
process (:mod:`~modeltap.app.proxy`), the option table every entry point reads
(:mod:`~modeltap.app.options`), the pytest plugin
(:mod:`~modeltap.app.pytest_plugin`), the start-up screen's export lines
(:mod:`~modeltap.app.client_env`), the harness's control API
(:mod:`~modeltap.app.control`), ``--upstream-ca`` (:mod:`~modeltap.app.upstream_tls`)
and ``modeltap demo`` (:mod:`~modeltap.app.demo`).

Only ``cli``, ``proxy`` and the pytest plugin start mitmproxy; the rest is pure.
"""
