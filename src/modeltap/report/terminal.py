"""Text from the wire, made safe to print on a terminal: the one way modeltap prints.

Model names, session ids, tool names and paths come from the agent's
requests (response models and ids from the upstream, session ids and routes
from recordings); printed as they are, an escape sequence in one (``ESC ] 0
;`` sets the terminal's title, ``ESC [ 2 J`` clears it, OSC 52 writes the
clipboard, the 8-bit CSI ``U+009B`` does the same as ``ESC [`` on some
terminals), a bidirectional override (``U+202E``) turns the rest of a line
around, and a line break forges a line of modeltap's own.

Every command, and every stderr line, prints through this module:
:func:`print_lines` for lines of text, :func:`print_document` for a JSON or
HTML document, :class:`TerminalLogHandler` for log records. No other module
calls ``print`` or writes to ``sys.stdout`` / ``sys.stderr`` (a test reads
the source to keep it so).
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Final, TextIO

from modeltap.rules.printable import printable as printable


def print_lines(*lines: str, stderr: bool = False, flush: bool = False) -> None:
    """Print each argument as one line, escaped (:func:`printable`).

    A line break inside an argument is shown as ``\\n``, never taken: text
    built of several lines is given as several arguments (its builder escaped
    any wire text inside each). Escaping twice changes nothing, so a line that
    is already printable passes as it is.

    Args:
        lines: the lines, without their line breaks.
        stderr: print on stderr (else stdout).
        flush: flush the stream after them.
    """
    _write("".join(printable(line) + "\n" for line in lines), stderr, flush)


#: What a document may hold and a terminal would act on: every character that
#: is not printable, but its own line breaks and tabs.
_UNPRINTABLE: Final = re.compile(r"[^\t\n\x20-\x7e]")


def print_document(text: str, *, stderr: bool = False) -> None:
    """Print a JSON (or HTML) document, its own line breaks kept.

    Any other character a terminal would act on is written as a JSON escape
    (``\\u009b``, ``\\u202e``, ``\\u007f``; a surrogate pair beyond the BMP):
    JSON writers escape only U+0000-U+001F, and a JSON reader reads the
    escape as the same character, so the document means what it meant.

    Args:
        text: the document.
        stderr: print on stderr (else stdout).
    """
    _write(_UNPRINTABLE.sub(_json_escape, text), stderr, False)


def _json_escape(found: re.Match[str]) -> str:
    c = found.group()
    if c.isprintable():
        return c
    code = ord(c)
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    code -= 0x10000
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def _write(text: str, stderr: bool, flush: bool) -> None:
    stream: TextIO = sys.stderr if stderr else sys.stdout
    stream.write(text)
    if flush:
        stream.flush()


class TerminalLogHandler(logging.Handler):
    """Log records on stderr, each line escaped (a message quoting a value from
    the wire, mitmproxy's or modeltap's, never acts on the terminal).

    modeltap's console script makes it ``logging.lastResort``: what Python
    prints of a record no handler takes (the message alone, WARNING and up),
    escaped; a traceback keeps its lines.
    """

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = printable(record.getMessage())
            trace = _FORMATTER.formatException(record.exc_info) if record.exc_info else ""
            print_lines(message, *trace.splitlines(), stderr=True, flush=True)
        except Exception:
            self.handleError(record)


#: Formats a record's traceback (the handler escapes each of its lines).
_FORMATTER: Final = logging.Formatter()
