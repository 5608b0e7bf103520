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
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
LOOKUP_TOOL = {
    "type": "function",
    "function": {
        "name": "lookup_record",
        "description": "Fetch one record by its id.",
        "parameters": {
            "type": "object",
            "properties": {"record_id": {"type": "string", "description": "Record id, e.g. R0000"}},
            "required": ["record_id"],
        },
    },
}
TOOLS = [WEATHER_TOOL, LOOKUP_TOOL]


@dataclass(frozen=True)
class Prompt:
    """One fixed request and the one tool call a correct server returns for it."""

    text: str
    name: str
    arguments: dict[str, Any]


# The fixed prompt set (seeds 000 and 002 used exactly the first two). Requests cycle through it, so
# concurrent requests ask different things: a server that hands one request another's answer (the
# seeds' stale-slot defect) returns a *wrong* call, which "a tool call parsed" alone would pass.
PROMPTS: tuple[Prompt, ...] = (
    Prompt("What is the weather in Prague right now? Use the get_weather tool.", "get_weather", {"city": "Prague"}),
    Prompt("Look up record R0000 with the lookup_record tool.", "lookup_record", {"record_id": "R0000"}),
    Prompt("What is the weather in Oslo right now? Use the get_weather tool.", "get_weather", {"city": "Oslo"}),
    Prompt("Look up record R0042 with the lookup_record tool.", "lookup_record", {"record_id": "R0042"}),
    Prompt("What is the weather in Brno right now? Use the get_weather tool.", "get_weather", {"city": "Brno"}),
    Prompt("Look up record R1337 with the lookup_record tool.", "lookup_record", {"record_id": "R1337"}),
)
TOOL_PROMPT = PROMPTS[0].text


@dataclass
class GateResult:
    """One gate's outcome over its requests; ``failures`` counts requests that did not pass."""

    name: str
    requests: int
    failures: int
    details: list[str] = field(default_factory=list)
    latencies_s: list[float] = field(default_factory=list)
    concurrency: int = 1

    @property
    def passed(self) -> bool:
        return self.requests > 0 and self.failures == 0

    def record(self) -> dict[str, Any]:
        """The ledger's gate shape."""
        return {"name": self.name, "requests": self.requests, "failures": self.failures}

    def upper_bound(self) -> float | None:
        """Rule of three: with 0 failures in n requests the rate is below 3/n at ~95% confidence."""
        return 3.0 / self.requests if self.failures == 0 and self.requests else None


def describe(g: GateResult) -> str:
    """One line per gate, with the failure-rate bound the run actually achieved."""
    bound = g.upper_bound()
    achieved = (f"failure rate < {bound:.2%} at 95% (rule of three, 0/{g.requests})" if bound is not None
                else f"{g.failures}/{g.requests} failed")
    last = g.details[-1] if g.details else ""
    return (f"gate {g.name}: {g.requests - g.failures}/{g.requests} passed at concurrency {g.concurrency}; "
            f"{achieved}; {last}")


@dataclass
class Observation:
    """What one request really returned, for the verdict and for the message."""

    ok: bool
    detail: str


def chat_request(model: str, stream: bool, prompt: Prompt = PROMPTS[0]) -> dict[str, Any]:
    return {
        "model": model,
        "messages": [{"role": "user", "content": prompt.text}],
        "tools": TOOLS,
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": 256,
        "stream": stream,
    }


def judge_tool_calls(calls: list[dict[str, Any]], content: str, expected: Prompt) -> tuple[bool, str]:
    """Pass iff there is exactly the expected call (name and JSON-object arguments equal to the expected
    ones) and content holds no raw tool-call markup."""
    problems: list[str] = []
    leaked = [m for m in RAW_MARKUP if m in content]
    if leaked:
        problems.append(f"raw {leaked[0]} in content (the parser did not match)")
    if not calls:
        problems.append("no parsed tool_calls")
    elif len(calls) > 1:
        problems.append(f"{len(calls)} tool calls, expected one")
    for i, call in enumerate(calls):
        name = call.get("name") or ""
        if name != expected.name:
            problems.append(f"tool call {i}: name {name!r}, expected {expected.name!r}")
        try:
            args = json.loads(call.get("arguments") or "")
        except json.JSONDecodeError:
            problems.append(f"tool call {i}: arguments {call.get('arguments')!r} are not JSON")
            continue
        if not isinstance(args, dict) or not args:
            problems.append(f"tool call {i}: arguments {call.get('arguments')!r} are not a non-empty object")
        elif args != expected.arguments:
            problems.append(f"tool call {i}: arguments {args} are not the expected {expected.arguments}")
    summary = ", ".join(f"{c.get('name')}({c.get('arguments')})" for c in calls) or "none"
    if problems:
        return False, "; ".join(problems) + f" [asked: {expected.text!r}; calls: {summary}; content {len(content)} chars]"
    return True, f"parsed {summary}"


