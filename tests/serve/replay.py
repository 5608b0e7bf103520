"""A loopback HTTP server that replays recorded OpenAI-compatible responses (test helper).

Used in-process by the gate tests and by ``fake_vllm.py`` (a real subprocess for the launcher tests).
It picks the recording by the tool-call parser the server was "started" with, so a plan that renders
the wrong ``--tool-call-parser`` gets exactly what the wrong parser gave in the field.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def make_handler(served_name: str, parser: str) -> type[BaseHTTPRequestHandler]:
    recordings = FIXTURES / parser if (FIXTURES / parser).is_dir() else FIXTURES / "no_parser"

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
            if request.get("stream"):
                stream = recordings / "stream.sse"
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for event in stream.read_text().split("\n\n"):
                    if not event.strip():
                        continue
                    data = (event + "\n\n").encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
            else:
                body = recordings / "nonstream.json"
                if not body.exists():
                    self._json(500, {"error": {"message": "no recording"}})
                    return
                self._json(200, json.loads(body.read_text()))

    return Handler


class ReplayServer:
    """Context manager: a replay server on 127.0.0.1 and an ephemeral port."""

    def __init__(self, served_name: str, parser: str, port: int = 0, host: str = "127.0.0.1") -> None:
        self.httpd = ThreadingHTTPServer((host, port), make_handler(served_name, parser))
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
