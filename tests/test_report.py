"""The hunk reports' JSON, written column by column, is byte for byte what ``json.dumps`` writes: the
commit messages of cached prefixes and manifest.json must not depend on which encoder ran."""

from __future__ import annotations

import json
import random

import pytest

from materialize.report import HunkReport, PatchReport, hunks_json, with_hunks

ODD = ["plain.c", 'q"uote.c', "back\\slash.c", "tab\there", "new\nline", "caf\u00e9.c", "\u2603 snow",
       "surrogate-\udcff.c", "nul\x00byte", "ctl\x1f\x7f", "", "emoji \U0001f600"]


def random_hunks(seed: int, n: int = 300) -> list[HunkReport]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        header = f"@@ -{rng.randint(0, 10**6)},{rng.randint(0, 9)} +{rng.randint(0, 10**6)} @@"
        if rng.random() < 0.3:
            header += " " + rng.choice(ODD)
        out.append(HunkReport(rng.choice(ODD), header, rng.choice(["clean", "offset", "fuzz", "failed"]),
                              rng.randint(-500, 500), rng.randint(0, 3), rng.choice([None, 0, 7, 10**9])))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_arrays_are_json_dumps_of_the_tuples(seed):
    hunks = random_hunks(seed)
    assert hunks_json(hunks) == json.dumps(hunks)


@pytest.mark.parametrize("seed", range(5))
def test_objects_are_json_dumps_of_the_manifest_objects(seed):
    hunks = random_hunks(seed)
    objects = [{"file": h.file, "fuzz": h.fuzz, "header": h.header, "offset": h.offset, "status": h.status}
               for h in hunks]
    assert hunks_json(hunks, objects=True) == json.dumps(objects)


def test_no_hunks():
    assert hunks_json([]) == "[]" == hunks_json([], objects=True)


def test_a_report_is_json_dumps_of_its_data_even_when_a_name_looks_like_the_slot():
    hunks = random_hunks(9, 20)
    report = PatchReport(3, 'x "hunks": [] y', "plugin", "0" * 64, ['"hunks": []', "b"], hunks, 5, 2,
                         deleted=['a "hunks": []'])
    assert report.json_text() == json.dumps(report.to_json(), sort_keys=True)
    assert PatchReport.from_json(json.loads(report.json_text())) == report
    assert with_hunks({"a": 1, "hunks": None, "z": "\"hunks\": []"}, "[1]") == '{"a": 1, "hunks": [1], "z": "\\"hunks\\": []"}'


@pytest.mark.parametrize("seed", range(5))
def test_runs_of_rows_that_share_file_and_status_are_json_dumps_too(seed):
    """Long runs (a whole file's hunks clean) are written as one join each: the same bytes."""
    rng = random.Random(seed)
    hunks = []
    for _ in range(20):
        file, status = rng.choice(ODD), rng.choice(["clean", "offset", "fuzz", "failed"])
        offset, fuzz = rng.randint(-5, 5), rng.randint(0, 2)
        for _ in range(rng.randint(1, 60)):
            header = f"@@ -{rng.randint(0, 999)},7 +{rng.randint(0, 999)},7 @@" + rng.choice(["", " " + rng.choice(ODD)])
            hunks.append(HunkReport(file, header, status, offset, fuzz, rng.choice([None, 1, 10**9])))
    assert hunks_json(hunks) == json.dumps(hunks)
    objects = [{"file": h.file, "fuzz": h.fuzz, "header": h.header, "offset": h.offset, "status": h.status}
               for h in hunks]
    assert hunks_json(hunks, objects=True) == json.dumps(objects)
