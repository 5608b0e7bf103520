"""Commands of the workspace (quilt vocabulary), rebase and git round-trips.

The lead's ``materialize.cli`` registers every object in ``COMMANDS``. Each command is a thin wrapper
returning an exit code; the work happens in ``stack``, ``edit``, ``rebase`` and ``gitio``.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from materialize.cliargs import Command, UsageError, command, existing_file, option
from materialize.console import columns, write
from materialize.errors import MaterializeError

if TYPE_CHECKING:
    from materialize.workspace import edit, stack
    from materialize.workspace.state import Workspace

# Each command imports the modules it runs inside its body: `materialize push --help` (and listing
# these commands) loads this file and its parser only, and `add` never pays for `rebase` or the engine.

series_option = option("--series", dest="series_path", type=Path, default=None,
                             help="series file (default: series/default.yaml here or in the nearest parent)")
force_option = option("-f", "--force", action="store_true",
                            help="save unrefreshed changes under work/.materialize/saved/ and go on")


@contextlib.contextmanager
def _session(series_path: Path | None, op: str) -> Iterator[Workspace]:
    """The workspace of the series, under its lock, once its state allows ``op`` (see ``session``)."""
    from materialize.workspace.session import find_series, guarded
    from materialize.workspace.state import Workspace

    series_path = find_series(series_path)
    seen = _identity(series_path)  # (before it is read: a write after this is seen below)
    ws = Workspace.open(series_path)
    with guarded(ws.meta, op):
        if _identity(series_path) != seen:  # another command wrote it between the read and the lock
            ws.reload_series()
        yield ws


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    import os

    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _say_kept_pushed(folder: str | None) -> None:
    if folder:
        write(f"a patch popped was changed since it was pushed: its files as pushed (work/ before the pop) are "
              f"kept in {folder}", stderr=True)


def _report_move(result: stack.MoveResult) -> int:
    if result.saved_to:
        write(f"saved unrefreshed changes to {result.saved_to}", stderr=True)
    _say_kept_pushed(result.kept_pushed)
    if result.stopped:
        write(result.stopped, stderr=True)
    write(f"Now at patch {result.top}" if result.top else "No patches applied")
    return 1 if result.stopped else 0


@command("push")
@series_option
@option("-a", dest="all_", action="store_true", help="push every remaining patch")
@option("-f", "--force", action="store_true",
        help="save unrefreshed changes under work/.materialize/saved/ and go on; a patch that does not "
                   "apply goes in as far as it applies, failed hunks in <file>.rej (quilt push -f), then refresh")
@option("patch", nargs="?")
def push(series_path: Path | None, patch: str | None, all_: bool, force: bool) -> int:
    """Apply the next patch (or up to PATCH, or all) in the workspace."""
    from materialize.workspace import stack

    with _session(series_path, "push") as ws:
        return _report_move(stack.push(ws, patch, all_=all_, force=force))


@command("pop")
@series_option
@option("-a", dest="all_", action="store_true", help="pop every applied patch")
@force_option
@option("patch", nargs="?")
def pop(series_path: Path | None, patch: str | None, all_: bool, force: bool) -> int:
    """Remove the top patch (or until PATCH is on top, or all) from the workspace."""
    from materialize.workspace import stack

    with _session(series_path, "pop") as ws:
        return _report_move(stack.pop(ws, patch, all_=all_, force=force))


@command("goto")
@series_option
@force_option
@option("patch")
def goto(series_path: Path | None, patch: str, force: bool) -> int:
    """Push or pop until PATCH is on top (0 = nothing applied)."""
    from materialize.workspace import stack

    with _session(series_path, "goto") as ws:
        return _report_move(stack.goto(ws, patch, force=force))


@command("top")
@series_option
def top(series_path: Path) -> int:
    """Print the top patch."""
    with _session(series_path, "top") as ws:
        state = ws.load(allow_pending=True)
    if state.top is None:
        write("No patches applied", stderr=True)
        return 2
    write(state.top)
    return 0


def _names(entries, verbose: bool = False) -> None:
    for p in entries:
        write(f"{p.position:4d} {p.target:9s} {p.name}" if verbose else p.name)


@command("applied")
@series_option
@option("-v", dest="verbose", action="store_true", help="show positions and targets")
def applied(series_path: Path | None, verbose: bool) -> int:
    """Print the applied patches, bottom first."""
    from materialize.workspace import stack

    with _session(series_path, "applied") as ws:
        _names(stack.listing(ws)["applied"], verbose)
    return 0


@command("unapplied")
@series_option
@option("-v", dest="verbose", action="store_true", help="show positions and targets")
def unapplied(series_path: Path | None, verbose: bool) -> int:
    """Print the patches after the top."""
    from materialize.workspace import stack

    with _session(series_path, "unapplied") as ws:
        _names(stack.listing(ws)["unapplied"], verbose)
    return 0


@command("series")
@series_option
@option("-v", dest="verbose", action="store_true", help="mark applied (+) and top (=) patches")
def series_cmd(series_path: Path | None, verbose: bool) -> int:
    """Print every patch of the series."""
    from materialize.workspace import stack

    with _session(series_path, "series") as ws:
        state = ws.load(allow_pending=True)
        applied = stack.applied_names(ws, state) if verbose else []
    for p in ws.series.patches:
        mark = "=" if applied and p.name == applied[-1] else "+" if p.name in applied else " "
        write(f"{mark} {p.name}" if verbose else p.name)
    return 0


@command("new")
@series_option
@option("--target", "-t", help="a target of the series (default: the top's)")
@option("--after", help="insert after this patch (default: the top)")
@option("--subject", "-m", help="description subject (default: NAME)")
@option("name")
def new(series_path: Path | None, name: str, target: str | None, after: str | None, subject: str | None) -> int:
    """Create a new empty patch after the top (it becomes the top) or after --after.

    After a patch above the top it is inserted unapplied, and said so; `goto NAME` pushes up to it."""
    from materialize.workspace import edit

    with _session(series_path, "new") as ws:
        entry = edit.new_patch(ws, name, target=target, after=after, subject=subject)
        top = ws.load().top
    if top == entry.name:
        write(f"Patch {entry.spec.patch} is now on top")
    else:  # --after a patch above the top: inserted, not pushed (pushing the ones between could fail)
        below = ws.series.patches[entry.position - 2].name if entry.position > 1 else "0"
        write(f"Patch {entry.spec.patch} inserted after {below}, not applied; the top is "
              f"{top if top else 'none (no patch is applied)'}: `materialize goto {entry.name}` pushes up to it")
    return 0


@command("add")
@series_option
@option("files", nargs="+")
def add(series_path: Path | None, files: tuple[str, ...]) -> int:
    """Add files to the top patch (checked out into work/<target>/ when not there yet).

    Exit 2 when one is already in it, as quilt's (the others are still added)."""
    from materialize.workspace import edit

    with _session(series_path, "add") as ws:
        taken = edit.lower_changes_taken(ws, list(files))
        paths, already = edit.add_files(ws, list(files))
        top = ws.load().top
    for path in paths:
        write(path)
    _say_lower_changes_taken(taken, top)
    for name in already:  # quilt's words and code: "nothing to do" for that file, told apart from a failure
        write(f"File {name} is already in patch {top}", stderr=True)
    return 2 if already else 0


