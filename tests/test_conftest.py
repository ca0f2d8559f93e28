"""How the suite finds PostgreSQL (the ``hango.testing`` pytest plugin's ``postgres_admin_url``),
run as a real pytest session in an empty folder, where the plugin comes from its ``pytest11``
entry point alone: the local server when HANGO_TEST_DATABASE_URL is unset, a skip saying how to
enable the tests only when nothing answers, a failure when a configured server is down."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import hango.testing.databases

KIT = Path(hango.testing.databases.__file__)
LOCAL_POSTGRES = "postgresql://postgres@127.0.0.1:5432/postgres"

PROBE = """
def test_admin_url(postgres_admin_url):
    print("ADMIN_URL=" + postgres_admin_url)
"""


def _closed_port() -> int:
    """A local port where nothing listens (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _session(tmp_path: Path, env_url: str | None, local: str | None = None) -> str:
    if local is not None:
        assert f'LOCAL_POSTGRES = "{LOCAL_POSTGRES}"' in KIT.read_text()
        (tmp_path / "conftest.py").write_text(
            f"import hango.testing.databases\nhango.testing.databases.LOCAL_POSTGRES = {local!r}\n"
        )
    (tmp_path / "test_probe.py").write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "HANGO_TEST_DATABASE_URL"}
    if env_url is not None:
        env["HANGO_TEST_DATABASE_URL"] = env_url
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-rs", "-s", "-p", "no:cacheprovider", "test_probe.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    return done.stdout + done.stderr


def test_unset_and_nothing_listening_skips_with_how_to(tmp_path: Path) -> None:
    dead = f"postgresql://postgres@127.0.0.1:{_closed_port()}/postgres"
    out = _session(tmp_path, None, local=dead)
    assert "1 skipped" in out, out
    assert "HANGO_TEST_DATABASE_URL" in out and dead in out


def test_set_but_unreachable_fails(tmp_path: Path) -> None:
    out = _session(tmp_path, f"postgresql://postgres@127.0.0.1:{_closed_port()}/postgres")
    assert "1 error" in out and "is unreachable" in out, out


def test_unset_finds_the_local_server(tmp_path: Path, postgres_admin_url: str) -> None:
    """Where a server answers at the usual local address (as in CI), the tests run on it."""
    if postgres_admin_url != LOCAL_POSTGRES:
        pytest.skip(f"this machine's server is {postgres_admin_url}, not the local default")
    out = _session(tmp_path, None)
    assert "1 passed" in out and f"ADMIN_URL={LOCAL_POSTGRES}" in out, out
