import json
import multiprocessing
import os

import pytest

from materialize.engine import materialize
from materialize.errors import MaterializeError
from materialize.output import settle, verify_clean, write_output
from materialize.series import load_series

BASE = {"pkg/mod.py": "X = 1\n", "pkg/other.py": "Y = 2\n", "bin/tool": "#!/bin/sh\n"}


def series_with_two_patches(builder):
    b = builder(BASE)
    b.add_patch("0001-x", {"pkg/mod.py": "X = 10\n"})
    b.add_patch("0002-add", {"pkg/added.py": "Z = 3\n", "pkg/other.py": None})
    return load_series(b.write())


def test_full_output_and_manifest(builder, tmp_path):
    m = materialize(series_with_two_patches(builder))
    out = write_output(m, tmp_path / "out")
    assert (out / "plugin" / "pkg" / "mod.py").read_text() == "X = 10\n"
    assert not (out / "plugin" / "pkg" / "other.py").exists()
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["id"] == m.id
    assert manifest["targets"]["plugin"]["changed"] == ["pkg/added.py", "pkg/mod.py"]
    assert manifest["targets"]["plugin"]["deleted"] == ["pkg/other.py"]
    assert [p["name"] for p in manifest["patches"]] == ["0001-x", "0002-add"]
    assert all(len(p["sha256"]) == 64 for p in manifest["patches"])
    assert verify_clean(out) == []
    assert oct(out.stat().st_mode & 0o777) == "0o755"


def test_manifest_keys_are_sorted_at_every_level(builder, tmp_path):
    """The manifest is the same bytes for the same materialization: every object's keys in sorted
    order, one line per patch and per target (patches are written without re-sorting them)."""
    m = materialize(series_with_two_patches(builder))
    text = (write_output(m, tmp_path / "out") / "manifest.json").read_text()
    for line in text.splitlines():
        body = line.strip().rstrip(",")
        if body.startswith("{") and body.endswith("}"):  # a patch's line
            assert body == json.dumps(json.loads(body), sort_keys=True), body


def test_overlay_holds_only_touched_files(builder, tmp_path):
    m = materialize(series_with_two_patches(builder))
    out = write_output(m, tmp_path / "ov", overlay=True)
    files = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert files == ["manifest.json", "plugin/pkg/added.py", "plugin/pkg/mod.py"]


def test_default_location_and_latest_link(builder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    m = materialize(series_with_two_patches(builder))
    out = write_output(m)
    assert out == (tmp_path / "build" / "materialized" / m.id)
    assert os.readlink(tmp_path / "build" / "materialized" / "latest") == m.id
    assert write_output(m) == out  # second publish of the same code is a no-op


def test_refuses_to_replace_a_foreign_directory(builder, tmp_path):
    m = materialize(series_with_two_patches(builder))
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep me")
    with pytest.raises(MaterializeError, match="not a materialize output"):
        write_output(m, foreign)
    assert (foreign / "precious.txt").read_text() == "keep me"


def test_interrupted_publish_keeps_previous_output(builder, tmp_path, monkeypatch):
    series = series_with_two_patches(builder)
    out = write_output(materialize(series, upto=1), tmp_path / "out")
    before = (out / "manifest.json").read_text()

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("materialize.output._checkout_full", killed)
    monkeypatch.setattr("materialize.output._plan", lambda *_args: None)  # the fresh build, not in place
    with pytest.raises(KeyboardInterrupt):
        write_output(materialize(series), tmp_path / "out")
    assert (out / "manifest.json").read_text() == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")] == []


def _publish(series_path: str, out: str, queue) -> None:
    try:
        m = materialize(load_series(series_path))
        queue.put(("ok", m.id, str(write_output(m, __import__("pathlib").Path(out)))))
    except Exception as exc:  # reported to the parent, which fails the test
        queue.put(("error", repr(exc), ""))


def test_two_runs_at_once_do_not_corrupt(builder, tmp_path):
    series = series_with_two_patches(builder)
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_publish, args=(str(series.path), str(tmp_path / "out"), queue)) for _ in range(3)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert {r[0] for r in results} == {"ok"}, results
    assert len({r[1] for r in results}) == 1
    assert (tmp_path / "out" / "plugin" / "pkg" / "added.py").read_text() == "Z = 3\n"