def _say_lower_changes_taken(taken: list[tuple[str, str]], top: str | None, op: str = "add") -> None:
    for path, owner in taken:
        write(f"warning: {path} holds changes not refreshed into {owner}; they now belong to {top} and its "
              f"refresh records them (quilt's {op} would leave them {owner}'s: to keep them there, pop to "
              f"{owner} and refresh it first)", stderr=True)


@command("edit")
@series_option
@option("files", nargs="+")
def edit_cmd(series_path: Path | None, files: tuple[str, ...]) -> int:
    """add, then open $VISUAL/$EDITOR on the files."""
    from materialize.workspace import edit

    with _session(series_path, "edit") as ws:
        taken = edit.lower_changes_taken(ws, list(files))
        paths, _already = edit.add_files(ws, list(files))
        top = ws.load().top
    _say_lower_changes_taken(taken, top)
    before = {path: _read_or_none(path) for path in paths}
    failed = None
    try:
        edit.open_editor(paths)  # outside the lock: other commands (diff, refresh) may run meanwhile
    except MaterializeError as exc:  # the files stay added and as the editor left them, as quilt's do
        failed = exc
    changed = [path for path in paths if _read_or_none(path) != before[path]]
    if changed:
        _check_top_unmoved(series_path, top, changed)
    if failed is not None:
        raise MaterializeError(f"edit: {failed}; the files stay in {top} as it left them "
                               f"({', '.join(changed) or 'unchanged'}): look before you refresh") from None
    for path in paths:
        write(path)
    return 0


def _read_or_none(path: str) -> bytes | None:
    try:
        return Path(path).read_bytes()
    except OSError:
        return None