def answer_body(resp: httpx.Response, kind: str, model: str | None = None) -> tuple[dict[str, Any] | None, str]:
    """The JSON object of an answer, or why it is not one: HTTP 200 alone proves nothing (a proxy's page,
    an error object beside stale choices, another model's answer). ``kind`` is the OpenAI ``object``
    the request must come back as (``list``, ``chat.completion``); ``model`` the model that must answer."""
    if resp.status_code != 200:
        return None, f"HTTP {resp.status_code}: {resp.text[:200]}"
    ctype = resp.headers.get("content-type", "")
    if ctype.split(";")[0].strip().lower() != "application/json":
        return None, f"content type {ctype!r}, expected application/json"
    body = resp.json()
    if not isinstance(body, dict):
        return None, f"body is a JSON {type(body).__name__}, not an object"
    if "error" in body:
        return None, f"error in the body: {json.dumps(body['error'])[:200]}"
    if body.get("object") != kind:
        return None, f"object {body.get('object')!r}, expected {kind!r}"
    if model is not None and body.get("model") != model:
        return None, f"answered by model {body.get('model')!r}, expected {model!r}"
    return body, ""


def sse_events(source: Any) -> tuple[list[dict[str, Any]], bool]:
    """The JSON events of an SSE stream (framing by httpx-sse), and whether ``[DONE]`` was seen."""
    events: list[dict[str, Any]] = []
    for sse in source.iter_sse():
        if sse.data == "[DONE]":
            return events, True
        if sse.data:
            events.append(json.loads(sse.data))
    return events, False


def assemble_stream(
    events: list[dict[str, Any]], model: str | None = None
) -> tuple[list[dict[str, Any]], str, int, str | None]:
    """Merge streamed deltas into the final message with the openai client's own accumulator
    (``ChatCompletionStreamState``: tool calls by index, names and argument pieces, content), and count
    the tool-call deltas for the message. A server error event, a malformed chunk, a chunk that is not
    a ``chat.completion.chunk`` of ``model`` (when given) or of more than the one choice asked for
    raises ValueError."""
    from openai.lib.streaming.chat import ChatCompletionStreamState
    from openai.types.chat import ChatCompletionChunk
    from pydantic import ValidationError

    state = ChatCompletionStreamState(input_tools=TOOLS)
    deltas = 0
    seen = False
    for event in events:
        if "error" in event:
            raise ValueError(f"server error in stream: {event['error']}")
        if event.get("object") != "chat.completion.chunk":
            raise ValueError(f"stream event object {event.get('object')!r}, expected 'chat.completion.chunk'")
        if model is not None and event.get("model") != model:
            raise ValueError(f"stream chunk from model {event.get('model')!r}, expected {model!r}")
        if any(c.get("index") != 0 for c in event.get("choices") or []):
            raise ValueError("stream chunk for a choice other than the one asked for (index 0)")
        try:
            state.handle_chunk(ChatCompletionChunk.model_validate(event))
        except ValidationError as exc:
            raise ValueError(f"malformed chunk {json.dumps(event)[:200]}: {exc.errors()[0].get('msg')}") from None
        seen = True
        deltas += sum(len((c.get("delta") or {}).get("tool_calls") or []) for c in event.get("choices", []))
    if not seen:
        return [], "", 0, None
    choice = state.get_final_completion().choices[0]
    message = choice.message
    calls = [{"name": tc.function.name or "", "arguments": tc.function.arguments or ""}
             for tc in message.tool_calls or [] if getattr(tc, "function", None) is not None]
    return calls, message.content or "", deltas, choice.finish_reason


