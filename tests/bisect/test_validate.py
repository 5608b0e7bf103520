"""The declared degenerate-output checks and banner/flag matching, on their own."""

from __future__ import annotations

import pytest

from materialize.bisect.validate import banner_problems, degenerate_reason, output_problems
from materialize.ledger import parse_record


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("HT#" + "3" * 40, "repeats one character"),  # seed 003's invalidated benchmark output
        ("ab" * 20, "2-character pattern"),
        ("the the the the the the the the cat", "pattern"),
        ("yes maybe yes no yes sure yes ok yes fine yes", "one token makes up"),
        ("   ", "empty output"),
    ],
)
def test_degenerate_outputs(text: str, reason: str) -> None:
    assert reason in (degenerate_reason(text) or "")


@pytest.mark.parametrize(
    "text",
    ["391", "The capital of France is Paris; it has many museums.", '{"name": "get_weather", "arguments": {}}'],
)
def test_normal_outputs(text: str) -> None:
    assert degenerate_reason(text) is None


def _rec(**over):
    base = {
        "schema": 1,
        "materialization_id": "ab" * 8,
        "series_prefix": [],
        "host": "h",
        "time": "2026-11-29T10:00:00+00:00",
    }
    base.update(over)
    return parse_record(base)


def test_banner_matching_is_by_substring_of_log_lines() -> None:
    patches = [("0020-sdpa", "QWEN36_SDPA_STREAMING", "QWEN36_SDPA_STREAMING engaged")]
    good = _rec(flags={"QWEN36_SDPA_STREAMING": "1"}, banners_seen=["[w0] QWEN36_SDPA_STREAMING engaged (k=4)"])
    assert banner_problems(good, patches) == []
    off = _rec(flags={"QWEN36_SDPA_STREAMING": "0"})
    assert banner_problems(off, patches) == []
    missing = _rec(flags=["QWEN36_SDPA_STREAMING"])
    assert "was not seen" in banner_problems(missing, patches)[0]


def test_output_sha_is_computed_from_text_when_not_given() -> None:
    import hashlib

    sha = hashlib.sha256(b"391").hexdigest()
    assert output_problems(_rec(outputs=[{"name": "q", "text": "391", "expect_sha256": sha}])) == []
    assert "not the baseline" in output_problems(_rec(outputs=[{"name": "q", "text": "33", "expect_sha256": sha}]))[0]
