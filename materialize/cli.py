"""The ``materialize`` console script: dispatch only. Each command lives in ``materialize.commands``
(or its subsystem's ``cli`` module) and returns an exit code; one handler turns user errors into a
one-line message and the documented exit code, never a traceback."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from materialize import __version__
from materialize.errors import MaterializeError

DEFAULT_SERIES = Path("series/default.yaml")
series_option = click.option("--series", "series_path", type=click.Path(path_type=Path), default=DEFAULT_SERIES,
                             show_default=True, help="series file")
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")


# Subsystem commands: (where the command object lives, its one-line help). The help line sits here,
# beside the registration, so `materialize --help` lists every command without importing a single
# subsystem (bisect pulls in scipy and numpy, offline libcst, serve httpx and psutil).
# tests/test_cli.py checks that each line is the command's own first docstring line.
_WORKSPACE = "materialize.workspace.cli:COMMANDS"
LAZY: dict[str, tuple[str, str]] = {
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


class LazyGroup(click.Group):
    """Subsystem commands load on first use (click's documented lazy-loading pattern); listing them
    uses the help lines in ``LAZY`` so that `--help` imports nothing but click."""

    lazy = LAZY

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attribute = self.lazy[cmd_name][0].split(":")
            found = getattr(importlib.import_module(module_name), attribute)
            if isinstance(found, list):  # a subsystem exporting several top-level commands
                return next(command for command in found if command.name == cmd_name)
            return found
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, except that a lazy command's line comes from ``LAZY`` (no import)."""
        limit = formatter.width - 6 - max(len(name) for name in self.list_commands(ctx))
        rows = []
        for name in self.list_commands(ctx):
            if name in self.lazy:
                rows.append((name, _shorten(self.lazy[name][1], limit)))
            else:
                command = super().get_command(ctx, name)
                if command is not None and not command.hidden:
                    rows.append((name, command.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _shorten(text: str, limit: int) -> str:
    """click's own short-help rule (the first sentence, cut at ``limit`` with an ellipsis)."""
    return click.Command("_", help=text).get_short_help_str(limit)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="materialize")
def cli() -> None:
    """Apply a quilt-like patch series to pinned upstream trees, test it offline, serve it, bisect it."""


@cli.command()
@series_option
@click.option("--upto", help="stop after this patch (name, unique prefix or position; 0 = upstream only)")
@click.option("--without", multiple=True, help="leave this patch out (repeatable)")
@click.option("--overlay", is_flag=True, help="write only the files the series touches")
@click.option("--out", "out_dir", type=click.Path(path_type=Path), help="output directory (replaced atomically)")
@click.option("-v", "--verbose", count=True,
              help="every patch's row (long series print a summary and the rows with offsets, fuzz or "
                   "failures); -vv: every hunk too")
@json_option
def apply(series_path: Path, upto: str | None, without: tuple[str, ...], overlay: bool, out_dir: Path | None,
          as_json: bool, verbose: int) -> int:
    """Materialize the series (or a prefix of it) and publish it with manifest.json."""
    from materialize.commands import apply as command

    return command.run(series_path, upto, without, overlay, out_dir, as_json, verbose)


@cli.command()
@series_option
@click.option("-v", "--verbose", is_flag=True,
              help="every patch's row (long series print a summary and the rows that need a look)")
@json_option
def status(series_path: Path, as_json: bool, verbose: bool) -> int:
    """Table of every patch: hunks clean/offset/fuzz, files, lines, flag, tests."""
    from materialize.commands import status as command

    return command.status(series_path, as_json, verbose)


@cli.command()
@series_option
@json_option
def check(series_path: Path, as_json: bool) -> int:
    """Exit 1 unless every patch applies without fuzz."""
    from materialize.commands import status as command

    return command.check(series_path, as_json)


@cli.command()
@click.option("--keep", type=click.IntRange(min=0), default=3, show_default=True, help="newest outputs to keep")
@click.option("-n", "--dry-run", is_flag=True, help="only say what would be removed")
def gc(keep: int, dry_run: bool) -> int:
    """Remove old outputs in build/materialized (never the one `latest` points at)."""
    from materialize.commands import gc as command

    return command.run(keep, dry_run)


@cli.command("import-quilt")
@click.argument("quilt_dir", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--upstream", required=True, help="DIR, archive, git+PATH_OR_URL@REV or pypi:NAME==VERSION")
@click.option("--target", required=True, help="target name for the imported patches")
@click.option("-o", "output", type=click.Path(path_type=Path), help="series file to write (default: stdout)")
def import_quilt(quilt_dir: Path, upstream: str, target: str, output: Path | None) -> int:
    """Turn a quilt series directory into a series file."""
    from materialize.commands import import_quilt as command

    return command.run(quilt_dir, upstream, target, output)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; user errors print one message and exit with their documented code."""
    from materialize.console import write  # plain text: an error message is not worth importing rich

    def err_line(text: str) -> None:
        write(text, stderr=True)

    try:
        result = cli.main(args=argv, prog_name="materialize", standalone_mode=False)
    except MaterializeError as exc:
        err_line(f"materialize: error: {exc}")
        return exc.exit_code
    except click.exceptions.Abort:
        err_line("materialize: interrupted")
        return 130
    except click.ClickException as exc:
        exc.show()
        return 2
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
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
