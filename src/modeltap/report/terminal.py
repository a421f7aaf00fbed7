"""Text from the wire, made safe to print on a terminal.

Model names, session ids, tool names and paths come from the agent's
requests (and response models from the upstream); printed as they are, an
escape sequence in one (``ESC ] 0 ;``, ``ESC [ 2 J``, OSC 52) acts on the
operator's terminal, and a line break forges a line of modeltap's own.
"""

from __future__ import annotations


def printable(text: str) -> str:
    """``text`` with every character a terminal would act on written as an escape.

    Control characters (line breaks and ESC included), format characters
    (bidirectional overrides) and other unprintable ones become ``\\x1b``,
    ``\\n``, ``\\u202e``; everything else is kept.
    """
    if text.isprintable():
        return text
    return "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in text
    )
