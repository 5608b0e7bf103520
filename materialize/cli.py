"""The ``materialize`` console script: dispatch only. Each command lives in ``materialize.commands``
(or its subsystem's ``cli`` module) and returns an exit code; one handler turns user errors into a
one-line message and the documented exit code, never a traceback.

Only the named command's module is imported, and only its parser is built (``materialize.cliargs``):
`materialize add` loads the workspace's command module and nothing of bisect, serve or the engine."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from pathlib import Path

from materialize import __version__
from materialize.cliargs import Command, command, existing_dir, help_formatter, natural, option
from materialize.errors import MaterializeError

DEFAULT_SERIES = Path("series/default.yaml")
series_option = option("--series", dest="series_path", type=Path, default=DEFAULT_SERIES, show_default=True,
                       help="series file")
json_option = option("--json", dest="as_json", action="store_true", help="machine-readable output on stdout")


# Every command: (where its ``Command`` lives, its one-line help). The help line sits here, beside the
# registration, so `materialize --help` lists every command without importing a single subsystem
# (bisect pulls in scipy and numpy, offline libcst, serve httpx and psutil).
# tests/test_cli.py checks that each line is the command's own first docstring line.
_WORKSPACE = "materialize.workspace.cli:COMMANDS"
COMMANDS: dict[str, tuple[str, str]] = {
    "apply": ("materialize.cli:apply", "Materialize the series (or a prefix of it) and publish it with manifest.json."),
    "status": ("materialize.cli:status", "Table of every patch: hunks clean/offset/fuzz, files, lines, flag, tests."),
    "check": ("materialize.cli:check", "Exit 1 unless every patch applies without fuzz."),
    "gc": ("materialize.cli:gc", "Remove old outputs in build/materialized (never the one `latest` points at)."),
    "import-quilt": ("materialize.cli:import_quilt", "Turn a quilt series directory into a series file."),
    "serve": ("materialize.serve.cli:serve_group",
              "Serve the materialized source from a profile: plan, check, up, verify, install."),
    "bisect": ("materialize.bisect.cli:bisect_group",
               "Find the patch that broke a gate or moved a metric, across (flaky, noisy) hardware runs."),
    "runs": ("materialize.bisect.cli:runs_group", "The run ledger (bench/runs/*.jsonl): list, show, validate."),
    "test-offline": ("materialize.offline.cli:test_offline_command",
                     "Each patch's offline tests: patched must pass, control (without the patch) must fail."),
    "push": (_WORKSPACE, "Apply the next patch (or up to PATCH, or all) in the workspace."),
    "pop": (_WORKSPACE, "Remove the top patch (or until PATCH is on top, or all) from the workspace."),
    "goto": (_WORKSPACE, "Push or pop until PATCH is on top (0 = nothing applied)."),
    "top": (_WORKSPACE, "Print the top patch."),
    "applied": (_WORKSPACE, "Print the applied patches, bottom first."),
    "unapplied": (_WORKSPACE, "Print the patches after the top."),
    "series": (_WORKSPACE, "Print every patch of the series."),
    "new": (_WORKSPACE, "Create a new empty patch after the top (it becomes the top) or after --after."),
    "add": (_WORKSPACE, "Add files to the top patch (checked out into work/<target>/ when not there yet)."),
    "edit": (_WORKSPACE, "add, then open $VISUAL/$EDITOR on the files."),
    "refresh": (_WORKSPACE, "Regenerate the top patch (or PATCH) from the workspace; unchanged hunks stay byte-identical."),
    "diff": (_WORKSPACE, "Print the top patch (or PATCH) as refresh would write it (nothing is written)."),
    "fold": (_WORKSPACE, "Apply PATCH_FILE to the workspace and add its files to the top patch (then refresh)."),
    "rename": (_WORKSPACE, "Rename a patch (file and series entry; metadata kept)."),
    "delete": (_WORKSPACE, "Remove a patch from the series (the top is popped first)."),
    "move": (_WORKSPACE, "Move an unapplied patch; refused (naming patch and hunk) when the series would stop applying."),
    "header": (_WORKSPACE, "Show (or edit / replace) a patch's description; the diff part is not touched."),
    "recover": (_WORKSPACE, "Deal with an operation that was interrupted half-way (see its journal)."),
    "rebase": (_WORKSPACE, "Move TARGET's pin to --to SPEC and carry the series across (git rebase habits)."),
    "export-git": (_WORKSPACE, "Write BRANCH: the pinned base plus one commit per patch of TARGET (like gbp pq)."),
    "import-git": (_WORKSPACE, "Turn the commits BASE..TIP into TARGET's patch files and series entries."),
    "report": ("materialize.site.cli:report_command", "Write a self-contained static HTML report: series, evidence, bisect, serving."),
}


# Libraries that `make materialize` does not install, and the pyproject extra that has each.
EXTRAS = {"libcst": "offline", "numpy": "bisect", "scipy": "bisect", "matplotlib": "bisect", "psutil": "serve",
          "httpx_sse": "serve", "openai": "serve", "jinja2": "report", "pygments": "report", "ray": "fleet"}


def resolve(name: str) -> Command:
    """The command called ``name``, importing only the module that holds it."""
    module_name, attribute = COMMANDS[name][0].split(":")
    found = getattr(importlib.import_module(module_name), attribute)
    if isinstance(found, list):  # a subsystem exporting several top-level commands
        return next(each for each in found if each.name == name)
    return found


def root_parser() -> argparse.ArgumentParser:
    """`materialize --help`, `--version`, and the usage error for an unknown command: built from
    ``COMMANDS`` alone, without importing any command."""
    parser = argparse.ArgumentParser(
        prog="materialize", allow_abbrev=False, formatter_class=help_formatter,
        description="Apply a quilt-like patch series to pinned upstream trees, test it offline, serve it, bisect it.",
        epilog="`materialize COMMAND --help` describes each command.")
    parser.add_argument("--version", action="version", version=f"materialize {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands")
    for name in sorted(COMMANDS):
        commands.add_parser(name, help=COMMANDS[name][1], add_help=False)
    return parser


@command("apply")
@series_option
@option("--upto", help="stop after this patch (name, unique prefix or position; 0 = upstream only)")
@option("--without", action="append", default=[], help="leave this patch out (repeatable)")
@option("--overlay", action="store_true", help="write only the files the series touches")
@option("--out", dest="out_dir", type=Path, help="output directory (replaced atomically)")
@option("-v", "--verbose", action="count", default=0,
        help="every patch's row (long series print a summary and the rows with offsets, fuzz or "
             "failures); -vv: every hunk too")
@json_option
def apply(series_path: Path, upto: str | None, without: list[str], overlay: bool, out_dir: Path | None,
          as_json: bool, verbose: int) -> int:
    """Materialize the series (or a prefix of it) and publish it with manifest.json."""
    from materialize.commands import apply as command

    return command.run(series_path, upto, without, overlay, out_dir, as_json, verbose)


@command("status")
@series_option
@option("-v", "--verbose", action="store_true",
        help="every patch's row (long series print a summary and the rows that need a look)")
@json_option
def status(series_path: Path, as_json: bool, verbose: bool) -> int:
    """Table of every patch: hunks clean/offset/fuzz, files, lines, flag, tests."""
    from materialize.commands import status as command

    return command.status(series_path, as_json, verbose)


@command("check")
@series_option
@json_option
def check(series_path: Path, as_json: bool) -> int:
    """Exit 1 unless every patch applies without fuzz."""
    from materialize.commands import status as command

    return command.check(series_path, as_json)


@command("gc")
@option("--keep", type=natural, default=3, show_default=True, help="newest outputs to keep")
@option("-n", "--dry-run", action="store_true", help="only say what would be removed")
def gc(keep: int, dry_run: bool) -> int:
    """Remove old outputs in build/materialized (never the one `latest` points at)."""
    from materialize.commands import gc as command

    return command.run(keep, dry_run)


@command("import-quilt")
@option("quilt_dir", type=existing_dir, help="the quilt series directory (usually debian/patches)")
@option("--upstream", required=True, help="DIR, archive, git+PATH_OR_URL@REV or pypi:NAME==VERSION")
@option("--target", required=True, help="target name for the imported patches")
@option("-o", dest="output", type=Path, help="series file to write (default: stdout); an existing one only with --force")
@option("-f", "--force", action="store_true", help="replace the -o file when it exists (the old one is kept as FILE.orig)")
def import_quilt(quilt_dir: Path, upstream: str, target: str, output: Path | None, force: bool) -> int:
    """Turn a quilt series directory into a series file."""
    from materialize.commands import import_quilt as command

    return command.run(quilt_dir, upstream, target, output, force=force)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors print one message and exit with their documented code."""
    from materialize.console import write  # plain text: an error message is not worth importing rich

    def err_line(text: str) -> None:
        # an error names files, patch lines and records of someone else's: their control characters are
        # spelled \xNN (commands.printable), never obeyed by the terminal (ESC]0 retitles it, ESC]52 writes
        # the clipboard)
        from materialize.commands import printable

        write(printable(text), stderr=True)

    args = list(sys.argv[1:] if argv is None else argv)
    try:
        if not args or args[0] not in COMMANDS:  # --help, --version, no command or an unknown one
            parser = root_parser()
            parser.parse_args(args)
            parser.print_help()
            return 2
        return resolve(args[0]).main(args[1:], prog=f"materialize {args[0]}")
    except SystemExit as exc:  # argparse after --help or --version (0) or a usage error (2, already printed)
        return exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    except MaterializeError as exc:
        err_line(f"materialize: error: {exc}")
        return exc.exit_code
    except ModuleNotFoundError as exc:
        extra = EXTRAS.get((exc.name or "").split(".")[0])
        if extra is None:
            raise
        err_line(f"materialize: error: this command needs {exc.name}, from the `{extra}` extra: "
                 f"pip install -e '.[{extra}]' (`make venv` installs every extra)")
        return 2
    except KeyboardInterrupt:
        err_line("materialize: interrupted; nothing half-written was published")
        return 130
    except BrokenPipeError:  # `materialize series | head`: the reader left, as git and quilt see it (SIGPIPE)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit's flush
        return 141
