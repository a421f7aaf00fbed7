"""Redaction: what of a request's path and query string may be written (SPEC 8).

Secrets never land in files or spans: of the query string only parameter
names are kept, with values only for a short allowlist of harmless,
well-known parameters (``api-version``, ``beta``, ``alt``); every other value
is ``REDACTED``, whatever its spelling or encoding.
"""

from __future__ import annotations

import functools
import re
from urllib.parse import unquote_plus

#: What a redacted value (or a name that may be a secret) is written as.
REDACTED = "REDACTED"

#: The only query parameters whose values are kept (SPEC section 8), each with
#: the shapes its value may take; any other value, even of these names, is
#: written as ``REDACTED``. Names are compared after percent-decoding.
_KEPT_VALUES: dict[str, re.Pattern[str]] = {
    "api-version": re.compile(r"\d{4}-\d{2}-\d{2}(?:-preview)?|preview|latest|v\d{1,3}"),
    "beta": re.compile(r"true|false"),
    "alt": re.compile(r"sse|json|proto|media"),
}

#: A parameter name kept in a written path: letters with ``_ - .``, at most two
#: digits at the end, and ``[...]`` suffixes (``key[]``, ``filter[0]``). Names
#: with more digits, other characters, or over 48 characters look more like a
#: key than a name and are written as ``REDACTED`` themselves.
_PARAM_NAME = re.compile(r"[A-Za-z][A-Za-z_.\-]{0,47}\d{0,2}(?:\[[A-Za-z_]{0,32}\d{0,2}\])*")

#: Longest path a record or event carries; the rest is cut (after redaction).
MAX_PATH_CHARS = 2048

#: Characters that NFKC folds into ``;``, ``?`` or ``#`` (a server that
#: normalises the path may split on them); ``tests/test_records.py`` checks the
#: lists against :mod:`unicodedata`.
_LOOKALIKES: dict[str, tuple[str, ...]] = {
    ";": ("\u037e", "\ufe14", "\ufe54", "\uff1b"),
    "?": ("\u2047", "\u2048", "\u2049", "\ufe16", "\ufe56", "\uff1f"),
    "#": ("\ufe5f", "\uff03"),
}


def _byte_spellings(byte: int) -> str:
    """A regex for one byte: percent-encoded to any depth (``%3B``, ``%253B``),
    or, above ASCII, as mitmproxy hands it over (latin-1 or a surrogate escape)."""
    spellings = [f"%(?:25)*(?i:{byte:02x})"]
    if byte >= 0x80:
        spellings += [re.escape(chr(byte)), re.escape(chr(0xDC00 + byte))]
    return "(?:" + "|".join(spellings) + ")"


def _char_spellings(char: str) -> list[str]:
    """Every way a server might come to read ``char`` out of a path: the
    character itself, its UTF-8 bytes percent-encoded (to any depth), IIS's
    ``%uXXXX``, and for ASCII the overlong UTF-8 forms old decoders accepted."""
    code = ord(char)
    spellings = [re.escape(char), f"%(?:25)*[uU](?i:{code:04x})"]
    sequences = [list(char.encode())]
    if code < 0x80:
        # Overlong forms: C0 xx, E0 80 xx, F0 80 80 xx.
        last = 0x80 | code
        sequences += [[0xC0, last], [0xE0, 0x80, last], [0xF0, 0x80, 0x80, last]]
    spellings += ["".join(_byte_spellings(b) for b in sequence) for sequence in sequences]
    return spellings


#: A parameter separator in a path, however spelt: ``;`` opens parameters up to
#: the end of its segment, ``?`` and ``#`` (here only encoded or look-alike: a
#: raw one ends the path) the rest of the path, for a server that decodes or
#: normalises before it splits.
def _separator(*chars: str) -> str:
    return "|".join(s for c in chars for s in (c, *_LOOKALIKES[c]) for s in _char_spellings(s))


