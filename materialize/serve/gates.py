"""Correctness gates against an OpenAI-compatible server: nothing passes that was not observed.

Seed 000: a server that is healthy, lists its model and answers chat can still return *nothing* for a
streamed chat completion with tools (wrong ``--tool-call-parser``: 2 chunks, 0 content, 0 tool-call
deltas), and leak raw ``<tool_call>`` XML into ``content`` when not streamed. Every agent client
streams and passes tools, so the gates do exactly that and demand parsed ``tool_calls`` with a name
from the offered tools and JSON-object arguments, and no raw markup in content.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import httpx

RAW_MARKUP = ("<tool_call>", "</tool_call>", "<function=", "<parameter=")

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "City name, e.g. Prague"}},
            "required": ["city"],
        },
    },
}
TOOL_PROMPT = "What is the weather in Prague right now? Use the get_weather tool."


@dataclass
class GateResult:
    """One gate's outcome over its requests; ``failures`` counts requests that did not pass."""

    name: str
    requests: int
    failures: int
    details: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.requests > 0 and self.failures == 0

    def record(self) -> dict[str, Any]:
        """The ledger's gate shape."""
        return {"name": self.name, "requests": self.requests, "failures": self.failures}

    def upper_bound(self) -> float | None:
        """Rule of three: with 0 failures in n requests the rate is below 3/n at ~95% confidence."""
        return 3.0 / self.requests if self.failures == 0 and self.requests else None


@dataclass
class Observation:
    """What one request really returned, for the verdict and for the message."""

    ok: bool
    detail: str


def chat_request(model: str, stream: bool) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": TOOL_PROMPT}],
        "tools": [WEATHER_TOOL],
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": 256,
        "stream": stream,
    }


def judge_tool_calls(calls: list[dict[str, Any]], content: str, offered: Iterable[str]) -> tuple[bool, str]:
    """Pass iff at least one call names an offered tool with JSON-object arguments and content holds
    no raw tool-call markup."""
    offered = set(offered)
    problems: list[str] = []
    leaked = [m for m in RAW_MARKUP if m in content]
    if leaked:
        problems.append(f"raw {leaked[0]} in content (the parser did not match)")
    if not calls:
        problems.append("no parsed tool_calls")
    for i, call in enumerate(calls):
        name = call.get("name") or ""
        if name not in offered:
            problems.append(f"tool call {i}: name {name!r} is not an offered tool")
        try:
            args = json.loads(call.get("arguments") or "")
        except json.JSONDecodeError:
            problems.append(f"tool call {i}: arguments {call.get('arguments')!r} are not JSON")
            continue
        if not isinstance(args, dict) or not args:
            problems.append(f"tool call {i}: arguments {call.get('arguments')!r} are not a non-empty object")
    summary = ", ".join(f"{c.get('name')}({c.get('arguments')})" for c in calls) or "none"
    if problems:
        return False, "; ".join(problems) + f" [calls: {summary}; content {len(content)} chars]"
    return True, f"parsed {summary}"


def parse_sse(lines: Iterable[str]) -> tuple[list[dict[str, Any]], bool]:
    """The JSON events of an SSE stream, and whether the ``[DONE]`` terminator was seen."""
    events: list[dict[str, Any]] = []
    for raw in lines:
        line = raw.strip()
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            return events, True
        events.append(json.loads(payload))
    return events, False


def assemble_stream(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str, int, str | None]:
    """Merge streamed deltas: tool calls by index (name once, arguments concatenated), and content."""
    calls: dict[int, dict[str, Any]] = {}
    content: list[str] = []
    deltas = 0
    finish: str | None = None
    for event in events:
        if "error" in event:
            raise ValueError(f"server error in stream: {event['error']}")
        for choice in event.get("choices", []):
            delta = choice.get("delta") or {}
            if delta.get("content"):
                content.append(delta["content"])
            for tc in delta.get("tool_calls") or []:
                deltas += 1
                slot = calls.setdefault(int(tc.get("index", 0)), {"name": "", "arguments": ""})
                fn = tc.get("function") or {}
                if fn.get("name"):
                    slot["name"] += fn["name"]
                if fn.get("arguments"):
                    slot["arguments"] += fn["arguments"]
            finish = choice.get("finish_reason") or finish
    return [calls[i] for i in sorted(calls)], "".join(content), deltas, finish


