"""Preflight on the real host: memory threshold, device nodes, port, launcher."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from materialize.serve import preflight
from materialize.serve.profile import load_profile

REPO = Path(__file__).resolve().parents[2]


def test_memory_threshold():
    assert preflight.check_memory(4.0, available=int(5e9)).ok
    low = preflight.check_memory(4.0, available=int(3.1e9))
    assert not low.ok and "3.10 GB < 4 GB" in low.detail and "hard-freeze" in low.detail


def test_devices_must_be_character_devices(tmp_path):
    regular = tmp_path / "card0"
    regular.write_text("")
    checks = preflight.check_devices(["/dev/null", str(regular), str(tmp_path / "missing")])
    assert [c.ok for c in checks] == [True, False, False]
    assert "not a character device" in checks[1].detail and "missing" in checks[2].detail


def test_port_in_use_is_refused():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        check = preflight.check_port("127.0.0.1", port)
    assert not check.ok and "in use" in check.detail
    assert preflight.check_port("127.0.0.1", port).ok


@pytest.mark.skipif(Path("/dev/tenstorrent").exists(), reason="this host has Tenstorrent devices")
def test_shipped_prod_profile_fails_closed_without_hardware():
    profile = load_profile(REPO / "serve/profiles/prod.yaml")
    checks = preflight.host_checks(profile)
    with pytest.raises(preflight.PreflightError) as exc:
        preflight.require(checks, profile.name)
    assert "this machine has no Tenstorrent devices" in str(exc.value)
    assert "nothing was started" in str(exc.value)
    assert exc.value.exit_code == 1


def test_port_left_in_time_wait_by_a_stopped_server_is_free():
    """A stopped server leaves its accepted connections in TIME_WAIT for a minute; uvicorn binds with
    SO_REUSEADDR and starts fine, so the preflight must not call the port busy (issue 14.10)."""
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn (vLLM's server) binds
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    port = listener.getsockname()[1]
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = listener.accept()
    conn.close()  # the server side closes first: (port, client) goes to TIME_WAIT on the server's port
    client.recv(1)
    client.close()
    listener.close()
    check = preflight.check_port("127.0.0.1", port)
    assert check.ok, check.detail
