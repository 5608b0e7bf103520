"""A loopback HTTP server that answers like vLLM's OpenAI server in front of the seeds' model (test helper).

Used in-process by the gate tests and by ``fake_vllm.py`` (a real subprocess for the launcher tests).
The "model" is tiny and deterministic: it answers a weather question with a Qwen-XML ``get_weather``
call for the city asked about, a record question with ``lookup_record`` for the id asked about, exactly
as the field notes recorded Qwen3.8 doing. What reaches the client then depends on the tool-call
parser the server was "started" with, in the shapes recorded in ``fixtures/`` (seed 000):

  qwen3_xml   parsed ``tool_calls`` deltas (role chunk, name, argument pieces, finish ``tool_calls``)
  hermes      streamed: 2 chunks and nothing else; non-streamed: the raw XML in ``content``
  no_parser   the raw XML streamed as content

``stale_every=K`` injects the seeds' concurrency defect (PR #44: a slot handed to a new request gets
the previous occupant's token): every K-th request that arrives while another is in flight gets the
previous request's answer. Serial requests are never affected, as in the field.
"""

from __future__ import annotations

import json
import re
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"
_WEATHER = re.compile(r"weather in ([A-Z][a-z]+)")
_RECORD = re.compile(r"record (R\d+)")


def model_answer(prompt: str) -> tuple[str, dict] | None:
    """The tool call the "model" emits for a prompt (None: it answers in prose)."""
    if m := _WEATHER.search(prompt):
        return "get_weather", {"city": m.group(1)}
    if m := _RECORD.search(prompt):
        return "lookup_record", {"record_id": m.group(1)}
    return None


def qwen_xml(name: str, args: dict) -> str:
    params = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>"


def _chunk(delta: dict, finish: str | None = None) -> dict:
    return {"id": "chatcmpl-replay", "object": "chat.completion.chunk", "created": 1758272400,
            "model": "", "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}


def _arg_pieces(args: dict) -> list[str]:
    """JSON arguments split the way vLLM's streaming parser emits them ({, "key", : , ", value, ", })."""
    pieces: list[str] = ["{"]
    for i, (key, value) in enumerate(args.items()):
        pieces += ([", "] if i else []) + [json.dumps(key), ": ", '"', str(value), '"']
    return pieces + ["}"]


def stream_events(parser: str, answer: tuple[str, dict] | None) -> list[dict]:
    events = [_chunk({"role": "assistant", "content": ""})]
    if answer is None:
        return events + [_chunk({"content": "I cannot help with that."}), _chunk({}, "stop")]
    name, args = answer
    if parser == "qwen3_xml":
        events.append(_chunk({"tool_calls": [{"index": 0, "id": "chatcmpl-tool-0", "type": "function",
                                              "function": {"name": name, "arguments": ""}}]}))
        events += [_chunk({"tool_calls": [{"index": 0, "function": {"arguments": p}}]}) for p in _arg_pieces(args)]
        return events + [_chunk({}, "tool_calls")]
    if parser == "hermes":  # "2 chunks, 0 content, 0 tool-call deltas. Nothing."
        return events + [_chunk({}, "stop")]
    return events + [_chunk({"content": part}) for part in qwen_xml(name, args).split("\n")] + [_chunk({}, "stop")]


def nonstream_body(parser: str, answer: tuple[str, dict] | None, model: str) -> dict:
    message: dict = {"role": "assistant", "content": None, "tool_calls": None}
    finish = "stop"
    if answer is None:
        message["content"] = "I cannot help with that."
    elif parser == "qwen3_xml":
        name, args = answer
        message["tool_calls"] = [{"id": "chatcmpl-tool-0", "type": "function",
                                  "function": {"name": name, "arguments": json.dumps(args)}}]
        finish = "tool_calls"
    else:
        message["content"] = qwen_xml(*answer)
    return {"id": "chatcmpl-replay", "object": "chat.completion", "created": 1758272400, "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}]}


class _Model:
    """Shared state of the "engine": requests in flight and the previous answer (for the stale slot)."""

    def __init__(self, stale_every: int, latency_s: float) -> None:
        self.stale_every = stale_every
        self.latency_s = latency_s
        self.lock = threading.Lock()
        self.in_flight = 0
        self.overlapped = 0
        self.previous: tuple[str, dict] | None = None

    def answer(self, prompt: str) -> tuple[str, dict] | None:
        true = model_answer(prompt)
        with self.lock:
            stale = False
            if self.in_flight > 0 and self.stale_every:
                self.overlapped += 1
                stale = self.overlapped % self.stale_every == 0
            self.in_flight += 1
            given = self.previous if (stale and self.previous) else true
            self.previous = true
        time.sleep(self.latency_s)
        return given

    def done(self) -> None:
        with self.lock:
            self.in_flight -= 1


def make_handler(served_name: str, parser: str, model: _Model) -> type[BaseHTTPRequestHandler]:
    parser = parser if parser in ("qwen3_xml", "hermes") else "no_parser"

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:  # keep test output clean
            pass

        def _json(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/v1/models":
                models = json.loads((FIXTURES / "models.json").read_text())
                models["data"][0]["id"] = served_name
                self._json(200, models)
            elif self.path == "/health":
                self._json(200, {})
            else:
                self._json(404, {"error": {"message": f"no route {self.path}"}})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            request = json.loads(self.rfile.read(length) or b"{}")
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": {"message": f"no route {self.path}"}})
                return
            if request.get("model") != served_name:
                self._json(404, {"error": {"message": f"model {request.get('model')} does not exist"}})
                return
            prompt = (request.get("messages") or [{}])[-1].get("content") or ""
            answer = model.answer(prompt)
            try:
                if request.get("stream"):
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for event in stream_events(parser, answer):
                        event["model"] = served_name
                        self._chunked(f"data: {json.dumps(event)}\n\n".encode())
                    self._chunked(b"data: [DONE]\n\n")
                    self.wfile.write(b"0\r\n\r\n")
                else:
                    self._json(200, nonstream_body(parser, answer, served_name))
            finally:
                model.done()

        def _chunked(self, data: bytes) -> None:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

    return Handler


class ReplayServer:
    """Context manager: a replay server on 127.0.0.1 and an ephemeral port."""

    def __init__(self, served_name: str, parser: str, port: int = 0, host: str = "127.0.0.1",
                 stale_every: int = 0, latency_s: float = 0.0) -> None:
        self.model = _Model(stale_every, latency_s)
        self.httpd = ThreadingHTTPServer((host, port), make_handler(served_name, parser, self.model))
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ReplayServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
