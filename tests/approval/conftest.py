"""The cross-package approval tests use hango.testing's ``database_url`` (SQLite and
PostgreSQL) and ``tenant`` fixtures, on asyncio (psycopg), and hold every history to the
strict provider rules (``assert_valid``)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hango.testing import assert_valid_history


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # psycopg


@pytest.fixture
def assert_valid() -> Callable[..., None]:
    """``assert_valid(messages, open_tail=False)``: ``assert_valid_history``; ``open_tail``
    lets the last batch be unfinished (a suspended run's frontier)."""
    return assert_valid_history
