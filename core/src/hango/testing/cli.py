"""An agent on disk and the ``hango`` command run on it as a real process.

``write_agent`` writes an agent file, its scripted turns and its tool modules into a folder;
``HangoCli`` runs ``hango`` there against a SQLite file of the folder (or any store URL), and
``kill_when`` kills such a process with SIGKILL once a file shows a line, the way a test makes
a ``kill -9`` land at a chosen boundary.

::

    folder = write_agent(tmp_path, agent=AGENT, script=SCRIPT, tools={"slow_tools": SLOW})
    cli = HangoCli(folder)
    proc = cli.popen("run", "--agent", "agent.toml", "go")
    await kill_when(proc, folder / "calls.log", "slow")
    done = cli.run("resume", "--force", run_id)
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import anyio

from hango.store.base import RunRecord, RunStore
from hango.testing.databases import sqlite_url

#: The tenant the CLI uses when ``HANGO_TENANT`` is unset.
CLI_TENANT = uuid.UUID(int=0)


def hango_executable() -> str:
    """The ``hango`` console script of the running interpreter's environment."""
    return str(Path(sys.executable).with_name("hango"))


def write_agent(
    folder: Path,
    *,
    agent: str,
    script: str | None = None,
    tools: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    agent_file: str = "agent.toml",
) -> Path:
    """Write an agent into ``folder`` (made if missing): ``agent`` as ``agent_file``,
    ``script`` as ``script.toml`` (for ``model = "scripted:script.toml"``), each of ``tools``
    as the module ``<name>.py`` beside it and each of ``files`` as written. Texts are
    dedented. Returns the agent file's path."""
    folder.mkdir(parents=True, exist_ok=True)
    texts = dict(files or {})
    texts[agent_file] = agent
    if script is not None:
        texts["script.toml"] = script
    texts.update({f"{module}.py": source for module, source in (tools or {}).items()})
    for name, text in texts.items():
        (folder / name).write_text(textwrap.dedent(text), encoding="utf-8")
    return folder / agent_file


class HangoCli:
    """Runs ``python -m hango`` in ``cwd`` with ``NO_COLOR=1``,
    ``HANGO_DATABASE_URL`` = ``database_url`` (default: ``hango.db`` in ``cwd``) and
    ``HANGO_RUN_LEASE_SECONDS=2`` (a run's claim lapses 2 s after its process was killed, so
    ``resume --force``, which waits for that, recovers it at once); ``env`` adds to (or, with
    None values, removes from) the process environment."""

    def __init__(
        self,
        cwd: Path,
        *,
        database_url: str | None = None,
        env: Mapping[str, str | None] | None = None,
    ) -> None:
        self.cwd = cwd
        self.database_url = database_url or sqlite_url(cwd / "hango.db")
        self.env: dict[str, str | None] = {
            "HANGO_DATABASE_URL": self.database_url,
            "HANGO_RUN_LEASE_SECONDS": "2",
            "NO_COLOR": "1",
            **(env or {}),
        }

    def environment(self, extra: Mapping[str, str | None] | None = None) -> dict[str, str]:
        merged = {**os.environ, **self.env, **(extra or {})}
        return {k: v for k, v in merged.items() if v is not None}

    def popen(
        self, *args: str, env: Mapping[str, str | None] | None = None
    ) -> subprocess.Popen[str]:
        """Start ``hango ARGS`` with its output piped (text)."""
        return subprocess.Popen(
            [sys.executable, "-m", "hango", *args],
            cwd=self.cwd,
            env=self.environment(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    def __call__(
        self, *args: str, env: Mapping[str, str | None] | None = None
    ) -> subprocess.Popen[str]:
        return self.popen(*args, env=env)

    def run(
        self,
        *args: str,
        input: str | None = None,
        env: Mapping[str, str | None] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess[str]:
        """Run ``hango ARGS`` to its end; raises ``subprocess.TimeoutExpired`` after
        ``timeout`` seconds."""
        return subprocess.run(
            [sys.executable, "-m", "hango", *args],
            cwd=self.cwd,
            env=self.environment(env),
            input=input,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    @contextlib.asynccontextmanager
    async def store(self) -> AsyncIterator[RunStore]:
        """The store the CLI writes to, opened in this process (closed on exit)."""
        from hango.store import open_store

        store = await open_store(self.database_url)
        try:
            yield store
        finally:
            await store.aclose()

    async def runs(self, tenant: uuid.UUID = CLI_TENANT) -> list[RunRecord]:
        """The runs the CLI saved (newest first)."""
        async with self.store() as store:
            return list(await store.list_runs(tenant))


async def kill_when(
    proc: subprocess.Popen[str],
    log: Path,
    line: str,
    *,
    within: float = 30,
    never: str | None = None,
) -> None:
    """Wait until the file ``log`` holds ``line`` (one of its whitespace-separated words or a
    substring of its text), then SIGKILL ``proc`` and reap it. Raises ``AssertionError`` when
    ``proc`` ends first (with its output) or ``within`` seconds pass (saying ``never``)."""
    deadline = time.monotonic() + within
    while line not in _text(log):
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, never or f"{log.name} never showed {line!r}"
        await anyio.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.communicate()
    assert proc.returncode == -signal.SIGKILL


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""
