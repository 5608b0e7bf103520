"""Commands declared beside their bodies, parsed by the standard library's ``argparse``.

Why not click: importing click costs about 30 ms (it loads ``inspect``, ``typing``, ``uuid`` and
``datetime``), and that alone took every workspace command past twice quilt's time (issue 12);
argparse costs about 3 ms on top of ``re``, which every command loads anyway. Why decorators: a
command's options stay written next to its body, in the order ``--help`` lists them. This module only
records the declarations; the ``ArgumentParser`` is built when the command runs or its help is asked
for, so listing commands builds nothing.

The declarations are ``argparse.ArgumentParser.add_argument``'s own arguments (``action``, ``nargs``,
``type``, ``choices``, ``dest``...), plus ``show_default``. A command's function is called with one
keyword argument per declared destination and returns its exit code (``None`` counts as 0). A group's
function takes the group's own options and returns an object that each of its commands receives
first (``pass_obj``), as click's ``ctx.obj`` did.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from materialize.errors import MaterializeError

F = TypeVar("F", bound=Callable[..., Any])
_DECLARED = "__cli_params__"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """argparse's layout (docstrings keep their paragraphs), where a command name as long as
    ``test-offline`` still has its help on the same line: argparse measures a group's commands
    without the indent it then prints them with."""

    def add_argument(self, action: argparse.Action) -> None:
        super().add_argument(action)
        for sub in getattr(action, "_get_subactions", list)():  # only a group of commands has them
            width = len(self._format_action_invocation(sub)) + self._current_indent + self._indent_increment
            self._action_max_length = max(self._action_max_length, width)


def _terminal_width() -> int:
    """``shutil.get_terminal_size().columns`` (what argparse asks for), without importing ``shutil``
    and, through it, the compression modules: argparse builds a formatter for every option declared."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            columns = 0
    return (columns if columns > 0 else 80) - 2  # shutil's fallback, then argparse's own margin


def help_formatter(prog: str) -> argparse.HelpFormatter:
    return _Formatter(prog, max_help_position=32, width=_terminal_width())


def _untranslated(message: str) -> str:
    return message


# argparse looks each of its messages up in gettext's catalogues, which searches the disk for an
# ``argparse.mo`` in every language of the environment (and imports ``locale``) at each lookup; CPython
# ships no such catalogue, so the lookups can only return the message itself.
argparse._ = _untranslated  # type: ignore[attr-defined]
argparse.ngettext = lambda singular, plural, n: singular if n == 1 else plural  # type: ignore[attr-defined]


def _cleandoc(doc: str) -> str:
    """``inspect.cleandoc``: the first line, then the rest without their common indent (importing
    ``inspect`` or ``textwrap`` for it cost ~5M instructions of every command)."""
    first, _, body = doc.expandtabs().strip().partition("\n")
    lines = body.split("\n")
    margin = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join([first.strip(), *(line[margin:].rstrip() for line in lines)]).strip()


class UsageError(MaterializeError):
    """The command line is wrong in a way the parser cannot see (options that exclude each other)."""

    exit_code = 2


def option(*flags: str, show_default: bool = False, **kwargs: Any) -> Callable[[F], F]:
    """Declare an option (``-x``/``--name``) or, with a bare name, a positional argument."""
    if show_default:
        kwargs["help"] = f"{kwargs.get('help', '')} (default: %(default)s)".lstrip()
    if "metavar" not in kwargs and kwargs.get("action") is None:  # PATCH, --series SERIES: as click showed them
        name = next((flag for flag in flags if flag.startswith("--")), flags[-1])
        kwargs["metavar"] = name.lstrip("-").replace("-", "_").upper()

    def declare(func: F) -> F:
        declared = func.__dict__.setdefault(_DECLARED, [])
        declared.insert(0, (flags, dict(kwargs)))  # decorators run bottom-up; --help lists top-down
        return func

    return declare


