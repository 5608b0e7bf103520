import os
import time

from materialize.cli import main
from materialize.engine import materialize
from materialize.output import write_output
from materialize.series import load_series


def test_gc_keeps_newest_and_latest(builder, tmp_path, monkeypatch):
    b = builder({"f.txt": "a\n"})
    for i in range(3):
        b.add_patch(f"000{i + 1}-p", {"f.txt": f"v{i}\n"})
    series = load_series(b.write())
    monkeypatch.chdir(tmp_path)
    made = []
    for upto in (1, 2, 3, 0):
        made.append(write_output(materialize(series, upto=upto)))
        time.sleep(0.05)
    os.utime(made[-1] / "manifest.json", (0, 0))  # `latest` is the oldest by time: still kept
    assert main(["gc", "--keep", "1", "--dry-run"]) == 0
    assert all(p.exists() for p in made)
    assert main(["gc", "--keep", "1"]) == 0
    assert [p.exists() for p in made] == [False, False, True, True]
    assert os.readlink(tmp_path / "build" / "materialized" / "latest") == made[-1].name
    from materialize.store import Store

    store = Store.open()
    store.links_of(materialize(series).trees[next(iter(series.spec.targets))])  # a memo, as a link check leaves
    assert (store.root / "links").is_dir()
    assert main(["gc", "--keep", "1"]) == 0
    assert not (store.root / "links").exists(), "gc leaves no memo of the trees' links behind"


def test_gc_waits_for_a_publish_in_progress(builder, tmp_path, monkeypatch):
    """gc chose what to remove, then an apply re-used an old output and pointed `latest` at it, and gc
    removed it anyway: `latest` named nothing. gc now holds the publishers' lock over its choice and
    the removal."""
    import threading

    from materialize.locking import exclusive

    b = builder({"f.txt": "a\n"})
    for i in range(2):
        b.add_patch(f"000{i + 1}-p", {"f.txt": f"v{i}\n"})
    series = load_series(b.write())
    monkeypatch.chdir(tmp_path)
    old = write_output(materialize(series, upto=1))
    time.sleep(0.05)
    write_output(materialize(series, upto=2))
    root = tmp_path / "build" / "materialized"
    done = threading.Event()
    with exclusive(str(root / ".materialize-output.lock")):  # an apply publishing, from gc's view
        worker = threading.Thread(target=lambda: (main(["gc", "--keep", "1"]), done.set()))
        # another thread of this process: the re-entrant lock is per thread, so gc must wait
        worker.start()
        time.sleep(0.5)
        assert not done.is_set() and old.exists()
        tmp = root / ".latest-x"
        os.symlink(old.name, tmp)
        os.replace(tmp, root / "latest")  # the apply re-used the old output
    worker.join(30)
    assert done.is_set()
    assert old.exists() and os.readlink(root / "latest") == old.name


def test_gc_never_removes_a_folder_that_is_not_one_of_our_outputs(builder, tmp_path, monkeypatch):
    """gc counted any folder holding a manifest.json as an output: a browser extension kept under
    build/materialized (its own manifest.json) was deleted by `gc --keep 0`, as was one of our outputs
    beside which the user had put a file, and any `.tmp-*` folder. write_output refuses to replace
    either (output.replaceable); gc now keeps them too, and sweeps only the leftovers it names."""
    b = builder({"f.txt": "a\n"})
    b.add_patch("0001-p", {"f.txt": "v\n"})
    series = load_series(b.write())
    monkeypatch.chdir(tmp_path)
    ours = write_output(materialize(series, upto=0), tmp_path / "build" / "materialized" / "ours")
    write_output(materialize(series))
    root = tmp_path / "build" / "materialized"
    ext = root / "ext"
    ext.mkdir()
    (ext / "manifest.json").write_text('{"manifest_version": 3, "name": "mine"}')
    (ext / "background.js").write_text("important\n")
    (ours / "NOTES.txt").write_text("mine\n")
    mine = root / ".tmp-mine"
    mine.mkdir()
    (mine / "keep").write_text("x\n")
    killed = root / ".gc-abcd_123"  # what a gc killed mid-removal leaves
    (killed / "old").mkdir(parents=True)
    assert main(["gc", "--keep", "0"]) == 0
    assert (ext / "background.js").read_text() == "important\n"
    assert (ours / "NOTES.txt").read_text() == "mine\n"
    assert (mine / "keep").exists()
    assert not killed.exists()
