"""Gates against a loopback server answering like vLLM in front of the seeds' model: a wrong parser
FAILS, parsed answers PASS, a wrong answer FAILS, and a defect that shows only under concurrency is
caught because requests go out at the profile's concurrency."""

from __future__ import annotations

import json

import httpx
import pytest

from materialize.serve.gates import (
    PROMPTS,
    assemble_stream,
    describe,
    judge_tool_calls,
    run_gate,
    run_gates,
)

from .replay import FIXTURES, ReplayServer

MODEL = "qwen3.8-27b-tt"
ALL = [{"name": "models"}, {"name": "tool_call_stream"}, {"name": "tool_call_nonstream"}]
PRAGUE = PROMPTS[0]


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


def test_every_prompt_of_the_set_is_asked_and_its_answer_checked():
    with ReplayServer(MODEL, "qwen3_xml") as server:
        result = run_gates(server.url, MODEL, [{"name": "tool_call_nonstream", "requests": 12}], timeout_s=10)[0]
    assert (result.requests, result.failures) == (12, 0)
    assert result.record() == {"name": "tool_call_nonstream", "requests": 12, "failures": 0}
    assert result.upper_bound() == pytest.approx(0.25)
    assert "failure rate < 25.00% at 95% (rule of three, 0/12)" in describe(result)
    assert len(result.latencies_s) == 12


def test_defect_only_under_concurrency_passes_serially_and_fails_at_the_profiles_concurrency():
    """Seed 001: 1 of 32 concurrent requests got another request's answer; every serial one was right.
    A gate that checks "a tool call parsed" passes that; one that checks the answer at concurrency fails."""
    gate = {"name": "tool_call_stream", "requests": 48}
    with ReplayServer(MODEL, "qwen3_xml", stale_every=8, latency_s=0.02) as server:
        serial = run_gates(server.url, MODEL, [{**gate, "concurrency": 1}], timeout_s=10)[0]
        concurrent = run_gates(server.url, MODEL, [{**gate, "concurrency": 8}], timeout_s=10)[0]
    assert serial.passed, serial.details
    assert not concurrent.passed and concurrent.concurrency == 8
    wrong = [d for d in concurrent.details if "expected" in d]
    assert wrong and "at concurrency 8" in describe(concurrent), concurrent.details


def test_recorded_stream_assembles_to_one_call():
    events = [json.loads(block[len("data: "):]) for block in
              (FIXTURES / "qwen3_xml" / "stream.sse").read_text().split("\n\n")
              if block.startswith("data: {")]
    calls, content, deltas, finish = assemble_stream(events)
    assert deltas == 8 and finish == "tool_calls" and content == ""
    assert calls == [{"name": "get_weather", "arguments": '{"city": "Prague"}'}]


@pytest.mark.parametrize(
    ("calls", "content", "reason"),
    [
        ([], "", "no parsed tool_calls"),
        ([{"name": "get_weather", "arguments": '{"city": "Prague"}'}], "<tool_call>", "raw <tool_call>"),
        ([{"name": "rm_rf", "arguments": '{"x": 1}'}], "", "expected 'get_weather'"),
        ([{"name": "get_weather", "arguments": '{"city": '}], "", "not JSON"),
        ([{"name": "get_weather", "arguments": "{}"}], "", "non-empty object"),
        # A well-formed call with the wrong answer: a parse-only gate passed this (issue 14.4).
        ([{"name": "get_weather", "arguments": '{"city": "Oslo"}'}], "", "not the expected {'city': 'Prague'}"),
        ([{"name": "lookup_record", "arguments": '{"record_id": "R0000"}'}], "", "expected 'get_weather'"),
        ([{"name": "get_weather", "arguments": '{"city": "Prague"}'}] * 2, "", "2 tool calls, expected one"),
    ],
)
def test_judge_rejects_each_defect(calls, content, reason):
    ok, why = judge_tool_calls(calls, content, PRAGUE)
    assert not ok and reason in why


