"""Git round-trips, the ``gbp pq`` way: a target's series as a branch, and commits back into patches.

``export-git`` writes the pinned base as one commit and each patch of the target as one commit on top
(author, date and message from the patch header, plus a ``Materialize-Patch:`` trailer naming the
file). The commits are built in the store, whose trees the engine already holds, and fetched into the
user's repository in one ``git fetch``. Same series, same commit ids: committer = author.

``import-git`` turns ``BASE..TIP`` back into patch files and series entries. A commit that carries the
trailer updates that patch in place through ``diffgen``, so an unchanged patch comes back byte for
byte and a changed one changes only where its commit changed; other commits become new patches.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import git

from materialize.engine import materialize
from materialize.errors import MaterializeError, SeriesError, UnsafePathError
from materialize.patching import parse_patch
from materialize.patching.tree import apply_to_tree
from materialize.series import PatchEntry, Series, check_patch_file, encode_patch, patch_name
from materialize.store import REGULAR, Store
from materialize.workspace import mailheader, patchtext
from materialize.workspace.diffgen import FileChange, regenerate
from materialize.workspace.journal import Journal
from materialize.workspace.seriesedit import SeriesDoc
from materialize.workspace.state import Workspace

EXPORT_REF = "refs/materialize/export/"


@dataclass
class ExportResult:
    branch: str
    base: str
    commits: list[tuple[str, str]] = field(default_factory=list)  # (patch name, commit id)


def _git_env(desc: mailheader.Description) -> dict[str, str]:
    name, mail = _split_author(desc.author)
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": mail, "GIT_AUTHOR_DATE": desc.date,
            "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": mail, "GIT_COMMITTER_DATE": desc.date}


def _split_author(author: str) -> tuple[str, str]:
    m = re.match(r"^\s*(.*?)\s*<([^>]*)>\s*$", author)
    return (m.group(1), m.group(2)) if m else (author.strip(), "")


def _target_chain(store: Store, tip: str, count: int) -> list[str]:
    """The engine's commits for one target, oldest first (parents chain = series order)."""
    out = store.git("rev-list", "--first-parent", f"--max-count={count}", tip).decode().split()
    return list(reversed(out))


def export_git(series: Series, store: Store, target: str, branch: str, repo_path: Path, *,
               force: bool = False) -> ExportResult:
    """Write ``branch`` in ``repo_path`` (created when missing): base commit plus one commit per patch.

    An existing ``branch`` is replaced only when its tip is a commit the store holds (one of our exports:
    they are made there, and a user's own commits are not), or with ``force``: it may hold commits
    made with ``git rebase -i`` that were not imported yet (gbp pq refuses an existing branch, too)."""
    if target not in series.targets:
        raise MaterializeError(f"export-git: no target {target!r} in {series.path}")
    m = materialize(series, store=store)
    entries = [p for p in series.patches if p.target == target]
    chain = _target_chain(store, m.commits[target], len(entries)) if entries else []
    pin = m.pins[target]
    base_msg = f"{target}: pinned upstream\n\n{json.dumps(pin['pin'], sort_keys=True)}\n"
    epoch = mailheader.Description(mailheader.DEFAULT_AUTHOR, mailheader.DEFAULT_DATE, "", "")
    parent = store.git("commit-tree", m.base_trees[target], input=base_msg.encode(), env=_git_env(epoch)).decode().strip()
    result = ExportResult(branch=branch, base=parent)
    for entry, engine_commit in zip(entries, chain, strict=True):
        desc = mailheader.describe(patchtext.parse(entry.read(), source=str(entry.path), strip=entry.strip).header)
        message = desc.message + f"\n{mailheader.TRAILER}: {entry.spec.patch}\n"
        tree = store.tree_of(engine_commit)
        parent = store.git("commit-tree", tree, "-p", parent, input=message.encode(), env=_git_env(desc)).decode().strip()
        result.commits.append((entry.name, parent))
    ref = f"{EXPORT_REF}{target}"
    store.set_refs({ref: parent})
    repo_path.mkdir(parents=True, exist_ok=True)
    if not (repo_path / ".git").exists() and not (repo_path / "HEAD").exists():
        subprocess.run(["git", "init", "-q", str(repo_path)], check=True)
    tip = subprocess.run(["git", "-C", str(repo_path), "rev-parse", "-q", "--verify", f"refs/heads/{branch}^{{commit}}"],
                         capture_output=True, text=True).stdout.strip()
    if tip and not force and subprocess.run(["git", "--git-dir", str(store.git_dir), "cat-file", "-e", f"{tip}^{{commit}}"],
                                            capture_output=True).returncode != 0:
        raise MaterializeError(
            f"export-git: {branch} in {repo_path} holds commits that no export wrote (tip {tip[:12]}): import them "
            f"first (`materialize import-git {target} BASE..{branch} --repo {repo_path}`), or `--force` to replace "
            "the branch (its commits stay in that repository's reflog)")
    proc = subprocess.run(
        ["git", "-C", str(repo_path), "fetch", "-q", "--no-tags", str(store.git_dir), f"+{ref}:refs/heads/{branch}"],
        capture_output=True, text=True,
    )
    if proc.returncode != 0:
        raise MaterializeError(f"export-git: fetch into {repo_path} failed: {proc.stderr.strip()}")
    return result