def test_sigkill_at_any_moment_leaves_old_output_or_new_never_half(builder, tmp_path):
    """A real kill -9 of the CLI while it publishes: the output is the old one or the new one, whole, or
    (killed in the milliseconds an in-place update holds it aside, see ``output._update_in_place``) not
    there at all, its folder aside under ``.upd-*`` for the next run to sweep: never a mix."""
    import signal
    import subprocess
    import sys
    import time

    files = {f"d{i // 100}/f{i}.txt": f"{i}\n" * 20 for i in range(3000)}
    b = builder(files)
    b.add_patch("0001-a", {"d0/f0.txt": "changed\n"})
    series = b.write()
    out = tmp_path / "out"
    write_output(materialize(load_series(series), upto=0), out)
    old_manifest = (out / "manifest.json").read_text()
    for delay in (0.2, 0.5, 0.9, 1.4):
        proc = subprocess.Popen([sys.executable, "-m", "materialize", "apply", "--series", str(series),
                                 "--out", str(out)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if not out.exists():  # killed while the update held the output aside: nothing half-done at `out`
            assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".upd-out-")], "no output, nothing aside"
            continue
        manifest = json.loads((out / "manifest.json").read_text())
        on_disk = sum(1 for p in (out / "plugin").rglob("*") if p.is_file())
        assert on_disk == 3000, (delay, on_disk)
        expected = "changed\n" if manifest["position"] == 1 else "0\n" * 20
        assert (out / "plugin" / "d0" / "f0.txt").read_text() == expected
        if manifest["position"] == 0:
            assert (out / "manifest.json").read_text() == old_manifest
    write_output(materialize(load_series(series)), out)  # the next run sweeps what the killed ones left
    settle()  # and the output it replaced is deleted in the background
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".old-", ".upd-"))) == []


@pytest.mark.parametrize("in_place", [False, True])
def test_a_full_disk_while_publishing_is_one_line_and_keeps_the_previous_output(builder, tmp_path, monkeypatch,
                                                                                in_place):
    """`apply --out` on a full disk died with a traceback (OSError from the copy); it is exit 1 naming the
    file now, with the previous output as it was."""
    import errno

    series = series_with_two_patches(builder)
    out = write_output(materialize(series, upto=1), tmp_path / "out")
    before = {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    full = tmp_path / "out" / "plugin" / "pkg" / "added.py"

    real_link, calls = os.link, []

    def no_space(src, dst, *args, **kwargs):  # the first new link fails; undoing it works
        calls.append(dst)
        if len(calls) == 1:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), str(full))
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr("os.link", no_space)
    if not in_place:
        monkeypatch.setattr("materialize.output._plan", lambda *_args: None)
    with pytest.raises(MaterializeError, match=r"publishing .*/out: .*: No space left on device; the previous output") as err:
        write_output(materialize(series), tmp_path / "out")
    assert err.value.exit_code == 1
    assert {str(p.relative_to(out)): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith((".tmp-", ".old-"))] == []


def test_a_latest_that_cannot_be_replaced_says_the_output_is_published(builder, tmp_path, monkeypatch):
    """build/materialized/latest made a folder by hand: the error said "the previous output is unchanged"
    (it was published) and left a .latest-PID link behind."""
    monkeypatch.chdir(tmp_path)
    m = materialize(series_with_two_patches(builder))
    (tmp_path / "build" / "materialized" / "latest").mkdir(parents=True)
    with pytest.raises(MaterializeError, match=r"is published, but .*latest (could not be pointed at it|is not a link)"):
        write_output(m)
    assert (tmp_path / "build" / "materialized" / m.id / "manifest.json").exists()
    assert not list((tmp_path / "build" / "materialized").glob(".latest-*"))


@pytest.mark.parametrize("manifest", ['{"manifest_version": 3, "name": "my extension"}', "[]", '{"id": "x"}',
                                      None])
def test_a_folder_with_someone_elses_manifest_json_is_never_replaced(builder, tmp_path, manifest):
    """Any folder holding a manifest.json that parsed as JSON counted as one of our outputs: `apply --out
    ~/src/my-extension` (a browser extension, a PWA: both keep a manifest.json) replaced the folder and
    its files were gone. Ours is a manifest we write, beside nothing but its targets' folders."""
    series = series_with_two_patches(builder)
    m = materialize(series)
    folder = tmp_path / "ext"
    if manifest is not None:
        folder.mkdir()
        (folder / "manifest.json").write_text(manifest)
    else:  # one of our outputs, with a file of the user's put beside it
        write_output(m, folder)
        m = materialize(series, upto=1)
    (folder / "src").mkdir()
    (folder / "src" / "main.js").write_text("precious\n")
    with pytest.raises(MaterializeError, match="not a materialize output"):
        write_output(m, folder)
    assert (folder / "src" / "main.js").read_text() == "precious\n"


def test_a_publish_sweeps_only_its_own_leftovers(builder, tmp_path):
    """`--out ~/myout` removed every `.tmp-*`, `.old-*` and `.upd-*` folder beside it: a user's
    `~/.old-config` went with no word. Only the temp folders of the same output are its leftovers."""
    b = builder({"f.txt": "a\n"})
    b.add_patch("0001-p", {"f.txt": "b\n"})
    m = materialize(load_series(b.write()))
    home = tmp_path / "home"
    home.mkdir()
    mine = [home / ".old-config", home / ".tmp-notes", home / ".upd-x", home / ".tmp-myout-keepme"]
    for folder in mine:
        folder.mkdir()
        (folder / "data").write_text("mine\n")
    leftover = home / ".tmp-myout-abc12_xy"  # what a killed publish of myout left (mkdtemp's shape)
    leftover.mkdir()
    write_output(m, home / "myout")
    assert all((folder / "data").read_text() == "mine\n" for folder in mine)
    assert not leftover.exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["link to /dev/zero", "fifo", "link to our own manifest"])