def gate_models(client: httpx.Client, model: str, prompt: Prompt | None = None) -> Observation:
    body, why = answer_body(client.get("/v1/models"), "list")
    if body is None:
        return Observation(False, f"GET /v1/models -> {why}")
    ids = [m.get("id") for m in body.get("data") or [] if isinstance(m, dict)]
    if model not in ids:
        return Observation(False, f"model {model!r} not listed (server lists {ids})")
    return Observation(True, f"{model} listed")


def gate_tool_call_stream(client: httpx.Client, model: str, prompt: Prompt = PROMPTS[0]) -> Observation:
    from httpx_sse import connect_sse

    with connect_sse(client, "POST", "/v1/chat/completions", json=chat_request(model, True, prompt)) as source:
        if source.response.status_code != 200:
            source.response.read()
            return Observation(False, f"streamed chat -> HTTP {source.response.status_code}: "
                                      f"{source.response.text[:200]}")
        events, done = sse_events(source)
    try:
        calls, content, deltas, finish = assemble_stream(events, model)
    except ValueError as exc:
        return Observation(False, str(exc))
    ok, why = judge_tool_calls(calls, content, prompt)
    if finish != "tool_calls":
        ok, why = False, why + f"; finish_reason {finish!r}, expected 'tool_calls' (the answer was cut or never parsed)"
    if not done:
        ok, why = False, why + "; stream ended without [DONE]"
    shape = f"{len(events)} chunks, {len(content)} content chars, {deltas} tool-call deltas, finish_reason={finish}"
    return Observation(ok, f"{why} ({shape})")


def gate_tool_call_nonstream(client: httpx.Client, model: str, prompt: Prompt = PROMPTS[0]) -> Observation:
    body, why = answer_body(client.post("/v1/chat/completions", json=chat_request(model, False, prompt)),
                            "chat.completion", model)
    if body is None:
        return Observation(False, f"chat -> {why}")
    choices = body.get("choices") or []
    if len(choices) != 1:
        return Observation(False, f"response has {len(choices)} choices, expected one")
    message = choices[0].get("message") or {}
    calls = [
        {"name": (tc.get("function") or {}).get("name", ""), "arguments": (tc.get("function") or {}).get("arguments", "")}
        for tc in message.get("tool_calls") or []
    ]
    ok, why = judge_tool_calls(calls, message.get("content") or "", prompt)
    finish = choices[0].get("finish_reason")
    if finish != "tool_calls":
        ok, why = False, why + f"; finish_reason {finish!r}, expected 'tool_calls' (the answer was cut or never parsed)"
    return Observation(ok, f"{why} (finish_reason={finish})")


GATES: dict[str, Callable[..., Observation]] = {
    "models": gate_models,
    "tool_call_stream": gate_tool_call_stream,
    "tool_call_nonstream": gate_tool_call_nonstream,
}


def _one(client: httpx.Client, name: str, model: str, index: int) -> tuple[Observation, float]:
    """Request number ``index`` of a gate; a transport error is a failure of that request, never a skip."""
    start = time.monotonic()
    try:
        obs = GATES[name](client, model, PROMPTS[index % len(PROMPTS)])
    except Exception as exc:  # noqa: BLE001 - any error of one request is that request's failure
        obs = Observation(False, f"{type(exc).__name__}: {exc}")
    return obs, time.monotonic() - start


def run_gate(client: httpx.Client, name: str, model: str, requests: int = 1, concurrency: int = 1) -> GateResult:
    """Send ``requests`` requests, ``concurrency`` in flight at a time, cycling through the prompt set."""
    result = GateResult(name=name, requests=0, failures=0, concurrency=max(1, concurrency))
    if result.concurrency == 1:
        outcomes = [_one(client, name, model, i) for i in range(requests)]
    else:
        with ThreadPoolExecutor(max_workers=result.concurrency) as pool:
            outcomes = list(pool.map(lambda i: _one(client, name, model, i), range(requests)))
    for obs, latency in outcomes:
        result.latencies_s.append(latency)
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
        concurrency = int(gate.get("concurrency") or 1)
        limits = httpx.Limits(max_connections=max(concurrency, 1) + 2)
        with httpx.Client(base_url=base_url, timeout=timeout, trust_env=False, limits=limits) as client:
            results.append(run_gate(client, gate["name"], model, int(gate.get("requests") or 1), concurrency))
    return results
