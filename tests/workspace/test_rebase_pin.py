"""`rebase --to pypi:NAME==VERSION` picks the file the way the current pin was picked (issue 11 item 6):
a target pinned to a wheel moves to the new version's wheel with the same tags, on a wheel-only release;
`pypi:NAME==VERSION:FILE` names the file; a missing file is an error that lists the version's files."""

from __future__ import annotations

import hashlib
import http.server
import io
import threading
import zipfile
from pathlib import Path

import pytest

from materialize.cli import main

TAGS = "cp312-cp312-manylinux_2_34_x86_64"


def wheel(version: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("proj/__init__.py", f"VERSION = {version!r}\n")
        z.writestr(f"proj-{version}.dist-info/METADATA", f"Name: proj\nVersion: {version}\n")
    return buf.getvalue()


class _Index(http.server.BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}

    def do_GET(self):  # noqa: N802 - http.server's naming
        if self.path.rstrip("/") == "/simple/proj":
            links = "".join(f'<a href="/files/{n}#sha256={hashlib.sha256(d).hexdigest()}">{n}</a>'
                            for n, d in self.files.items())
            body, kind = f"<html><body>{links}</body></html>".encode(), "text/html"
            self.send_response(200)
        elif self.path.startswith("/files/") and self.path[7:] in self.files:
            body, kind = self.files[self.path[7:]], "application/octet-stream"
            self.send_response(200)
        else:
            body, kind = b"not found", "text/plain"
            self.send_response(404)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def index():
    _Index.files = {f"proj-1.0-{TAGS}.whl": wheel("1.0"), f"proj-2.0-{TAGS}.whl": wheel("2.0"),
                    "proj-2.0-cp311-cp311-manylinux_2_28_aarch64.whl": wheel("2.0"), "proj-3.0.tar.gz": b"x"}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/simple/"
    server.shutdown()


def test_rebase_to_a_version_picks_the_wheel_with_the_pinned_tags(project: Path, index: str, capsys) -> None:
    data = _Index.files[f"proj-1.0-{TAGS}.whl"]
    series = project / "series" / "default.yaml"
    series.write_text(
        "version: 1\npatches_dir: ../patches\ntargets:\n  tt-metal:\n    pin:\n      kind: pypi\n"
        f"      requirement: proj==1.0\n      file: proj-1.0-{TAGS}.whl\n"
        f"      sha256: {hashlib.sha256(data).hexdigest()}\n      index_url: {index}\npatches: []\n")
    args = ["--series", str(series)]
    assert main(["rebase", "tt-metal", "--to", "pypi:proj==2.0", *args]) == 0
    text = series.read_text()
    assert f"proj-2.0-{TAGS}.whl" in text and "requirement: proj==2.0" in text
    capsys.readouterr()
    assert main(["rebase", "tt-metal", "--to", "pypi:proj==3.0", "--report", *args]) == 3
    err = capsys.readouterr().err
    assert f"proj-3.0-{TAGS}.whl" in err and "proj-3.0.tar.gz" in err and "pypi:proj==3.0:FILE" in err
    assert main(["rebase", "tt-metal", "--to", "pypi:proj==2.0:proj-2.0-cp311-cp311-manylinux_2_28_aarch64.whl",
                 *args]) == 0
    assert "proj-2.0-cp311-cp311-manylinux_2_28_aarch64.whl" in series.read_text()