def _check_top_unmoved(series_path: Path | None, top: str | None, changed: list[str]) -> None:
    """After `edit`'s editor closed: when another command (pop, push, goto) moved the top meanwhile, the
    files it saved lie over another patch's, and the next refresh would record them in that patch.
    Nothing is written to a patch here: the files are copied under saved/ and the error says so."""
    try:
        with _session(series_path, "edit") as ws:
            now = ws.load(allow_pending=True).top
            if now == top:
                return
            kept = ws.saved_dir("edit")
            for path in changed:
                rel = Path(path).absolute().relative_to(ws.root.absolute())
                (kept / rel).parent.mkdir(parents=True, exist_ok=True)
                data = _read_or_none(path)
                if data is not None:
                    (kept / rel).write_bytes(data)
    except MaterializeError:  # busy or interrupted: not told here (the files stay as saved)
        return
    raise MaterializeError(
        f"edit: the top moved from {top} to {now or 'nothing applied'} while the editor was open: what you "
        f"saved in {', '.join(changed)} is meant for {top}, but now lies over {now or 'the upstream'}'s files "
        f"(a refresh would record it in {now or 'no patch'}); copies are in {kept}: `materialize goto {top} "
        "--force` (which sets work/'s changes aside under saved/ too), copy them back, then refresh")


def _report_refresh(plan: edit.RefreshPlan) -> None:
    if plan.elsewhere:
        write("not in this patch (changes of other patches, left to them; `materialize add` would make one this "
              "patch's):\n  "
              + "\n  ".join(plan.elsewhere), stderr=True)
    if plan.stray:
        write("on disk but in no patch (`materialize add` them to keep them):\n  " + "\n  ".join(plan.stray),
              stderr=True)
    if plan.markers:
        write("conflict markers (refresh refuses them):\n  " + "\n  ".join(plan.markers), stderr=True)


@command("refresh")
@series_option
@option("-f", "--force", action="store_true",
        help="also when the patch file was changed since it was pushed: what work/ holds overwrites the change")
@option("patch", nargs="?")
def refresh(series_path: Path | None, patch: str | None, force: bool) -> int:
    """Regenerate the top patch (or PATCH) from the workspace; unchanged hunks stay byte-identical."""
    from materialize.workspace import edit

    with _session(series_path, "refresh") as ws:
        plan = edit.refresh(ws, patch, force=force)
    _report_refresh(plan)
    if plan.kept:
        write(f"{plan.entry.path} was changed since it was pushed; kept as it was in {plan.kept}", stderr=True)
    write(f"Refreshed patch {plan.entry.name}" if plan.changed else f"Patch {plan.entry.name} is unchanged")
    return 0


@command("diff")
@series_option
@option("patch", nargs="?")
def diff(series_path: Path | None, patch: str | None) -> int:
    """Print the top patch (or PATCH) as refresh would write it (nothing is written)."""
    from materialize.workspace import edit

    with _session(series_path, "diff") as ws:
        state = ws.load()
        entry = edit.top_entry(ws, state) if patch is None else ws.series.find(patch)
        plan = edit.plan_refresh(ws, state, entry)
    sys.stdout.buffer.write(plan.new)
    sys.stdout.flush()
    _report_refresh(plan)
    return 0


@command("fold")
@series_option
@option("-p", dest="strip", type=int, default=1, show_default=True, help="strip level of PATCH_FILE")
@option("patch_file", type=existing_file)
def fold(series_path: Path | None, patch_file: Path, strip: int) -> int:
    """Apply PATCH_FILE to the workspace and add its files to the top patch (then refresh)."""
    from materialize.workspace import edit

    taken: list[tuple[str, str]] = []
    with _session(series_path, "fold") as ws:
        touched = edit.fold(ws, patch_file, strip, taken)
        top = ws.load().top
    for path in touched:
        write(path)
    _say_lower_changes_taken(taken, top, "fold")
    return 0


@command("rename")
@series_option
@option("-P", dest="patch", help="patch to rename (default: top)")
@option("new_name")
def rename(series_path: Path | None, new_name: str, patch: str | None) -> int:
    """Rename a patch (file and series entry; metadata kept)."""
    from materialize.workspace import edit

    with _session(series_path, "rename") as ws:
        entry = edit.rename(ws, new_name, patch)
    write(f"Patch is now {entry.spec.patch}")
    return 0


