"""The `biosrecall` command line: a click group whose commands only parse, call the library, and print.

Every user mistake surfaces as `BiosrecallError` (or a click usage error) and is reported here, in one
place, as a single `error: ...` line on stderr with exit code 2 and no traceback.

    biosrecall --help
    biosrecall generate --out data/bios-1k --people 1000 --seed 0
"""

from __future__ import annotations

import sys

import click

from biosrecall import __version__
from biosrecall.errors import BiosrecallError

# (module, command attribute) pairs; each module holds one thin command.
_COMMANDS = [
    ("biosrecall.cli.generate", "generate"),
    ("biosrecall.cli.generate", "pools"),
    ("biosrecall.cli.flops", "flops"),
    ("biosrecall.cli.train", "train"),
    ("biosrecall.cli.recall", "recall_curve"),
    ("biosrecall.cli.figure1", "figure1"),
    ("biosrecall.cli.diagnose", "diagnose_update"),
    ("biosrecall.cli.lm", "lm"),
    ("biosrecall.cli.ask", "ask"),
    ("biosrecall.cli.export", "export"),
    ("biosrecall.cli.sweep", "sweep"),
]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="biosrecall")
def cli() -> None:
    """Train looped transformers with different depth schedules at matched FLOPs and measure
    factual recall (bits per person) across serving depths.

    Typical flow: `generate` a dataset, `train` one run per schedule, `recall-curve` the runs
    (or `figure1` to do all three for the paper's Figure 1)."""


def _register() -> None:
    import importlib

    for module_name, attribute in _COMMANDS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:  # a command whose module is not written yet
            if exc.name != module_name:
                raise
            continue
        cli.add_command(getattr(module, attribute))


_register()


def fail(message: str) -> None:
    """Print one error line and exit 2 (the contract for every user mistake)."""
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: runs the group and maps user errors to one line + exit 2."""
    try:
        cli.main(args=argv, prog_name="biosrecall", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        click.echo("interrupted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        fail(exc.format_message().replace("\n", " "))
    except (BiosrecallError, click.ClickException) as exc:
        fail(str(exc.message if isinstance(exc, click.ClickException) else exc).replace("\n", " "))
    except OSError as exc:  # unwritable or missing paths the library did not anticipate
        fail(f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc))
    except KeyboardInterrupt:
        click.echo("interrupted", err=True)
        sys.exit(130)
