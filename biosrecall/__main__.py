"""`python -m biosrecall ...` is the same as the `biosrecall` console script (also under torchrun).

The signal handlers go in first, before click, the commands and torch are imported, so a Ctrl-C or
SIGTERM at any moment after start-up ends in exit 130 and one line (`biosrecall.interrupts`).
"""

from biosrecall import interrupts


def main() -> None:
    """The program: stop on signals from here on, then run the command line."""
    interrupts.stop_on_signals()
    try:
        from biosrecall import allocator  # after the handlers: its ctypes import takes a while

        allocator.tune_malloc()  # big tensors reuse heap pages: every process biosrecall starts runs this
        from biosrecall.cli import main as run_command_line
    except KeyboardInterrupt:
        interrupts.interrupted()
    run_command_line()


if __name__ == "__main__":
    main()
