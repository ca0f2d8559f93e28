"""BFCL's long-context tasks through the full stack with a forced small window: every turn
still reaches the ground-truth state while hango-summarization compacts (bench/bfcl
``--window``; the replay model answers the summary requests and counts turns through them)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bfcl.data import load_tasks
from bench.bfcl.run import run_tasks

pytestmark = pytest.mark.anyio

CATEGORY = "multi_turn_long_context"


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def test_long_context_tasks_reach_ground_truth_while_compacting(tmp_path: Path) -> None:
    tasks = load_tasks(CATEGORY, ids=frozenset(f"{CATEGORY}_{i}" for i in (0, 5, 8, 18)))
    stats = await run_tasks(tasks, CATEGORY, f"sqlite:///{tmp_path / 'bfcl.db'}", {}, 4000)
    assert stats.failures == []
    assert stats.passed == stats.tasks == 4
    assert stats.compactions >= stats.tasks  # at least one a task
    assert "summarization" in stats.stack
