from collections.abc import Iterator
from pathlib import Path

import pytest

from .llama_server import LlamaServer, ensure_env


@pytest.fixture
def anyio_backend() -> str:
    # The vendors' async SDK clients run on asyncio only.
    return "asyncio"


@pytest.fixture(scope="session")
def llama_python() -> Path:
    """The Python of the llama-cpp-python server's own venv (built on first use; see
    llama_server.py)."""
    return ensure_env()


@pytest.fixture(scope="session")
def llama_server(
    llama_python: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaServer]:
    """One real OpenAI-compatible server for the session, on a free loopback port."""
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with LlamaServer(llama_python, log) as server:
        yield server