@command("delete")
@series_option
@option("-r", dest="remove_file", action="store_true", help="also remove the patch file (a copy goes to work/.materialize/saved/)")
@force_option
@option("patch", nargs="?")
def delete(series_path: Path | None, patch: str | None, remove_file: bool, force: bool) -> int:
    """Remove a patch from the series (the top is popped first)."""
    from materialize.workspace import edit

    with _session(series_path, "delete") as ws:
        deleted = edit.delete(ws, patch, remove_file=remove_file, force=force)
    if deleted.saved_to:
        write(f"saved unrefreshed changes to {deleted.saved_to}", stderr=True)
    _say_kept_pushed(deleted.kept_pushed)
    if deleted.kept:
        write(f"kept the patch file in {deleted.kept}", stderr=True)
    write(f"Removed patch {deleted.entry.name}")
    return 0


@command("move")
@series_option
@option("--after", required=True, help="the patch to place it after (0 = first)")
@option("patch")
def move(series_path: Path | None, patch: str, after: str) -> int:
    """Move an unapplied patch; refused (naming patch and hunk) when the series would stop applying."""
    from materialize.workspace import edit

    with _session(series_path, "move") as ws:
        edit.move(ws, patch, after)
    write(f"Moved {patch} after {after}")
    return 0


def _file_or_stdin(text: str) -> str:
    return text if text == "-" else str(existing_file(text))


@command("header")
@series_option
@option("-e", dest="edit_", action="store_true", help="edit the description in $EDITOR")
@option("--set", dest="set_from", type=_file_or_stdin, metavar="FILE",
        help="replace the description with this file ('-': stdin)")
@option("patch", nargs="?")
def header(series_path: Path | None, patch: str | None, edit_: bool, set_from: str | None) -> int:
    """Show (or edit / replace) a patch's description; the diff part is not touched."""
    from materialize.workspace import edit

    op = "header --set" if set_from is not None else "header -e" if edit_ else "header"
    with _session(series_path, op) as ws:
        state = ws.load()
        entry = edit.top_entry(ws, state) if patch is None else ws.series.find(patch)
        current = edit.header_of(entry.read())
        if set_from is not None:
            text = sys.stdin.buffer.read() if set_from == "-" else Path(set_from).read_bytes()
            edit.set_header(ws, text, entry)
            return 0
    if edit_:
        # The patch is the one named now, before the editor opens (outside the lock: a `pop` meanwhile
        # made "the top" another patch, whose whole header the text replaced), and it is written only
        # while its description is still the one the editor started from; else the text is kept.
        edited, failed = _edit_text(current)
        if failed is not None:  # never written: a killed or failing editor may have left half a text
            if edited is None:
                raise MaterializeError(f"header -e {entry.name}: {failed}; nothing was written") from None
            kept = _keep_edited_header(series_path, entry.name, edited)
            raise MaterializeError(f"header -e {entry.name}: {failed}; nothing was written, the text it left is "
                                   f"kept in {kept} (`materialize header --set {kept} {entry.name}` puts it in)")
        if edited is not None:
            _write_edited_header(series_path, op, entry.name, current, edited)
        return 0
    sys.stdout.buffer.write(current)
    return 0


def _write_edited_header(series_path: Path | None, op: str, name: str, before: bytes, edited: bytes) -> None:
    """Write the description ``header -e`` got back from the editor into patch ``name``, under the
    lock, only when its description is still ``before``; when anything refuses it (changed meanwhile,
    renamed, deleted, a busy or interrupted workspace) the text is kept and the error says where."""
    from materialize.workspace import edit

    try:
        with _session(series_path, op) as ws:
            edit.set_header_if_unchanged(ws, name, before, edited)
    except MaterializeError as exc:
        kept = _keep_edited_header(series_path, name, edited)
        error = MaterializeError(f"{exc}; the description you wrote is kept in {kept} (`materialize header --set "
                                 f"{kept} PATCH` puts it in)")
        error.exit_code = exc.exit_code
        raise error from None


def _keep_edited_header(series_path: Path | None, name: str, edited: bytes) -> Path:
    """``edited`` in ``work/.materialize/saved/<stamp>-header/NAME.txt``, else (no workspace to put it
    in, or it cannot be written) in a new file of the temporary folder."""
    from materialize.workspace.session import find_series
    from materialize.workspace.state import Workspace

    try:
        path = Workspace.open(find_series(series_path)).saved_dir("header") / f"{name}.txt"
        path.write_bytes(edited)
        return path
    except (MaterializeError, OSError):
        import tempfile

        fd, other = tempfile.mkstemp(prefix=f"materialize-header-{name}-", suffix=".txt")
        with open(fd, "wb") as handle:
            handle.write(edited)
        return Path(other)