@functools.cache
def _separators() -> tuple[re.Pattern[str], re.Pattern[str]]:
    """The head separator (the lookahead lets the search skip characters that
    cannot start one) and the rest separator. Compiled on first use: with every
    spelling they take tens of milliseconds to compile, which the proxy's
    start-up need not wait for (it warms them once it listens)."""
    head = re.compile(
        f"(?=[%;\u0080-\U0010ffff])(?:(?P<segment>{_separator(';')})|{_separator('?', '#')})"
    )
    return head, re.compile(_separator("?", "#"))


def redact_path(path: str) -> str:
    """Return ``path`` as modeltap writes it: no query value that could be a secret.

    SPEC section 8 is an allowlist, not a list of secret names: of the query
    string (and of ``;`` parameters in path segments) only parameter names are
    kept, with values only for ``api-version``, ``beta`` and ``alt``, and only
    when the value has one of their harmless shapes. Every other value becomes
    ``REDACTED`` whatever its name's spelling or encoding (names are compared
    after percent-decoding). ``;`` separates parameters like ``&`` (some servers
    read it so). In the path before the query, a separator counts however a
    server might come to read one: ``;``, ``?`` or ``#`` percent-encoded (to
    any depth), as IIS's ``%uXXXX``, as overlong UTF-8, or as a character that
    NFKC folds into one (U+FF1B); what follows it (to the end of its segment
    for ``;``, of the path for the others) is redacted like a query. A
    parameter without ``=`` is a value too (``?sk-…``): it is
    written as ``REDACTED`` unless it is an allowlisted name, and so is a name
    that does not look like one. A fragment after ``#`` is dropped. An empty
    value stays empty. A path longer than :data:`MAX_PATH_CHARS` is cut there,
    after redaction, so the cut never shows part of a secret. A path under
    the limit comes out the same when redacted twice.

    Args:
        path: a request path, possibly with a query string (``/v1/x?key=abc``).

    Returns:
        The path to write.
    """
    path = path.split("#", 1)[0]
    head, sep, query = path.partition("?")
    if ";" in head or "%" in head or not head.isascii():
        head = _redact_head(head)
    written = f"{head}?{_redact_params(query)}" if sep else head
    if len(written) > MAX_PATH_CHARS:
        written = written[:MAX_PATH_CHARS] + "...[cut]"
    return written


def compile_patterns() -> None:
    """Compile the path-redaction patterns now: the proxy does it on a worker
    thread once it listens, so that neither start-up nor a first request whose
    path needs them waits."""
    _separators()


def _redact_head(head: str) -> str:
    """The path before its query: what follows a separator (:func:`_separators`),
    redacted like a query; the separator is kept as it was spelt."""
    out: list[str] = []
    pos = 0
    head_separator, rest_separator = _separators()
    while (found := head_separator.search(head, pos)) is not None:
        start = found.end()
        end = head.find("/", start) if found.lastgroup == "segment" else -1
        if end < 0 or rest_separator.search(head, start, end):
            end = len(head)  # (an encoded ``?`` among ``;`` parameters: the rest is a query)
        out += [head[pos:start], _redact_params(head[start:end])]
        pos = end
    out.append(head[pos:])
    return "".join(out)


def _redact_params(query: str) -> str:
    """Each ``&``- or ``;``-separated parameter of ``query``, redacted (separators kept)."""
    pieces = re.split(r"([&;])", query)
    return "".join(
        piece if index % 2 else _redact_param(piece) for index, piece in enumerate(pieces)
    )


def _redact_param(param: str) -> str:
    if not param:
        return param
    name, eq, value = param.partition("=")
    decoded = unquote_plus(name)
    if not eq:
        return param if decoded in _KEPT_VALUES else REDACTED
    if not _PARAM_NAME.fullmatch(decoded):
        name = REDACTED
    kept = _KEPT_VALUES.get(decoded)
    if value and (kept is None or not kept.fullmatch(value)):
        value = REDACTED
    return f"{name}={value}"