def existing_dir(text: str) -> Path:
    """An argument ``type``: a directory that exists (argparse names the option when it is not)."""
    path = Path(text)
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"directory '{text}' does not exist")
    return path


def existing_file(text: str) -> Path:
    """An argument ``type``: a file that exists."""
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"file '{text}' does not exist")
    return path


def natural(text: str) -> int:
    """An argument ``type``: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"{value} is below 0")
    return value


class Command:
    """One command (or a group of them): its name, body and declared parameters."""

    def __init__(self, func: Callable[..., Any], name: str, *, pass_obj: bool = False, rest: str | None = None) -> None:
        self.func = func
        self.name = name
        self.pass_obj = pass_obj
        self.rest = rest
        self.children: dict[str, Command] = {}
        self._dests: list[str] = []

    @property
    def help(self) -> str:
        """The docstring, dedented: the command's description on its ``--help`` page."""
        return _cleandoc(self.func.__doc__ or "")

    @property
    def short_help(self) -> str:
        """The docstring's first line: what ``materialize --help`` lists."""
        return self.help.partition("\n")[0]

    def command(self, name: str) -> Callable[[Callable[..., Any]], Command]:
        """Register a command of this group (it receives the group's object first when the group
        was declared with ``pass_obj``)."""

        def register(func: Callable[..., Any]) -> Command:
            child = Command(func, name, pass_obj=self.pass_obj)
            self.children[name] = child
            return child

        return register

    def parser(self, prog: str) -> argparse.ArgumentParser:
        """The whole parser of this command (and of its group's commands)."""
        parser = argparse.ArgumentParser(prog=prog, description=self.help, allow_abbrev=False,
                                         formatter_class=help_formatter)
        self._declare(parser)
        return parser

    def _declare(self, parser: argparse.ArgumentParser) -> None:
        self._dests = [parser.add_argument(*flags, **kwargs).dest
                       for flags, kwargs in self.func.__dict__.get(_DECLARED, [])]
        if self.children:
            commands = parser.add_subparsers(dest=f"{self.name} command", metavar="COMMAND", title="commands",
                                             required=True)
            for child in self.children.values():
                child._declare(commands.add_parser(
                    child.name, help=child.short_help, description=child.help, allow_abbrev=False,
                    formatter_class=help_formatter))

    def main(self, args: Sequence[str], prog: str, obj: Any = None) -> int:
        """Parse ``args`` and run: the exit code. A usage error or ``--help`` raises ``SystemExit``
        (argparse's own), which the console script turns into its code."""
        parser = self.parser(prog)
        if self.rest is None:
            return self._call(parser.parse_args(list(args)), obj)
        namespace, unknown = parser.parse_known_args(list(args))
        return self._call(namespace, obj, {self.rest: unknown})

    def _call(self, namespace: argparse.Namespace, obj: Any, extra: dict[str, list[str]] | None = None) -> int:
        kwargs = {dest: getattr(namespace, dest) for dest in self._dests} | (extra or {})
        if self.children:
            return self.children[getattr(namespace, f"{self.name} command")]._call(namespace, self.func(**kwargs))
        result = self.func(obj, **kwargs) if self.pass_obj else self.func(**kwargs)
        return 0 if result is None else int(result)


def command(name: str, *, rest: str | None = None) -> Callable[[Callable[..., Any]], Command]:
    """Turn a function and the options declared under this decorator into a ``Command``. With ``rest``,
    arguments the command does not declare are passed on as that keyword (a list), for commands that
    hand them to another program (``test-offline`` to pytest)."""
    return lambda func: Command(func, name, rest=rest)


def group(name: str, *, pass_obj: bool = False) -> Callable[[Callable[..., Any]], Command]:
    """A command with commands of its own (``Command.command``). Its body takes the group's options;
    with ``pass_obj`` what it returns is handed to each of its commands first, as click's ``ctx.obj``."""
    return lambda func: Command(func, name, pass_obj=pass_obj)
