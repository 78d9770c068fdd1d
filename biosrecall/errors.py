"""The one exception type for user-facing problems, and the bounds on what a message may quote.

Library code raises `BiosrecallError` (a `ValueError`) with a message that names the problem; the CLI
turns it into a single line on stderr and exit code 2, in one place (`biosrecall.cli.main`).
A library's own exception is quoted in such a message by `first_line(exc)`, its first sentence.

A message quotes a user's value through `excerpt(value)`: short values as they are, a long one as its
start and a marker saying how long it was, so a 10 MB option value gives a line, not 10 MB. Every line
the CLI prints goes through `bounded(message)` (at most `MAX_MESSAGE` characters) whatever it quotes.

    raise BiosrecallError(f"unknown schedule {excerpt(text)}")   # 'fixed:9999...' (1,048,576 characters)
"""

from collections.abc import Iterable

MAX_MESSAGE = 500
"""The longest line the command line prints for an error, marker included."""
MAX_EXCERPT = 100
"""The most characters of a user's value a message quotes."""
LONG_WORD = 240
"""A command-line word longer than this (no path a person reads) is shown as its excerpt."""


class BiosrecallError(ValueError):
    """A problem with the user's input (arguments, files, folders), reported without a traceback."""


def first_line(exc: BaseException) -> str:
    """The first sentence of an exception's message (libraries' messages can run over many lines)."""
    lines = str(exc).strip().splitlines()
    return lines[0].split(". ")[0][:200] if lines else type(exc).__name__


def excerpt(value: object, limit: int = MAX_EXCERPT) -> str:
    """`repr` of a string a message quotes (`str` of another value), or of its first `limit` characters
    and a marker of its length."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return repr(text) if isinstance(value, str) else text
    return f"{text[:limit]!r}... ({len(text):,} characters)"


def bounded(message: str, limit: int = MAX_MESSAGE, quoted: Iterable[str] = ()) -> str:
    """`message` on one line: each of the `quoted` values it holds in full (the command line's words,
    which a library's own message may repeat) shown as its `excerpt`, then cut in the middle to at
    most `limit` characters when still longer (marked)."""
    for value in sorted({v for v in quoted if isinstance(v, str) and len(v) > LONG_WORD}, key=len)[::-1]:
        message = message.replace(value, f"{value[:MAX_EXCERPT]}... ({len(value):,} characters)")
    message = " ".join(message.split("\n"))
    if len(message) <= limit:
        return message
    marker = f" [... {len(message):,} characters in all ...] "
    keep = limit - len(marker)
    head = keep * 2 // 3
    return message[:head] + marker + message[len(message) - (keep - head) :]
