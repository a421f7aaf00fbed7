"""Text from the wire written so a terminal shows it and acts on none of it.

Model names, session ids, tool names and paths come from the agent's
requests and the upstream's answers; an escape sequence in one sets a
terminal's title or clears it, a bidirectional override turns a line around,
and a line break forges a line of modeltap's own. :func:`printable` is the
one rule for every place that shows wire text to a person: the commands'
output (:mod:`modeltap.report.terminal`) and the text of a verdict
(:mod:`modeltap.evidence.verdicts`), which pytest prints itself.
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