def gate_models(client: httpx.Client, model: str) -> Observation:
    resp = client.get("/v1/models")
    if resp.status_code != 200:
        return Observation(False, f"GET /v1/models -> HTTP {resp.status_code}")
    ids = [m.get("id") for m in resp.json().get("data", [])]
    if model not in ids:
        return Observation(False, f"model {model!r} not listed (server lists {ids})")
    return Observation(True, f"{model} listed")


def gate_tool_call_stream(client: httpx.Client, model: str) -> Observation:
    with client.stream("POST", "/v1/chat/completions", json=chat_request(model, stream=True)) as resp:
        if resp.status_code != 200:
            resp.read()
            return Observation(False, f"streamed chat -> HTTP {resp.status_code}: {resp.text[:200]}")
        events, done = parse_sse(resp.iter_lines())
    try:
        calls, content, deltas, finish = assemble_stream(events)
    except ValueError as exc:
        return Observation(False, str(exc))
    ok, why = judge_tool_calls(calls, content, [WEATHER_TOOL["function"]["name"]])
    if not done:
        ok, why = False, why + "; stream ended without [DONE]"
    shape = f"{len(events)} chunks, {len(content)} content chars, {deltas} tool-call deltas, finish_reason={finish}"
    return Observation(ok, f"{why} ({shape})")


def gate_tool_call_nonstream(client: httpx.Client, model: str) -> Observation:
    resp = client.post("/v1/chat/completions", json=chat_request(model, stream=False))
    if resp.status_code != 200:
        return Observation(False, f"chat -> HTTP {resp.status_code}: {resp.text[:200]}")
    choices = resp.json().get("choices") or []
    if not choices:
        return Observation(False, "response has no choices")
    message = choices[0].get("message") or {}
    calls = [
        {"name": (tc.get("function") or {}).get("name", ""), "arguments": (tc.get("function") or {}).get("arguments", "")}
        for tc in message.get("tool_calls") or []
    ]
    ok, why = judge_tool_calls(calls, message.get("content") or "", [WEATHER_TOOL["function"]["name"]])
    return Observation(ok, f"{why} (finish_reason={choices[0].get('finish_reason')})")


GATES: dict[str, Callable[[httpx.Client, str], Observation]] = {
    "models": gate_models,
    "tool_call_stream": gate_tool_call_stream,
    "tool_call_nonstream": gate_tool_call_nonstream,
}


def run_gate(client: httpx.Client, name: str, model: str, requests: int = 1) -> GateResult:
    """Send ``requests`` requests; a transport error is a failure of that request, never a skip."""
    result = GateResult(name=name, requests=0, failures=0)
    check = GATES[name]
    for _ in range(requests):
        start = time.monotonic()
        try:
            obs = check(client, model)
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            obs = Observation(False, f"{type(exc).__name__}: {exc}")
        result.latencies_s.append(time.monotonic() - start)
        result.requests += 1
        if not obs.ok:
            result.failures += 1
        if not obs.ok or not result.details:
            result.details.append(obs.detail)
    return result


def run_gates(base_url: str, model: str, gates: list[dict[str, Any]], timeout_s: float | None = None) -> list[GateResult]:
    """Run every gate in order against ``base_url``."""
    results = []
    for gate in gates:
        timeout = timeout_s or float(gate.get("timeout_s", 300.0))
        with httpx.Client(base_url=base_url, timeout=timeout, trust_env=False) as client:
            results.append(run_gate(client, gate["name"], model, int(gate.get("requests", 1))))
    return results
