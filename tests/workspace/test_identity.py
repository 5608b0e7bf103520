"""The author `new` writes into a patch's header: GIT_AUTHOR_*, else git's user.name/user.email."""

from __future__ import annotations

import subprocess

from materialize.workspace.edit import _identity


def test_git_config_names_the_author(tmp_path, monkeypatch):
    monkeypatch.delenv("GIT_AUTHOR_NAME", raising=False)
    monkeypatch.delenv("GIT_AUTHOR_EMAIL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no global config of the machine's
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "repo"), "config", "user.name", "Grace Hopper"], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "repo"), "config", "user.email", "grace@example.com"], check=True)
    assert _identity(tmp_path / "repo") == "Grace Hopper <grace@example.com>"
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada")
    assert _identity(tmp_path / "repo") == "Ada <grace@example.com>"


def test_without_git_or_config_the_placeholders(tmp_path, monkeypatch):
    monkeypatch.delenv("GIT_AUTHOR_NAME", raising=False)
    monkeypatch.delenv("GIT_AUTHOR_EMAIL", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    assert _identity(tmp_path) == "materialize user <user@localhost>"
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no git at all
    assert _identity(tmp_path) == "materialize user <user@localhost>"