# -- import ----------------------------------------------------------------------------------------
@dataclass
class ImportResult:
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    created: list[str] = field(default_factory=list)
    not_in_range: list[str] = field(default_factory=list)
    pruned: list[str] = field(default_factory=list)
    saved_to: str | None = None
    kept: dict[str, Path] = field(default_factory=dict)  # updated patch -> its file as it was, under saved/


def _raw_changes(repo: git.Repo, parent: str, commit: str) -> list[tuple[str, str, str, str, str, str | None]]:
    """(status, old mode, new mode, old blob, path, old path for renames) per changed file."""
    out = repo.git.diff_tree("-r", "-z", "-M", "--raw", "--no-commit-id", parent, commit, strip_newline_in_stdout=False)
    parts = out.split("\0")
    rows = []
    i = 0
    while i < len(parts) and parts[i]:
        meta = parts[i].lstrip(":").split()
        old_mode, new_mode, old_sha, _new_sha, status = meta
        if status.startswith(("R", "C")):
            rows.append((status[0], old_mode, new_mode, old_sha, parts[i + 2], parts[i + 1]))
            i += 3
        else:
            rows.append((status, old_mode, new_mode, old_sha, parts[i + 1], None))
            i += 2
    return rows


def _as_the_patch_moves(rows: list[tuple[str, str, str, str, str, str | None]], deleted: set[str | None],
                        created: set[str | None]) -> list[tuple[str, str, str, str, str, str | None]]:
    """``rows`` with each rename git found (``-M``) that the patch wrote as a deletion of its source and
    a creation of its destination split back into those two: ``refresh`` writes a file moved with ``mv``
    so, and an unchanged export came back as a rename (``updated``, and ``refresh`` then refused the
    applied patch). GNU patch reads both forms alike; the patch's bytes say which one it has, and a move
    new to the patch stays git's rename."""
    out = []
    for row in rows:
        status, old_mode, new_mode, sha, path, old_path = row
        if status == "R" and old_path in deleted and path in created:
            out.append(("D", old_mode, "000000", sha, old_path or path, None))
            out.append(("A", "000000", new_mode, "0" * 40, path, None))
        else:
            out.append(row)
    return out


def _blob(repo: git.Repo, commit: str, path: str) -> bytes | None:
    try:
        return (repo.commit(commit).tree / path).data_stream.read()
    except KeyError:
        return None


def _does_what_it_did(changes: list[FileChange], old_data: bytes, entry: PatchEntry) -> bool:
    """Whether the commit's changes are exactly what the old patch made of the same files (``prev``), with
    no mode change and no file the old patch touches left out."""
    touched = {name for pair in patchtext.touched(old_data, source=str(entry.path), strip=entry.strip)
               for name in pair if name}
    return {ch.path for ch in changes} | {ch.old_path for ch in changes if ch.old_path} == touched and all(
        ch.old_path is None and ch.cur == ch.prev and ch.old_mode == ch.new_mode for ch in changes)


