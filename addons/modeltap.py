"""Load modeltap into mitmproxy: ``mitmdump -s addons/modeltap.py``.

modeltap follows mitmproxy's own ``--mode``. In front of one upstream::

    mitmdump -s addons/modeltap.py --listen-host 127.0.0.1 \
        --mode reverse:https://api.openai.com --set modeltap_out=./modeltap-out

(the reverse target is mounted at ``/`` like ``modeltap run --upstream``;
``--set modeltap_upstream=URL`` or ``modeltap_routes`` route otherwise). As the
agent's HTTPS proxy, provider hosts audited::

    mitmdump -s addons/modeltap.py --listen-host 127.0.0.1 --mode regular \
        --set modeltap_out=./modeltap-out

Keep ``--listen-host 127.0.0.1``: mitmproxy listens on every interface by
default. In regular mode on any other address without ``proxyauth`` the
addon refuses to start an open proxy unless ``--set
modeltap_allow_open_proxy=true``; a reverse proxy there gets a warning. Every
option of the addons is listed by ``mitmdump -s addons/modeltap.py
--options``; ``--set modeltap_record=DIR`` also records exchanges for
``modeltap replay``. The control API (``modeltap session end ID --out DIR``)
is served on its own listener (``--set modeltap_control=HOST:PORT``, default
a free loopback port), never through the proxy; its address and token are in
the out dir.
"""

import os
import sys

# mitmproxy puts this script's folder first on sys.path, where this file would
# shadow the modeltap package it loads; take the folder out before importing.
_here = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]

# The addons of modeltap run; a set-up they refuse ends the start in one line,
# before any listener is up (modeltap.addons.standalone).
from modeltap.addons.standalone import standalone_addons  # noqa: E402

addons = standalone_addons()
