"""Shared fixtures: a workspace on each backend (``local`` on a real tmp dir, ``store`` in a
real SQLite file or PostgreSQL database), driven through the middleware as a run would."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from hango import RunStore, ToolContext, ToolResult, ToolUseBlock
from hango.middleware import State, ToolCallRequest
from hango.store.workspace import bound_store
from hango.testing import new_state
from hango_filesystem import FilesystemMiddleware, LocalBackend, StoreBackend, Workspace
from hango_filesystem.backends import Backend
from hango_filesystem.permissions import parse_rules
from hango_filesystem.tools import Limits, batch_scratch

SECRET = "TOP-SECRET-OUTSIDE"


class Ws:
    """A workspace and a run state; ``call`` runs one tool call through the middleware's
    wrapper and the tool, with the store bound as inside a run."""

    def __init__(self, mw: FilesystemMiddleware, store: RunStore | None, kind: str) -> None:
        self.mw, self.store, self.kind = mw, store, kind
        self.state: State = new_state()
        self._ids = itertools.count(1)
        self.tools = {t.spec.name: t for t in mw.tools}

    @contextlib.contextmanager
    def bound(self) -> Iterator[None]:
        if self.store is None:
            yield
        else:
            with bound_store(self.store):
                yield

    async def call(self, name: str, **input: Any) -> ToolResult:
        call = ToolUseBlock(f"call_{next(self._ids)}", name, input)

        async def base(req: ToolCallRequest) -> ToolResult:
            assert req.tool is not None
            return await req.tool.call(dict(req.call.input), ToolContext(req.state, req.call))

        with self.bound():
            result = await self.mw.wrap_tool_call(
                ToolCallRequest(call, self.tools.get(name), self.state), base
            )
        return result

    def end_batch(self) -> None:
        self.state.scratch.clear()

    @property
    def mutated(self) -> set[str]:
        return set(batch_scratch(self.state)["mutated"])


def make_ws(
    kind: str,
    root: Path,
    store: RunStore | None,
    *,
    permissions: list[dict[str, Any]] | None = None,
    limits: Limits | None = None,
    **kw: Any,
) -> Ws:
    limits = limits or Limits()
    backend: Backend
    if kind == "local":
        backend = LocalBackend(root, max_file_bytes=limits.max_file_bytes)
    else:
        backend = StoreBackend(max_file_bytes=limits.max_file_bytes, max_files=10_000)
    routes = {
        "/large_tool_results": StoreBackend(max_file_bytes=limits.max_file_bytes, max_files=100)
    }
    mw = FilesystemMiddleware(
        Workspace(backend, routes),
        rules=parse_rules(permissions or [], source="test"),
        limits=limits,
        **kw,
    )
    return Ws(mw, store, kind)


@pytest.fixture
def anyio_backend() -> str:
    """asyncio: the store backend's suite runs on PostgreSQL too (psycopg needs asyncio)."""
    return "asyncio"


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A folder next to the root with a secret file: nothing may ever reach it."""
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(SECRET + "\n")
    return folder


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "root"
    folder.mkdir()
    return folder


@pytest.fixture(params=["local", "store"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def ws(kind: str, root: Path, store: RunStore) -> AsyncIterator[Ws]:
    yield make_ws(kind, root, store)