def _previous(old_data: bytes | None, entry: PatchEntry | None, path: str, base: bytes | None) -> bytes | None:
    """What the old patch made of ``path`` from ``base`` (to recognise hunks the commit left alone)."""
    if old_data is None or entry is None:
        return None
    try:
        patchset = parse_patch(old_data, source=str(entry.path), strip=entry.strip)
    except MaterializeError:
        return None
    for fp in patchset.files:
        if fp.path == path:
            names = {n for n in (fp.old_path, fp.new_path) if n is not None}
            one = patchset._replace(files=(fp,))
            result = apply_to_tree(_OneFile(base, names), one, source=str(entry.path), reverse=entry.reverse)
            content = result.changes.get(path) if result.ok else None
            return content[1] if content else None
    return None


class _OneFile:
    """A tree holding only ``base``, under the old and new names of the one file being replayed."""

    def __init__(self, base: bytes | None, names: set[str]) -> None:
        self.base, self.names = base, names

    def get(self, path: str) -> tuple[str, bytes] | None:
        return (REGULAR, self.base) if self.base is not None and path in self.names else None

    def is_dir(self, path: str) -> bool:
        return False


def _next_number(series: Series) -> int:
    numbers = [int(m.group(1)) for p in series.patches if (m := re.match(r"^(\d+)-", p.name))]
    return max(numbers, default=0) + 1


def _slug(subject: str) -> str:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", subject).strip("-").lower()
    return slug[:50].rstrip("-") or "patch"


def patch_for_commit(repo: git.Repo, commit: git.Commit, old_entry: PatchEntry | None) -> bytes:
    """The patch text of one commit, keeping the old patch's bytes where the meaning is unchanged."""
    parent = commit.parents[0].hexsha
    subject, body, _trailers = mailheader.split_message(commit.message)
    author = f"{commit.author.name} <{commit.author.email}>"
    desc = mailheader.Description(author, mailheader.mail_date(commit.authored_datetime), subject, body)
    old_data = old_entry.read() if old_entry is not None and old_entry.path.exists() else None
    old = patchtext.parse(old_data, source=str(old_entry.path), strip=old_entry.strip) if old_data is not None and old_entry else None
    if old is not None and mailheader.describe(old.header) == desc:
        header = old.header
    else:
        header = mailheader.render(desc)
    changes: list[FileChange] = []
    rows = _raw_changes(repo, parent, commit.hexsha)
    if old is not None:  # the patch's own form of a move: a deletion and a creation where it wrote those
        rows = _as_the_patch_moves(rows, {sec.old_path for sec in old.sections if sec.new_path is None},
                                   {sec.new_path for sec in old.sections if sec.old_path is None})
    for status, old_mode, new_mode, _sha, path, old_path in rows:
        src = old_path or path
        base = _blob(repo, parent, src) if status != "A" else None
        cur = _blob(repo, commit.hexsha, path) if status != "D" else None
        changes.append(FileChange(
            path=path, old_path=old_path if status == "R" else None, base=base, cur=cur,
            prev=_previous(old_data, old_entry, path, base),
            old_mode=old_mode if status != "A" else None, new_mode=new_mode if status != "D" else None,
        ))
    strip = old_entry.strip if old_entry is not None else 1
    if old is not None and old_entry is not None and old_entry.reverse:
        # a `reverse: true` entry (quilt's -R): its hunks run the other way, so none can be kept. A commit
        # that does what the entry does, under the same description, leaves the file as it is; any other
        # is written forward, and import_git drops the flag (as refresh and a rebase do): the forward
        # diff under `reverse: true` ran backwards ('Reversed patch detected', or inverted where it applied)
        if header == old.header and _does_what_it_did(changes, old_data, old_entry):
            return old_data
        old = patchtext.PatchText(header, [], b"")
    if old is not None:
        old.header = header
        data = regenerate(old, changes, strip=strip, source=str(old_entry.path) if old_entry is not None else "<patch>")
    else:
        data = regenerate(None, changes, strip=strip, header=header)
    # a commit message that quotes a diff would be applied as part of the patch by the next push
    patchtext.check_description(header, data[len(header):], source=str(old_entry.path) if old_entry else "<patch>",
                                strip=strip, what=f"import-git: the message of commit {commit.hexsha[:12]}")
    return data


