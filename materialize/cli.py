"""The ``materialize`` console script: dispatch only. Each command lives in ``materialize.commands``
(or its subsystem's ``cli`` module) and returns an exit code; one handler turns user errors into a
one-line message and the documented exit code, never a traceback."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import click

from materialize import __version__
from materialize.console import err
from materialize.errors import MaterializeError

DEFAULT_SERIES = Path("series/default.yaml")
series_option = click.option("--series", "series_path", type=click.Path(path_type=Path), default=DEFAULT_SERIES,
                             show_default=True, help="series file")
json_option = click.option("--json", "as_json", is_flag=True, help="machine-readable output on stdout")


class LazyGroup(click.Group):
    """Subsystem groups load on first use (click's documented lazy-loading pattern): bisect pulls in
    scipy and numpy, which would otherwise add most of a second to every `materialize apply`."""

    lazy = {
        "serve": "materialize.serve.cli:serve_group",
        "bisect": "materialize.bisect.cli:bisect_group",
        "runs": "materialize.bisect.cli:runs_group",
        "test-offline": "materialize.offline.cli:test_offline_command",
        **{
            name: "materialize.workspace.cli:COMMANDS"
            for name in ("push", "pop", "goto", "top", "applied", "unapplied", "series", "new", "add", "edit",
                         "refresh", "diff", "fold", "rename", "delete", "move", "header", "recover", "rebase",
                         "export-git", "import-git")
        },
    }

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *self.lazy])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            module_name, attribute = self.lazy[cmd_name].split(":")
            found = getattr(importlib.import_module(module_name), attribute)
            if isinstance(found, list):  # a subsystem exporting several top-level commands
                return next(command for command in found if command.name == cmd_name)
            return found
        return super().get_command(ctx, cmd_name)


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
@click.option("-v", "--verbose", is_flag=True, help="print every hunk's outcome")
@json_option
def apply(series_path: Path, upto: str | None, without: tuple[str, ...], overlay: bool, out_dir: Path | None,
          as_json: bool, verbose: bool) -> int:
    """Materialize the series (or a prefix of it) and publish it with manifest.json."""
    from materialize.commands import apply as command

    return command.run(series_path, upto, without, overlay, out_dir, as_json, verbose)


@cli.command()
@series_option
@json_option
def status(series_path: Path, as_json: bool) -> int:
    """Table of every patch: hunks clean/offset/fuzz, files, lines, flag, tests."""
    from materialize.commands import status as command

    return command.status(series_path, as_json)


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
    try:
        result = cli.main(args=argv, prog_name="materialize", standalone_mode=False)
    except MaterializeError as exc:
        err.print(f"materialize: error: {exc}", markup=False)
        return exc.exit_code
    except click.exceptions.Abort:
        err.print("materialize: interrupted", markup=False)
        return 130
    except click.ClickException as exc:
        exc.show()
        return 2
    except KeyboardInterrupt:
        err.print("materialize: interrupted; nothing half-written was published", markup=False)
        return 130
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
