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