def test_truncated_stream_without_done_fails():
    """SSE framing is httpx-sse's; a stream that ends without [DONE] is a failure."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Truncated(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            body = (b'data: {"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "qwen3.8-27b-tt", '
                    b'"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "t", '
                    b'"type": "function", "function": {"name": "get_weather", '
                    b'"arguments": "{\\"city\\": \\"Prague\\"}"}}]}}]}\n\n')
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Truncated)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{httpd.server_address[1]}"
        with httpx.Client(base_url=url, timeout=10) as client:
            result = run_gate(client, "tool_call_stream", MODEL)
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert result.failures == 1 and "without [DONE]" in result.details[0]


# HTTP 200 is not an answer: a body that is not the completion asked for fails the request ----------

from .replay import model_answer, nonstream_body, stream_events  # noqa: E402

_ANSWER = model_answer(PRAGUE.text)
_GOOD = nonstream_body("qwen3_xml", _ANSWER, MODEL)
_EVENTS = [{**e, "model": MODEL} for e in stream_events("qwen3_xml", _ANSWER)]


def _sse(events, done=True):
    return "".join(f"data: {json.dumps(e)}\n\n" for e in events) + ("data: [DONE]\n\n" if done else "")


def _last(events, **changes):
    last = dict(events[-1])
    last["choices"] = [{**last["choices"][0], **changes}]
    return [*events[:-1], last]


def _nonstream(**changes):
    return {**_GOOD, **changes}


def _choice(**changes):
    return _nonstream(choices=[{**_GOOD["choices"][0], **changes}])


MALFORMED = {
    "nonstream: JSON served as text/html": ("tool_call_nonstream", httpx.Response(
        200, content=json.dumps(_GOOD), headers={"content-type": "text/html"}), "content type"),
    "nonstream: an error object beside the choices": ("tool_call_nonstream", httpx.Response(
        200, json=_nonstream(error={"message": "EngineCore died"})), "error"),
    "nonstream: object is an error": ("tool_call_nonstream", httpx.Response(
        200, json=_nonstream(object="error")), "object"),
    "nonstream: another model answered": ("tool_call_nonstream", httpx.Response(
        200, json=_nonstream(model="other-model")), "model"),
    "nonstream: two choices": ("tool_call_nonstream", httpx.Response(
        200, json=_nonstream(choices=_GOOD["choices"] * 2)), "choices"),
    "nonstream: cut by the length limit": ("tool_call_nonstream", httpx.Response(
        200, json=_choice(finish_reason="length")), "finish_reason"),
    "stream: last chunk lost, [DONE] still sent": ("tool_call_stream", httpx.Response(
        200, content=_sse(_EVENTS[:-1]), headers={"content-type": "text/event-stream"}), "finish_reason"),
    "stream: cut by the length limit": ("tool_call_stream", httpx.Response(
        200, content=_sse(_last(_EVENTS, finish_reason="length")), headers={"content-type": "text/event-stream"}),
        "length"),
    "stream: chunks from another model": ("tool_call_stream", httpx.Response(
        200, content=_sse([{**e, "model": "other-model"} for e in _EVENTS]),
        headers={"content-type": "text/event-stream"}), "model"),
    "stream: JSON served instead of events": ("tool_call_stream", httpx.Response(
        200, content=_sse(_EVENTS), headers={"content-type": "application/json"}), "text/event-stream"),
    "models: JSON served as text/plain": ("models", httpx.Response(
        200, content=json.dumps({"object": "list", "data": [{"id": MODEL}]}), headers={"content-type": "text/plain"}),
        "content type"),
    "models: an error beside the list": ("models", httpx.Response(
        200, json={"object": "list", "data": [{"id": MODEL}], "error": "x"}), "error"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_http_200_with_a_malformed_or_partial_body_fails_the_request(case):
    gate, response, reason = MALFORMED[case]
    transport = httpx.MockTransport(lambda request: response)
    with httpx.Client(transport=transport, base_url="http://gate.test") as client:
        result = run_gate(client, gate, MODEL, requests=1)
    assert (result.requests, result.failures) == (1, 1), result.details
    assert reason in result.details[-1], result.details


def test_the_well_formed_bodies_of_the_malformed_cases_pass():
    """The malformed cases differ from these in exactly the one thing they break."""
    bodies = {
        "tool_call_nonstream": httpx.Response(200, json=_GOOD),
        "tool_call_stream": httpx.Response(200, content=_sse(_EVENTS), headers={"content-type": "text/event-stream"}),
        "models": httpx.Response(200, json={"object": "list", "data": [{"id": MODEL}]}),
    }
    for gate, response in bodies.items():
        transport = httpx.MockTransport(lambda request, response=response: response)
        with httpx.Client(transport=transport, base_url="http://gate.test") as client:
            result = run_gate(client, gate, MODEL, requests=1)
        assert result.passed, (gate, result.details)