def _edit_text(text: bytes) -> tuple[bytes | None, MaterializeError | None]:
    """``text`` as $VISUAL/$EDITOR left it (None when it came back unchanged: nothing to write), and
    the editor's failure, if it failed (the text is then only to be kept, never written)."""
    from materialize.workspace import edit
    from materialize.workspace.diffscript import scratch_dir, scratch_write

    failed = None
    with scratch_dir("materialize-header-", "the description to edit") as tmp:
        path = tmp / "description.txt"
        scratch_write(path, text, "the description to edit")
        try:
            edit.open_editor([str(path)])
        except MaterializeError as exc:
            failed = exc
        try:
            edited = path.read_bytes()
        except OSError as exc:  # the editor removed or replaced it by a folder
            raise MaterializeError(f"header -e: the editor left no {path} to read ({exc.strerror}); nothing was "
                                   "written") from None
    return (edited if edited != text else None), failed


@command("recover")
@series_option
@option("--rollback", dest="mode", action="store_const", const="rollback",
        help="restore every file to before the operation")
@option("--resume", dest="mode", action="store_const", const="resume", help="restore, then run the operation again")
def recover(series_path: Path | None, mode: str | None) -> int:
    """Deal with an operation that was interrupted half-way (see its journal)."""
    from materialize.workspace.journal import Journal
    from materialize.workspace.session import find_series

    series_path = find_series(series_path)
    with _session(series_path, "recover") as ws:  # under the lock: never a live command's journal
        pending = Journal.pending(ws.meta)
        if pending is None:
            from materialize.workspace.session import rebase_state

            rebase = rebase_state(ws.meta)
            if rebase is not None and rebase.get("current") is None:  # killed between two of its steps
                if mode == "resume":
                    pending = {"op": "rebase", "args": ["--continue"]}
                else:
                    write("nothing to recover; a rebase was stopped between two patches: `materialize rebase "
                          "--continue` goes on (`recover --resume` does too), `--abort` restores everything")
                    return 0
            else:
                write("nothing to recover")
                return 0
        command = " ".join(["materialize", pending["op"], *pending["args"]])
        if mode is None:
            write(f"interrupted: `{command}`; use --rollback or --resume")
            return 1
        if Journal.pending(ws.meta) is not None:
            kept = _Keeper(ws)
            Journal.load(ws.meta).rollback(keep=kept)
            write(f"rolled back `{command}`")
            if kept.dir is not None:
                write(f"the files it had changed, as they were before the rollback (what it wrote, or what was "
                      f"typed since), are kept in {kept.dir}", stderr=True)
            given = ws.meta / "header-input.txt"  # `header --set`'s text, kept for --resume
            if mode == "rollback" and pending["op"] == "header" and given.exists():
                kept.dir = kept.dir or ws.saved_dir("recover")
                given.replace(kept.dir / given.name)
                write(f"the description `{command}` was given is kept in {kept.dir / given.name}", stderr=True)
        if mode == "resume":
            cmd = next((c for c in COMMANDS if c.name == pending["op"]), None)
            if cmd is None:
                raise MaterializeError(f"cannot resume `{command}`: rolled back instead")
            args = [*pending["args"], "--series", str(series_path)]
            return cmd.main(args, prog=f"materialize {cmd.name}")
    return 0


