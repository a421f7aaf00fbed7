"""The pytest plugin's public names, where user code has always imported them.

The plugin itself is :mod:`modeltap.app.pytest_plugin` (the ``pytest11`` entry
point); this module only re-exports what tests annotate with.
"""

from __future__ import annotations

from modeltap.app.pytest_plugin import ModelTapFixture

__all__ = ["ModelTapFixture"]
