"""Gates against a loopback server replaying the recorded streams: wrong parser FAILS, parsed PASSES."""

from __future__ import annotations

import httpx
import pytest

from materialize.serve.gates import (
    assemble_stream,
    judge_tool_calls,
    parse_sse,
    run_gate,
    run_gates,
)

from .replay import FIXTURES, ReplayServer

MODEL = "qwen3.8-27b-tt"
ALL = [{"name": "models"}, {"name": "tool_call_stream"}, {"name": "tool_call_nonstream"}]


def test_parsed_tool_calls_pass_every_gate():
    with ReplayServer(MODEL, "qwen3_xml") as server:
        results = run_gates(server.url, MODEL, ALL, timeout_s=10)
    assert [r.name for r in results] == ["models", "tool_call_stream", "tool_call_nonstream"]
    assert all(r.passed for r in results), [r.details for r in results]
    stream = results[1]
    assert "get_weather" in stream.details[0] and "8 tool-call deltas" in stream.details[0]


def test_wrong_parser_empty_stream_fails_closed():
    with ReplayServer(MODEL, "hermes") as server:
        results = {r.name: r for r in run_gates(server.url, MODEL, ALL, timeout_s=10)}
    # The server is "healthy": it lists its model ...
    assert results["models"].passed
    # ... but the streamed tool call is empty and the non-streamed one leaks raw XML.
    assert not results["tool_call_stream"].passed
    assert results["tool_call_stream"].failures == 1
    assert "2 chunks, 0 content chars, 0 tool-call deltas" in results["tool_call_stream"].details[0]
    assert not results["tool_call_nonstream"].passed
    assert "raw <tool_call> in content" in results["tool_call_nonstream"].details[0]


def test_raw_xml_streamed_as_content_fails():
    with ReplayServer(MODEL, "no_parser") as server, httpx.Client(base_url=server.url, timeout=10) as client:
        result = run_gate(client, "tool_call_stream", MODEL, requests=3)
    assert (result.requests, result.failures) == (3, 3)
    assert "raw <tool_call> in content" in result.details[0]


def test_unlisted_model_and_dead_server_fail():
    with ReplayServer("some-other-name", "qwen3_xml") as server:
        results = run_gates(server.url, MODEL, ALL, timeout_s=10)
    assert not any(r.passed for r in results)
    assert "not listed" in results[0].details[0]
    # Nothing listening: a transport error is a failed request, never a skip.
    with ReplayServer(MODEL, "qwen3_xml") as server:
        url = server.url
    dead = run_gates(url, MODEL, [{"name": "models", "requests": 2}], timeout_s=2)[0]
    assert (dead.requests, dead.failures) == (2, 2)
    assert "ConnectError" in dead.details[0]


def test_repeats_and_rule_of_three_bound():
    with ReplayServer(MODEL, "qwen3_xml") as server:
        result = run_gates(server.url, MODEL, [{"name": "tool_call_nonstream", "requests": 6}], timeout_s=10)[0]
    assert (result.requests, result.failures) == (6, 0)
    assert result.record() == {"name": "tool_call_nonstream", "requests": 6, "failures": 0}
    assert result.upper_bound() == pytest.approx(0.5)
    assert len(result.latencies_s) == 6


def test_recorded_stream_assembles_to_one_call():
    events, done = parse_sse((FIXTURES / "qwen3_xml" / "stream.sse").read_text().splitlines())
    calls, content, deltas, finish = assemble_stream(events)
    assert done and deltas == 8 and finish == "tool_calls" and content == ""
    assert calls == [{"name": "get_weather", "arguments": '{"city": "Prague"}'}]


@pytest.mark.parametrize(
    ("calls", "content", "reason"),
    [
        ([], "", "no parsed tool_calls"),
        ([{"name": "get_weather", "arguments": '{"city": "Prague"}'}], "<tool_call>", "raw <tool_call>"),
        ([{"name": "rm_rf", "arguments": '{"x": 1}'}], "", "not an offered tool"),
        ([{"name": "get_weather", "arguments": '{"city": '}], "", "not JSON"),
        ([{"name": "get_weather", "arguments": "{}"}], "", "non-empty object"),
    ],
)
def test_judge_rejects_each_defect(calls, content, reason):
    ok, why = judge_tool_calls(calls, content, ["get_weather"])
    assert not ok and reason in why


def test_truncated_stream_without_done_fails():
    events, done = parse_sse(['data: {"choices": []}'])
    assert events == [{"choices": []}] and not done