def import_git(ws: Workspace, target: str, rev_range: str, repo_path: Path, *, prune: bool = False) -> ImportResult:
    """Turn the commits of ``rev_range`` into the target's patches (in commit order) and series entries.

    Patches of the target whose commit is not in the range (removed in ``git rebase -i``) stay in the
    series unless ``prune``: then their entries go and their files move to work/.materialize/saved/.
    """
    series = ws.series
    if target not in series.targets:
        raise MaterializeError(f"import-git: no target {target!r} in {series.path}")
    repo = git.Repo(repo_path)
    try:
        commits = list(repo.iter_commits(rev_range, reverse=True, topo_order=True))
    except git.GitCommandError as exc:
        raise MaterializeError(f"import-git: cannot list {rev_range} in {repo_path}: {exc.stderr.strip()}") from None
    merges = [c.hexsha[:12] for c in commits if len(c.parents) != 1]
    if merges:
        raise MaterializeError(f"import-git: {rev_range} contains merges or root commits ({', '.join(merges)}); "
                               "a patch series is linear")
    by_file = {p.spec.patch: p for p in series.patches}
    result = ImportResult()
    planned: list[tuple[str, bytes, bool]] = []  # (series patch field, bytes, new?)
    number = _next_number(series)
    for commit in commits:
        _s, _b, trailers = mailheader.split_message(commit.message)
        named = [line.split(": ", 1)[1].strip() for line in commit.message.split("\n")
                 if line.startswith(f"{mailheader.TRAILER}: ")]
        if len(set(named)) > 1:  # `git rebase -i` squashed commits of several patches into one
            raise MaterializeError(
                f"import-git: {commit.hexsha[:12]} carries the {mailheader.TRAILER} trailers of {len(set(named))} "
                f"patches ({', '.join(sorted(set(named)))}): a squash of several patches' commits; nothing was "
                "written. Keep one trailer (the patch it becomes) and drop the others' entries with `delete`, "
                "or split the commit")
        rel = trailers.get(mailheader.TRAILER)
        entry = by_file.get(rel) if rel else None
        if entry is not None and entry.target != target:
            raise MaterializeError(f"import-git: {commit.hexsha[:12]} names {rel}, a patch of {entry.target}")
        if rel is None:
            rel = f"{target}/{number:04d}-{_slug(_s)}.patch"
            number += 1
        elif entry is None:  # a trailer names the file to write: someone else's commit may say ../../x
            where = f"import-git: {commit.hexsha[:12]}: Materialize-Patch: {rel!r}"
            try:
                check_patch_file(series.resolve(series.spec.patches_dir), rel, where)
            except SeriesError as exc:
                raise UnsafePathError(f"{exc} (the commit's trailer names the patch file it updates)") from None
        data = patch_for_commit(repo, commit, entry)
        planned.append((rel, data, entry is None))
    imported = {rel for rel, _d, _n in planned}
    result.not_in_range = [p.name for p in series.patches if p.target == target and p.spec.patch not in imported]
    gone = [p for p in series.patches if p.name in result.not_in_range] if prune else []
    if gone:
        state = ws.load()
        applied = [p.name for p in gone if p.position <= state.position]
        if applied:
            raise MaterializeError(f"import-git --prune: {', '.join(applied)} applied in {ws.root}; "
                                   f"`materialize goto {applied[0]}` then pop it first")
    patches_dir = series.resolve(series.spec.patches_dir)
    # the new series file, planned (and checked: render) before anything is written
    doc = SeriesDoc.load(series.path)
    for entry in gone:
        doc.remove(doc.index_of(entry.spec.patch))
    _place_entries(doc, target, [rel for rel, _d, _n in planned])
    for rel, text, is_new in planned:  # written forward (patch_for_commit): no longer reversed
        if not is_new and by_file[rel].reverse and by_file[rel].read() != text:
            doc.drop_field(doc.index_of(rel), "reverse")
    new_yaml = doc.render("import-git")
    _refuse_reordering_applied(ws, series, [item.get("name") or patch_name(item.get("patch")) for item in doc.patches])
    args = [target, rev_range, "--repo", str(Path(repo_path).absolute())] + (["--prune"] if prune else [])
    with Journal.run(ws.meta, "import-git", args) as journal:
        for rel, text, is_new in planned:
            path = patches_dir / rel
            name = Path(rel).stem
            data = encode_patch(path, text)  # a .patch.gz entry stays compressed (as refresh keeps it)
            if is_new:
                if path.exists() and path.read_bytes() != data:
                    raise MaterializeError(f"import-git: {path} exists but is not in the series; move it away first")
                result.created.append(name)
            elif path.read_bytes() == data or by_file[rel].read() == text:
                result.unchanged.append(name)
                continue
            else:
                result.updated.append(name)
                # the file may hold edits the commit does not (made by hand after the export): kept
                result.kept[name] = ws.keep_patch(by_file[rel], time.strftime("%Y%m%dT%H%M%SZ-import-git",
                                                                              time.gmtime()))
            journal.write(path, data)
        if gone:
            folder = time.strftime("%Y%m%dT%H%M%SZ-import-git-prune", time.gmtime())
            keep = ws.meta / "saved" / folder
            for entry in gone:
                if entry.path.exists():
                    ws.keep_entry(entry, folder)
                    journal.remove(entry.path)
                result.pruned.append(entry.name)
            result.saved_to = str(keep)
        if new_yaml != series.path.read_bytes():
            journal.write(series.path, new_yaml)
        ws.reload_series()  # inside: a series it would leave invalid is rolled back
    return result


