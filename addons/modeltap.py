"""Load modeltap into mitmproxy: ``mitmdump -s addons/modeltap.py --set modeltap_out=DIR``.

Use reverse mode with connection_strategy=lazy, e.g.::

    mitmdump -s addons/modeltap.py --mode reverse:http://127.0.0.1:9 \
        --set connection_strategy=lazy --set modeltap_upstream=https://api.openai.com

or regular mode (``--mode regular --listen-host 127.0.0.1 --set modeltap_mode=regular``;
on any other address without ``proxyauth`` the addon refuses to start an open
proxy unless ``--set modeltap_allow_open_proxy=true``). Every option
of the addons is listed by ``mitmdump -s addons/modeltap.py --options``;
``--set modeltap_record=DIR`` also records exchanges for ``modeltap replay``.
The control API (``modeltap session end ID --out DIR``) is served on its own
listener (``--set modeltap_control=HOST:PORT``, default a free loopback port),
never through the proxy; its address and token are in the out dir.
"""

import os
import sys

# mitmproxy puts this script's folder first on sys.path, where this file would
# shadow the modeltap package it loads; take the folder out before importing.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

from modeltap.addons import default_addons  # noqa: E402

addons = default_addons()
