"""The one exception type for user-facing problems.

Library code raises `BiosrecallError` (a `ValueError`) with a message that names the problem; the CLI
turns it into a single line on stderr and exit code 2, in one place (`biosrecall.cli.main`).
A library's own exception is quoted in such a message by `first_line(exc)`, its first sentence.
"""


class BiosrecallError(ValueError):
    """A problem with the user's input (arguments, files, folders), reported without a traceback."""


def first_line(exc: BaseException) -> str:
    """The first sentence of an exception's message (libraries' messages can run over many lines)."""
    lines = str(exc).strip().splitlines()
    return lines[0].split(". ")[0][:200] if lines else type(exc).__name__
