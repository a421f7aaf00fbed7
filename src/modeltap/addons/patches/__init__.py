"""What replaces or wraps mitmproxy internals, kept apart from the addons so
that every place modeltap reaches inside mitmproxy is in one folder."""
