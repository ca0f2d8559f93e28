"""Fixtures of the cross-package approval tests: a database of each kind, a tenant per test, and
the provider-validity check every resume is held to."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from hango import Message


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'hango.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def tenant() -> uuid.UUID:
    return uuid.uuid4()


def _assert_valid(messages: Sequence[Message], *, open_tail: bool = False) -> None:
    """Provider-valid: every assistant tool_use is answered exactly once, by the user message
    right after it, and every result answers a call of the assistant message before it.
    ``open_tail``: the last batch may still be unfinished (a suspended run's frontier)."""
    for i, m in enumerate(messages):
        if m.role == "assistant" and m.tool_uses:
            calls = [u.id for u in m.tool_uses]
            if i + 1 == len(messages):
                assert open_tail, f"message {i}: calls {calls} have no results"
                continue
            answered = [r.tool_use_id for r in messages[i + 1].tool_results]
            assert len(answered) == len(set(answered)), f"message {i + 1} answers twice"
            last = i + 2 == len(messages)
            if open_tail and last:
                assert set(answered) <= set(calls)
            else:
                assert sorted(answered) == sorted(calls), f"message {i}: {calls} vs {answered}"
        if m.role == "user" and m.tool_results:
            assert i > 0 and messages[i - 1].role == "assistant", f"message {i}: orphan results"
            assert {r.tool_use_id for r in m.tool_results} <= {
                u.id for u in messages[i - 1].tool_uses
            }


@pytest.fixture
def assert_valid() -> Callable[..., None]:
    """``assert_valid(messages, open_tail=False)``: see ``_assert_valid``."""
    return _assert_valid
