"""A package index that accepts the connection and never answers must not hang a run: the read
timeout (configurable) ends it with exit 3 naming the URL; transient 503s are retried."""

from __future__ import annotations

import hashlib
import http.server
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from materialize.errors import UpstreamError
from materialize.upstream import pypi


@pytest.fixture
def silent_server():
    """Accepts connections and never sends a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join()
    for conn in held:
        conn.close()
    sock.close()


@pytest.mark.timeout(60)
def test_silent_index_times_out_with_exit_3(silent_server, monkeypatch):
    monkeypatch.setenv("MATERIALIZE_READ_TIMEOUT", "1")
    monkeypatch.setenv("MATERIALIZE_RETRIES", "1")
    began = time.monotonic()
    with pytest.raises(UpstreamError, match=rf"{silent_server}/simple/demo/: no answer within 1 s") as info:
        pypi.find_file("demo", "1.0", None, index=f"{silent_server}/simple/")
    assert info.value.exit_code == 3
    assert time.monotonic() - began < 20


@pytest.mark.timeout(60)
def test_silent_download_times_out_and_keeps_nothing(silent_server, monkeypatch, tmp_path):
    monkeypatch.setenv("MATERIALIZE_READ_TIMEOUT", "1")
    monkeypatch.setenv("MATERIALIZE_RETRIES", "0")
    dest = tmp_path / "cache" / "x.tar.gz"
    with pytest.raises(UpstreamError, match=rf"cannot download {silent_server}/x.tar.gz: no answer within 1 s"):
        pypi.download(f"{silent_server}/x.tar.gz", dest, "0" * 64, progress=False)
    assert list(dest.parent.iterdir()) == []


@pytest.mark.timeout(60)
def test_cli_names_the_url_and_exits_3(silent_server, tmp_path):
    series = tmp_path / "series.yaml"
    series.write_text(f"""version: 1
targets:
  plugin:
    pin: {{kind: pypi, requirement: demo==1.0, file: demo-1.0.tar.gz, sha256: '{"0" * 64}',
           index_url: '{silent_server}/simple/'}}
patches: []
""")
    env = {**os.environ, "MATERIALIZE_READ_TIMEOUT": "1", "MATERIALIZE_RETRIES": "0"}
    proc = subprocess.run([sys.executable, "-m", "materialize", "apply", "--series", str(series)],
                          capture_output=True, text=True, env=env, timeout=50, cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert f"{silent_server}/simple/demo/" in proc.stderr and "Traceback" not in proc.stderr


def test_transient_503_is_retried(tmp_path, monkeypatch):
    payload = b"artifact bytes\n"
    hits = {"n": 0}

    class Flaky(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            hits["n"] += 1
            if hits["n"] == 1:
                self.send_response(503)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("MATERIALIZE_RETRIES", "2")
        url = f"http://127.0.0.1:{server.server_address[1]}/a.tar.gz"
        dest = pypi.download(url, tmp_path / "a.tar.gz", hashlib.sha256(payload).hexdigest(), progress=False)
        assert dest.read_bytes() == payload and hits["n"] == 2
    finally:
        server.shutdown()


@pytest.fixture
def endless_server():
    """Answers every GET with 200 and an endless chunked body (a page or a file that never ends)."""

    class Endless(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            chunk = b"<a href='x'>x</a>" * 4096
            try:
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except OSError:
                pass

        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Endless)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.mark.timeout(60)
def test_an_endless_download_stops_at_the_cap_and_keeps_nothing(endless_server, monkeypatch, tmp_path):
    """An index (or anyone on the way) streaming a file that never ends filled the disk: the sha256
    is only known wrong at the end. The download now stops past MATERIALIZE_MAX_DOWNLOAD, exit 3."""
    monkeypatch.setenv("MATERIALIZE_MAX_DOWNLOAD", str(4 << 20))
    monkeypatch.setenv("MATERIALIZE_RETRIES", "0")
    dest = tmp_path / "cache" / "x.tar.gz"
    with pytest.raises(UpstreamError, match=r"x.tar.gz: .*more than 4194304 bytes.*MATERIALIZE_MAX_DOWNLOAD") as info:
        pypi.download(f"{endless_server}/x.tar.gz", dest, "0" * 64, progress=False)
    assert info.value.exit_code == 3
    assert list(dest.parent.iterdir()) == []


@pytest.mark.timeout(60)
def test_an_endless_index_page_is_refused_in_bounded_memory(endless_server, monkeypatch):
    """The project page was read whole into memory (``resp.content``): an endless one grew without
    bound. It is read up to 64 MiB, then refused naming the URL (exit 3)."""
    monkeypatch.setenv("MATERIALIZE_RETRIES", "0")
    with pytest.raises(UpstreamError, match=rf"{endless_server}/simple/demo/: .*larger than") as info:
        pypi.find_file("demo", "1.0", None, index=f"{endless_server}/simple/")
    assert info.value.exit_code == 3


def test_a_download_killed_outright_is_swept_by_the_next_download_there(tmp_path, monkeypatch):
    """A run killed during a download (kill -9) left its partial file (up to 4 GiB) in the artifact
    folder for ever; the next download into that folder removes it, never a live run's."""
    payload = b"artifact bytes\n"

    class Plain(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args) -> None:  # noqa: ANN002
            pass

    dead = subprocess.Popen(["true"])
    dead.wait()
    folder = tmp_path / "sha"
    folder.mkdir()
    (folder / f".download-{dead.pid}-abcd1234").write_bytes(b"x" * 1000)
    (folder / f".download-{os.getpid()}-live0001").write_bytes(b"mine")  # a live writer's (ours): kept
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Plain)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/a.tar.gz"
        pypi.download(url, folder / "a.tar.gz", hashlib.sha256(payload).hexdigest(), progress=False)
    finally:
        server.shutdown()
    assert sorted(p.name for p in folder.iterdir()) == [f".download-{os.getpid()}-live0001", "a.tar.gz"]