def _refuse_reordering_applied(ws: Workspace, series: Series, names: list[str]) -> None:
    """The applied patches must stay the series' first entries, in their order: a commit inserted or moved
    below the top (``git rebase -i``) made the series disagree with work/, and every later push, pop and
    refresh refused ("the series changed under the workspace") while ``top``/``applied`` disagreed.
    Refused, naming how far to pop (as ``--prune`` refuses to drop an applied patch)."""
    state = ws.load()
    applied = [p.name for p in series.patches[: state.position]]
    if names[: len(applied)] == applied:
        return
    keep = 0
    while keep < len(applied) and names[keep] == applied[keep]:
        keep += 1
    moved = applied[keep:]
    to = series.patches[keep - 1].name if keep else "0"
    raise MaterializeError(
        f"import-git: the import changes the series below the top ({state.top}): the applied "
        f"{', '.join(moved)} would no longer be patch {keep + 1}{'' if len(moved) == 1 else f'..{len(applied)}'} "
        f"(a commit inserted before or moved among the applied ones) while work/ holds {'it' if len(moved) == 1 else 'them'} "
        f"applied; nothing was written. Pop {'it' if len(moved) == 1 else 'them'} first: `materialize goto {to}` "
        "(unrefreshed edits: refresh, or `--force` saves them), then import again and push")


def _place_entries(doc: SeriesDoc, target: str, order: list[str]) -> None:
    """Put the target's imported entries in commit order into the slots the target already uses."""
    items = list(doc.patches)
    slots = [i for i, item in enumerate(items) if item.get("target") == target and item.get("patch") in order]
    existing = {item.get("patch"): item for item in items}
    for rel in order:
        if rel not in existing:
            doc.insert(len(doc.patches), {"patch": rel, "target": target})
            existing[rel] = doc.patches[len(doc.patches) - 1]
    items = list(doc.patches)
    slots = [i for i, item in enumerate(items) if item.get("patch") in order]
    ordered = [existing[rel] for rel in order]
    for slot, item in zip(slots, ordered, strict=True):
        doc.patches[slot] = item
