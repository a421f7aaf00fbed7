"""Load modeltap into mitmproxy: ``mitmdump -s addons/modeltap.py --set modeltap_out=DIR``.

Use reverse mode with connection_strategy=lazy, e.g.::

    mitmdump -s addons/modeltap.py --mode reverse:http://127.0.0.1:9 \
        --set connection_strategy=lazy --set modeltap_upstream=https://api.openai.com

or regular mode (``--mode regular --set modeltap_mode=regular``). Every option
of the addon is listed by ``mitmdump -s addons/modeltap.py --options``.
"""

from modeltap.addon import ModelTap

addons = [ModelTap()]