def test_a_manifest_json_that_is_not_a_regular_file_is_never_read(builder, tmp_path, kind):
    """The manifest.json of a folder at `--out` was read through any link and whatever it was: a link
    to /dev/zero grew memory until MemoryError, a fifo hung the publish. Only a regular file (not a
    link) is read; anything else makes the folder not ours, refused, and the folder is left alone."""
    series = series_with_two_patches(builder)
    m = materialize(series)
    ours = write_output(m, tmp_path / "ours")
    folder = tmp_path / "out"
    folder.mkdir()
    if kind == "fifo":
        os.mkfifo(folder / "manifest.json")
    else:
        (folder / "manifest.json").symlink_to("/dev/zero" if kind == "link to /dev/zero" else ours / "manifest.json")
    with pytest.raises(MaterializeError, match="not a materialize output"):
        write_output(m, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json"]


def test_an_out_that_is_a_symlink_is_refused_and_left_as_it_is(builder, tmp_path, monkeypatch):
    """`apply --out build/materialized/latest` replaced the `latest` link by a folder: every later
    default `apply` then failed ("latest could not be pointed at it: Is a directory"). A symlink at
    the output path is someone's pointer (ours or a deployment's): refused, never replaced."""
    series = series_with_two_patches(builder)
    monkeypatch.chdir(tmp_path)
    published = write_output(materialize(series))
    latest = published.parent / "latest"
    assert latest.is_symlink()
    with pytest.raises(MaterializeError, match="latest is a symlink"):
        write_output(materialize(series, upto=1), latest)
    assert latest.is_symlink() and os.readlink(latest) == published.name
    assert write_output(materialize(series, upto=1)).is_dir()  # and the default publish still points it
    assert os.readlink(latest) != published.name


def test_what_a_run_killed_while_pointing_latest_or_rewriting_a_cache_entry_left_is_swept(builder, tmp_path,
                                                                                         monkeypatch):
    """A kill between making `.latest-<pid>` and renaming it over `latest`, or while a tampered cache
    entry was rewritten (`files/r/xx/.tmp-<pid>-<thread>-<name>`), left those files for good: nothing
    swept them. The next default publish sweeps dead runs' `.latest-*`, and gc dead runs' cache temps;
    a live run's are kept (gc's prune took a temp with one link for an unused entry and deleted it
    under the run about to rename it: pathlib's "*" matches dot files)."""
    import subprocess
    import sys

    from materialize.filecache import FileCache
    from materialize.store import Store

    series = series_with_two_patches(builder)
    monkeypatch.chdir(tmp_path)
    published = write_output(materialize(series))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True).stdout.strip()
    root = published.parent
    (root / f".latest-{dead}").symlink_to(published.name)
    (root / f".latest-{os.getpid()}x").symlink_to(published.name)  # not a pid: not ours to judge
    fan = FileCache(Store.open()).root / "r" / "00"
    fan.mkdir(parents=True, exist_ok=True)
    (fan / f".tmp-{dead}-1-0000").write_bytes(b"half")
    live = fan / f".tmp-{os.getppid()}-1-0001"
    live.write_bytes(b"being written")
    write_output(materialize(series, upto=1))
    assert not (root / f".latest-{dead}").is_symlink()
    assert (root / f".latest-{os.getpid()}x").is_symlink()
    from materialize.cli import main

    assert main(["gc", "--keep", "5"]) == 0
    assert not (fan / f".tmp-{dead}-1-0000").exists() and live.exists()


@pytest.mark.parametrize("kind", ["file", "empty-folder"])
def test_a_latest_that_is_not_a_link_is_never_replaced(builder, tmp_path, monkeypatch, kind):
    """`latest` is a link we make; a file of that name (build/materialized a checkout's link to a folder
    of the user's, where a `latest` of theirs sits) was replaced by our link and its bytes were gone;
    an empty folder was replaced too. Either is kept, and the error says the output is published."""
    monkeypatch.chdir(tmp_path)
    m = materialize(series_with_two_patches(builder))
    latest = tmp_path / "build" / "materialized" / "latest"
    latest.parent.mkdir(parents=True)
    if kind == "file":
        latest.write_text("the user's notes\n")
    else:
        latest.mkdir()
    with pytest.raises(MaterializeError, match=r"is published, but .*latest.* is not a link"):
        write_output(m)
    assert (latest.read_text() == "the user's notes\n") if kind == "file" else latest.is_dir()
    assert (tmp_path / "build" / "materialized" / m.id / "manifest.json").exists()
    assert not list(latest.parent.glob(".latest-*"))
