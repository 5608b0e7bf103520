"""``materialize report`` end to end on a real project: the page's content, its determinism, what it
reads and what it never does (apply, publish, fetch)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from .conftest import NAMES, STATUSES, Project


class Rows(HTMLParser):
    """The ``tr.patch`` rows' data attributes and every URL-bearing attribute of the page."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict[str, str]] = []
        self.urls: list[tuple[str, str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and "patch" in a.get("class", "").split():
            self.rows.append(a)
        for key in ("src", "href", "action", "srcset", "data", "poster"):
            if key in a:
                self.urls.append((tag, key, a[key]))


def page(project: Project, *args: str) -> str:
    project.run("report", *args)
    return (project.root / "build/report/index.html").read_text(encoding="utf-8")


def test_series_rows_statuses_hunks_and_offline_results(project: Project) -> None:
    html = page(project)
    parser = Rows()
    parser.feed(html)
    assert [r["data-patch"] for r in parser.rows] == ["0001-sdpa-streaming", "0002-chunk-plan",
                                                      "0003-scheduler-sync", "0004-docs"]
    assert {r["data-patch"]: r["data-status"] for r in parser.rows} == STATUSES
    assert all(r["data-state"] == "applied" for r in parser.rows)
    row1 = html.split('id="patch-0001-sdpa-streaming"', 1)[1].split("</tr>", 1)[0]
    # one hunk, applied at an offset; the flag and its banner; the offline arms from the recorded JSON
    assert re.search(r'class="num hunks">0/<span class="warn">1</span>/<span class="">0</span>', row1)
    assert "QWEN36_SDPA_STREAMING" in row1 and "QWEN36_SDPA_STREAMING engaged" in row1
    assert '<span class="ok" title="patched">2/2</span>' in row1
    assert '<span class="bad" title="control">1/2</span>' in row1
    assert "&lt;b&gt;not bold&lt;/b&gt;" in row1  # the why is text, never markup
    # evidence: a ledger line links to its record; an entry the ledger lacks is marked, not dropped
    assert '<a href="#rec-bench-runs-prod-jsonl-1">bench/runs/prod.jsonl:1</a>' in row1
    assert 'class="missing" title="not in the ledger given to the report">bench/runs/missing.jsonl:9' in row1
    row4 = html.split('id="patch-0004-docs"', 1)[1].split("</tr>", 1)[0]
    assert '<td class="offline"><span class="dim">no tests</span></td>' in row4
    assert "last run recorded in build/offline/results.json (--at patch, exit status 1); 1 problem(s)" in html
    # the diff is in the page, highlighted and escaped
    diff3 = html.split('id="diff-0003-scheduler-sync"', 1)[1].split("</tbody>", 1)[0]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in diff3 and '<div class="hl">' in diff3
    assert "<script>alert(1)" not in html


def test_evidence_groups_validity_and_bounds(project: Project) -> None:
    html = page(project)
    evidence = html.split('<section id="evidence">', 1)[1].split("</section>", 1)[0]
    assert "0/256 =&gt; rate &lt; 1.17% at 95% (rule of three)" in evidence
    assert "1/32 =&gt; rate in [0.08%, 16.22%] at 95% (Clopper-Pearson)" in evidence
    assert "banner &#39;QWEN36_SDPA_STREAMING engaged&#39; was not seen" in evidence
    assert "materialization_id 0123456789ab is not prefix 1" in evidence
    assert "series_prefix: required key is missing" in evidence
    # grouped by id: upstream (prefix 0) first, then prefix 1, then the id no prefix has
    groups = re.findall(r'<div class="group" id="mid-([0-9a-z-]+)">', evidence)
    assert len(groups) == 3 and "0123456789abcdef" in groups
    assert "prefix 0 (upstream alone)" in evidence.split('<div class="group"')[1]
    assert "1/1 valid" in evidence and "0/1 valid" in evidence and "1/3 valid" in evidence
    assert evidence.count('class="record invalid"') == 3  # the count `runs validate` reports
    proc = project.run("runs", "validate", check=False)
    assert "2 valid, 3 invalid record(s)" in proc.stdout, proc.stdout + proc.stderr


def test_bisect_chart_and_log(project: Project) -> None:
    html = page(project)
    bisect = html.split('<section id="bisect">', 1)[1].split("</section>", 1)[0]
    assert '<svg xmlns="http://www.w3.org/2000/svg" id="bisect-chart"' in bisect
    assert len(re.findall(r'<rect class="bar( best)?" ', bisect)) == 4  # culprit candidates 1..4
    assert '<rect class="bar best" ' in bisect  # the most likely culprit is marked
    assert "observe 3 --requests 32 --failures 3" in bisect
    assert "0/64 =&gt; rate &lt; 4.68% at 95% (rule of three)" in bisect


def test_serving_plans_and_their_diff(project: Project) -> None:
    html = page(project)
    serving = html.split('<section id="serving">', 1)[1].split("</section>", 1)[0]
    assert 'id="plan-prod"' in serving and 'id="plan-prefix"' in serving
    prod = serving.split('id="plan-prod"', 1)[1].split('<div class="plan"', 1)[0]
    assert "<code>QWEN36_SDPA_STREAMING=1</code>" in prod
    # mounts from serve's content-addressed sources folder, as `serve plan` derives them
    assert re.search(r"<code>/var/lib/materialize/serve/sources/[0-9a-f]{16}-overlay/tt-metal/models/attention.py</code>"
                     r" &rarr; <code>/opt/tt/models/attention.py</code> \(ro\)", prod)
    # the difference between the two plans, as `serve diff` computes it
    diff = serving.split('<h3 class="plan-diff">prefix &rarr; prod</h3>', 1)[1]
    for line in ('<span class="add">+ env QWEN36_SDPA_STREAMING=1</span>',
                 '<span class="del">- option --enable-prefix-caching=</span>',
                 '<span class="add">+ option --max-num-seqs=8</span>',
                 '<span class="add">+ banner QWEN36_SDPA_STREAMING=QWEN36_SDPA_STREAMING engaged</span>'):
        assert line in diff

def test_same_inputs_same_bytes_and_timestamp_only_when_asked(project: Project) -> None:
    first = page(project)
    second = page(project)
    assert first == second
    umask = os.umask(0)
    os.umask(umask)
    assert (project.root / "build/report/index.html").stat().st_mode & 0o777 == 0o666 & ~umask
    assert "<time" not in first
    stamped = page(project, "--timestamp")
    assert re.search(r'<time id="generated">\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ</time>', stamped)


def test_self_contained_no_external_resources(project: Project) -> None:
    html = page(project)
    parser = Rows()
    parser.feed(html)
    for tag, key, url in parser.urls:
        assert url.startswith("#"), (tag, key, url)  # only in-page links; nothing to fetch
    assert "<link" not in html and "@import" not in html and "url(" not in html
    assert "default-src 'none'" in html


def test_report_never_publishes_and_reads_an_existing_output(project: Project) -> None:
    page(project)
    assert not (project.root / "build/materialized").exists()  # computed through the engine's cache only
    project.run("apply")
    latest = project.root / "build/materialized/latest"
    manifest = json.loads((latest / "manifest.json").read_text())
    target = latest.resolve()
    html = page(project, "--from-output", "build/materialized/latest")
    assert f'<code id="materialization-id">{manifest["id"]}</code>' in html
    assert "read from build/materialized/latest/manifest.json" in html
    assert latest.resolve() == target
    plan = project.run("serve", "plan", "prod", "--from-output", "build/materialized/latest", "--json").stdout
    digest = hashlib.sha256(plan.encode()).hexdigest()[:16]
    assert f"<code>serve/profiles/prod.yaml</code>; plan {digest}</small>" in html


def test_series_that_stops_applying_is_reported_not_fatal(project: Project) -> None:
    bad = project.root / "patches/plugin/0003-scheduler-sync.patch"
    bad.write_text(bad.read_text().replace("-    return not prefix_caching", "-    return maybe"))
    html = page(project)
    parser = Rows()
    parser.feed(html)
    states = {r["data-patch"]: r["data-state"] for r in parser.rows}
    assert states == {"0001-sdpa-streaming": "applied", "0002-chunk-plan": "applied",
                      "0003-scheduler-sync": "FAILED", "0004-docs": "not reached"}
    assert 'id="apply-error"' in html and "0003-scheduler-sync" in html


def test_missing_inputs_are_said_plainly(project: Project) -> None:
    (project.root / "build/offline/results.json").unlink()
    (project.root / "work/bisect/state.json").unlink()
    html = page(project, "--runs", "nowhere", "--profiles", "nothing")
    assert html.count("no recorded run") >= len(NAMES)
    assert 'id="no-bisect"' in html and 'id="no-records"' in html and 'id="no-profiles"' in html


def test_help_does_not_import_the_renderer(tmp_path: Path) -> None:
    code = ("import sys; from materialize.cli import main; rc = main(['--help']); "
            "print(sorted(m for m in ('jinja2', 'pygments.lexers', 'materialize.site', 'materialize.site.render') "
            "if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "report" in proc.stdout
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_metric_bisect_shows_samples_and_the_noise_band(project: Project) -> None:
    from materialize.bisect import session
    from materialize.bisect.state import StateStore

    state = session.start(series=str(project.series), n_patches=4, good=0, bad=4, metric="makespan",
                          threshold_pct=1.0)
    samples = {0: [100.0, 100.4, 99.8, 100.1], 4: [103.0, 103.2, 102.9, 103.1], 2: [100.2, 99.9, 100.3, 100.0]}
    for position, values in samples.items():
        session.observe(state, position, source="run", samples=values)
    store = StateStore(project.root / "work")
    store.reset()
    store.save(state)
    html = page(project)
    bisect = html.split('<section id="bisect">', 1)[1].split("</section>", 1)[0]
    assert "metric makespan (lower is better, band ±1%)" in bisect
    chart = bisect.split('id="bisect-chart"', 1)[1].split("</svg>", 1)[0]
    assert len(re.findall(r"<circle ", chart)) == 12
    assert len(re.findall(r'<circle class="sample good"', chart)) == 4
    assert len(re.findall(r'<circle class="sample bad"', chart)) == 4
    band = re.search(r'<rect class="band" x="\d+" y="([\d.]+)" width="\d+" height="([\d.]+)"><title>([^<]*)</title>', chart)
    assert band and float(band.group(2)) > 0
    assert band.group(3) == "noise band: good end&#x27;s median ± 1%"
    assert "sample 2 --values 100.2,99.9,100.3,100.0" in bisect


def test_plan_hash_is_the_one_serve_plan_prints(project: Project) -> None:
    html = page(project)
    for profile in ("prod", "prefix"):
        plan = project.run("serve", "plan", profile, "--json").stdout
        digest = hashlib.sha256(plan.encode()).hexdigest()[:16]
        assert f'<code>serve/profiles/{profile}.yaml</code>; plan {digest}</small>' in html


def test_offline_results_of_another_series_are_not_shown(project: Project) -> None:
    path = project.root / "build/offline/results.json"
    data = json.loads(path.read_text())
    data["series"] = str(project.root / "series/other.yaml")
    path.write_text(json.dumps(data))
    html = page(project)
    assert "no recorded run of this series (build/offline/results.json is a run of series/other.yaml)" in html
    assert '<span class="ok" title="patched">' not in html


def test_an_output_of_another_series_is_named(project: Project) -> None:
    project.run("apply")
    other = project.root / "series/copy.yaml"
    other.write_text(project.series.read_text())
    html = page(project, "--series", "series/copy.yaml", "--from-output", "build/materialized/latest")
    assert "NOTE: that output is of series/default.yaml, not of this series" in html


def test_bisect_bound_counts_exit_code_failures(project: Project) -> None:
    """A position whose runs only said "failed" (exit codes) gets a bound that counts those failures,
    the same sentence ``bisect status`` prints, never a rule-of-three bound from the passing runs."""
    from materialize.bisect import session
    from materialize.bisect.state import StateStore

    store = StateStore(project.root / "work")
    state = store.load()
    for failures in (0, 0, 1, 0):
        session.observe(state, 1, source="run", requests=32, failures=failures, censored=failures > 0)
    store.save(state)
    html = page(project)
    bisect = html.split('<section id="bisect">', 1)[1].split("</section>", 1)[0]
    assert "1/4 runs of 32 failed =&gt; rate in [" in bisect
    assert "0/96 =&gt;" not in bisect  # the old bound: the passing runs alone


@pytest.mark.parametrize("change", ["patch", "earlier-patch", "tests", "pin"])
def test_offline_results_of_other_code_are_stale(project: Project, change: str) -> None:
    """Results name the series by path only: a patch edited (or an earlier one, which changes the
    prefix its arms ran on), a test edited or a pin moved after the run showed its green cells as
    if they were about the code on disk now."""
    import yaml

    if change == "patch":  # the run recorded position 1's arms: an edit of that patch
        target = project.root / "patches" / "tt-metal" / "0001-sdpa-streaming.patch"
        target.write_bytes(b"Edited description.\n" + target.read_bytes())
    elif change == "earlier-patch":  # a patch inserted before it: position 1's prefix is other code now
        data = yaml.safe_load(project.series.read_text())
        (project.root / "patches" / "tt-metal" / "0000-first.patch").write_text(
            "--- a/NEW\n+++ b/NEW\n@@ -0,0 +1 @@\n+new\n")
        data["patches"].insert(0, {"patch": "tt-metal/0000-first.patch", "target": "tt-metal"})
        project.series.write_text(yaml.safe_dump(data, sort_keys=False))
    elif change == "tests":
        tests = project.root / "ast_tests" / "test_0001.py"
        tests.parent.mkdir(exist_ok=True)
        tests.write_text((tests.read_text() if tests.exists() else "") + "\n# edited\n")
    else:
        shutil.copytree(project.root / "upstream" / "tt-metal", project.root / "upstream" / "tt-metal-next")
        data = yaml.safe_load(project.series.read_text())
        data["targets"]["tt-metal"]["pin"]["path"] = "../upstream/tt-metal-next"
        project.series.write_text(yaml.safe_dump(data, sort_keys=False))
    html = page(project)
    assert "stale" in html
    assert '<span class="ok" title="patched">' not in html