class _Keeper:
    """Copies, under ``saved/<time>-recover/``, the files a rollback is about to write over (the
    workspace's own records in work/.materialize/ excepted)."""

    def __init__(self, ws: Workspace) -> None:
        self.ws = ws
        self.dir: Path | None = None

    def __call__(self, path: Path, data: bytes) -> None:
        if self.ws.meta in path.parents:
            return
        root = self.ws.series.base_dir.parent
        rel = path.relative_to(root) if root in path.parents else Path(*path.parts[1:])
        self.dir = self.dir or self.ws.saved_dir("recover")
        (self.dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (self.dir / rel).write_bytes(data)


@command("export-git")
@series_option
@option("--repo", dest="repo_path", type=Path, help="repository (default: work/git/<target>)")
@option("target")
@option("branch")
@option("-f", "--force", action="store_true", help="replace BRANCH even when it holds commits no export wrote")
def export_git(series_path: Path | None, target: str, branch: str, repo_path: Path | None, force: bool) -> int:
    """Write BRANCH: the pinned base plus one commit per patch of TARGET (like gbp pq)."""
    from materialize.workspace import gitio

    with _session(series_path, "export-git") as ws:
        repo = repo_path or ws.root / "git" / target
        result = gitio.export_git(ws.series, ws.store, target, branch, repo, force=force)
    for name, commit in result.commits:
        write(f"{commit[:12]} {name}")
    write(f"{branch} in {repo}: base {result.base[:12]} + {len(result.commits)} patches")
    return 0


@command("import-git")
@series_option
@option("--repo", dest="repo_path", type=Path, help="repository (default: work/git/<target>)")
@option("target")
@option("--prune", action="store_true", help="drop the patches whose commit is not in BASE..TIP (files kept under "
                                          "work/.materialize/saved/)")
@option("rev_range", metavar="BASE..TIP")
def import_git(series_path: Path | None, target: str, rev_range: str, repo_path: Path | None, prune: bool) -> int:
    """Turn the commits BASE..TIP into TARGET's patch files and series entries."""
    from materialize.workspace import gitio

    with _session(series_path, "import-git") as ws:
        result = gitio.import_git(ws, target, rev_range, repo_path or ws.root / "git" / target, prune=prune)
    for label, names in (("updated", result.updated), ("new", result.created), ("unchanged", result.unchanged)):
        for name in names:
            write(f"{label:9s} {name}" + (f" (the file as it was: {result.kept[name]})" if name in result.kept else ""))
    for name in result.pruned:
        write(f"{'dropped':9s} {name} (not in {rev_range}; file kept in {result.saved_to})")
    for name in result.not_in_range:
        if name not in result.pruned:
            write(f"not in {rev_range}: {name} is left in the series (`--prune` drops it)", stderr=True)
    return 0


def _outcome_table(outcomes) -> None:
    rows = [[str(o.position), o.name, o.status, ", ".join(f"{k} {v}" for k, v in sorted(o.hunks.items())), o.detail]
            for o in outcomes]
    write("rebase\n" + columns(["#", "patch", "status", "hunks", "detail"], rows, right=frozenset({0})))


@command("rebase")
@series_option
@option("--to", dest="spec", help="new pin: pypi:NAME==VERSION (the file picked like the current pin's: a wheel "
                                   "with the same tags, else the sdist), pypi:NAME==VERSION:FILE, "
                                   "git+PATH_OR_URL@REV, a directory or an archive")
@option("--report", dest="report_only", action="store_true", help="only print the upstream-watch table; change nothing")
@option("-o", dest="report_file", type=Path, help="also write the report (markdown) here")
@option("--continue", dest="continue_", action="store_true", help="go on after resolving a conflict")
@option("--skip", action="store_true", help="drop the conflicting patch and go on")
@option("--abort", action="store_true", help="restore the series, its patch files and the workspace exactly")
@option("target", nargs="?")
def rebase(series_path: Path | None, target: str | None, spec: str | None, report_only: bool, report_file: Path | None,
           continue_: bool, skip: bool, abort: bool) -> int:
    """Move TARGET's pin to --to SPEC and carry the series across (git rebase habits)."""
    from materialize.workspace import rebase as rb

    if sum([continue_, skip, abort]) > 1:
        raise UsageError("--continue, --skip and --abort exclude each other")
    if not (continue_ or skip or abort) and (target is None or spec is None):
        raise UsageError("rebase needs TARGET and --to SPEC (or --continue/--skip/--abort)")
    op = "rebase --abort" if abort else "rebase --continue" if continue_ else "rebase --skip" if skip else \
        "rebase --report" if report_only else "rebase"
    with _session(series_path, op) as ws:
        if abort:
            for note in rb.abort(ws):
                write(note, stderr=True)
            write("rebase aborted; series, patches and workspace restored")
            return 0
        if continue_ or skip:
            outcomes = rb.proceed(ws, skip=skip)
        elif report_only:
            assert target is not None and spec is not None
            outcomes = rb.report(ws, target, spec)
            if report_file:
                report_file.write_text(rb.render_report(outcomes, target, spec))
            _outcome_table(outcomes)
            return 1 if any(o.status == "conflict" for o in outcomes) else 0
        else:
            assert target is not None and spec is not None
            outcomes = rb.start(ws, target, spec)
    _outcome_table(outcomes)
    write("rebase complete")
    return 0


COMMANDS: list[Command] = [rebase, export_git, import_git, push, pop, goto, top, applied, unapplied, series_cmd, new,
                          add, edit_cmd, refresh, diff, fold, rename, delete, move, header, recover]
