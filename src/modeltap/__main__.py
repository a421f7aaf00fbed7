"""``python -m modeltap``: the same as the ``modeltap`` command."""

from modeltap.app.cli import main

raise SystemExit(main())
