"""The `biosrecall` command line: a click group whose commands only parse, call the library, and print.

Every user mistake surfaces as `BiosrecallError` (or a click usage error) and is reported here, in one
place, as a single `error: ...` line on stderr with exit code 2 and no traceback. Ctrl-C and SIGTERM
stop any command with exit code 130 and the one line `interrupted` (see `biosrecall.interrupts`).

    biosrecall --help
    biosrecall generate --out data/bios-1k --people 1000 --seed 0

Start-up is kept cheap: a command's module is imported only when that command runs or shows its own
help, and the command modules import torch, pandas, matplotlib and the trackers inside the functions
that use them. So `biosrecall --help`, every `--help` and every option error return without loading
torch (tests/test_cli_startup.py checks this).
"""

from __future__ import annotations

import ast
import difflib
import importlib
import importlib.util
import sys
from pathlib import Path

import click

from biosrecall import __version__, interrupts
from biosrecall.atomic import command_outputs
from biosrecall.errors import MAX_MESSAGE, BiosrecallError, bounded

# command name -> (module, attribute); each module holds one thin command (or group of them).
COMMANDS = {
    "generate": ("biosrecall.cli.generate", "generate"),
    "pools": ("biosrecall.cli.generate", "pools"),
    "flops": ("biosrecall.cli.flops", "flops"),
    "train": ("biosrecall.cli.train", "train"),
    "recall-curve": ("biosrecall.cli.recall", "recall_curve"),
    "figure1": ("biosrecall.cli.figure1", "figure1"),
    "capacity": ("biosrecall.cli.capacity", "capacity"),
    "diagnose-update": ("biosrecall.cli.diagnose", "diagnose_update"),
    "lm": ("biosrecall.cli.lm", "lm"),
    "ask": ("biosrecall.cli.ask", "ask"),
    "gate": ("biosrecall.cli.gate", "gate"),
    "export": ("biosrecall.cli.export", "export"),
    "sweep": ("biosrecall.cli.sweep", "sweep"),
    "study": ("biosrecall.cli.study", "study"),
    "leaderboard": ("biosrecall.cli.leaderboard", "leaderboard"),
}


class LazyGroup(click.Group):
    """A group that imports a command's module only when the command is used.

    `biosrecall --help` lists every command with the first sentence of its docstring, read from the
    module's source: importing the modules would import what the commands need. A command stopped by
    a signal ends here with its one line (`biosrecall.interrupts`)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMANDS:
            module_name, attribute = COMMANDS[cmd_name]
            command = getattr(importlib.import_module(module_name), attribute)
            self.add_command(_with_summary(command), cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        name = click.utils.make_str(args[0]) if args else ""
        if args and self.get_command(ctx, name) is None and not name.startswith("-"):
            # click suggests close option names but not command names: do the same for commands.
            commands = self.list_commands(ctx)
            close = [c for c in commands if c.startswith(name)] or difflib.get_close_matches(
                name, commands, 3, 0.6
            )
            if close:
                ctx.fail(f"No such command {name!r}. (Did you mean {' or '.join(map(repr, close))}?)")
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:  # stopped here, not in click, which would print a blank line first
            interrupts.interrupted()

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max(map(len, names))
        # Loaded or not, a command is shortened alike: click's own cut, of a stand-in without the whole
        # first sentence a loaded command carries as its short help.
        rows = [
            (name, click.Command(name, help=self._help(ctx, name)).get_short_help_str(limit))
            for name in names
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _help(self, ctx: click.Context, name: str) -> str | None:
        """A command's help: while it is not loaded, its docstring read from its module's source (a
        command with none there, such as one a function builds, is loaded)."""
        if name not in self.commands and (docstring := _docstring(*COMMANDS[name])) is not None:
            return docstring
        return self.get_command(ctx, name).help


def first_sentence(text: str | None) -> str | None:
    """The first sentence of a help text, on one line: what a list of commands shows of each."""
    if not text:
        return None
    paragraph = " ".join(text.strip().split("\n\n")[0].split())
    end = paragraph.find(". ")
    return paragraph if end < 0 else paragraph[: end + 1]


def _with_summary(command: click.Command) -> click.Command:
    """The command (and its subcommands) with its first sentence as its short help: the docs' list of
    commands (mkdocs-click) shows a command's first line, which a wrapped docstring cuts mid-sentence."""
    if command.short_help is None:
        command.short_help = first_sentence(command.help)
    for sub in getattr(command, "commands", {}).values():
        _with_summary(sub)
    return command


def _docstring(module_name: str, function: str) -> str | None:
    """The docstring of a module's top-level function, from its source (None when it has none there)."""
    spec = importlib.util.find_spec(module_name)
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return ast.get_docstring(node, clean=False)
    return None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="biosrecall")
def cli() -> None:
    """Train looped transformers with different depth schedules at matched FLOPs and measure
    factual recall (bits per person) across serving depths.

    Typical flow: `generate` a dataset, `train` one run per schedule, `recall-curve` the runs
    (or `figure1` to do all three for the paper's Figure 1)."""


def fail(message: str) -> None:
    """Print one error line, at most MAX_MESSAGE characters whatever it quotes, and exit 2 (the
    contract for every user mistake)."""
    shown = bounded(message, MAX_MESSAGE - len("error: "), quoted=_ARGV)  # long words as excerpts
    click.echo("error: " + shown, err=True)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """The command line: runs the group and maps user errors to one line + exit 2.

    Its first instruction makes SIGINT and SIGTERM stop the command (exit 130, one line), before any
    command imports torch. Without `argv` it is the program itself, so once the exit status is decided
    a late signal is ignored until the process ends; with `argv` (a call from Python) the previous
    handlers are put back on return.

    `python -m biosrecall` and the console script (`biosrecall.__main__`) have installed the same
    handlers already, before this module's imports; installing them again changes nothing."""
    previous: interrupts.Handlers = {}
    try:
        previous = interrupts.stop_on_signals()
        _run(argv)
    except KeyboardInterrupt:  # a signal in the instant before _run's own handling began
        interrupts.interrupted()
    finally:
        if argv is None:
            interrupts.work_done()
        else:
            interrupts.restore(previous)


_ARGV: list[str] = []
"""The words of the command being run: a message that repeats a long one shows an excerpt (`fail`)."""


def _run(argv: list[str] | None) -> None:
    _ARGV[:] = [str(word) for word in (sys.argv[1:] if argv is None else argv)]

    try:
        with command_outputs():  # a failed write takes back the folders this command made
            cli.main(args=argv, prog_name="biosrecall", standalone_mode=False)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        interrupts.interrupted()
    except click.ClickException as exc:  # a usage error's message names its option (format_message)
        fail(exc.format_message())
    except BiosrecallError as exc:
        fail(str(exc))
    except OSError as exc:  # unwritable or missing paths the library did not anticipate
        fail(f"{exc.strerror}: {exc.filename}" if exc.filename else str(exc))
