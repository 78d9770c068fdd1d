"""The one exception type for user-facing problems.

Library code raises `BiosrecallError` (a `ValueError`) with a message that names the problem; the CLI
turns it into a single line on stderr and exit code 2, in one place (`biosrecall.cli.main`).
"""


class BiosrecallError(ValueError):
    """A problem with the user's input (arguments, files, folders), reported without a traceback."""
