"""examples/summarization, as its README says: a long scripted task that compacts at least
twice, every request valid for a strict provider, a kill -9 after the first summary resumed
without a second summary of that range, and ``hango runs show`` marking the compacted range."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import TextIO

import anyio
import pytest

from hango import AgentDefinition, Harness, RunStatus, ScriptedModel, TextBlock
from hango.agent.state import load_state
from hango.convert import CONVERTER
from hango.testing import HangoCli, RecordingModel
from hango_summarization import INSTRUCTION, SummarizationState

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # processes and files: one event loop is enough


EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "summarization"
AGENT = str(EXAMPLE / "agent.toml")
PROMPT = "Check the maintenance log."
LINE = re.compile(r"^context compacted: [\d.]+k? -> [\d.]+k? tokens \((\w+)\)$", re.M)


def start(cli: HangoCli, out: TextIO, *args: str) -> subprocess.Popen[str]:
    """``hango ARGS`` in ``cli``'s folder, its output going to the file ``out``."""
    return subprocess.Popen(
        [sys.executable, "-m", "hango", *args],
        cwd=cli.cwd,
        env=cli.environment({"COLUMNS": "200"}),
        stdout=out,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_the_cli_run_compacts_at_least_twice_with_summaries(tmp_path: Path) -> None:
    done = HangoCli(tmp_path).run("run", "--agent", AGENT, PROMPT)
    assert done.returncode == 0, done.stderr
    tiers = LINE.findall(done.stdout)
    assert tiers.count("summary") >= 2, done.stdout
    assert "tool_results" in tiers


async def test_every_request_of_the_example_passes_the_strict_validator(tmp_path: Path) -> None:
    from hango.store.sqlite import SqliteRunStore

    model = RecordingModel(ScriptedModel.from_file(EXAMPLE / "script.toml"), strict=True)
    store = await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}")
    try:
        harness = Harness(store, model=model, settings={})
        finished = await harness.run(AgentDefinition.from_file(AGENT), PROMPT)
    finally:
        await store.aclose()
    assert finished.status is RunStatus.COMPLETED, finished.error
    assert model.problems == []
    summaries = [
        r
        for r in model.requests
        if isinstance(r.messages[-1].content[-1], TextBlock)
        and r.messages[-1].content[-1].text == INSTRUCTION
    ]
    assert len(summaries) >= 2


async def test_a_kill_after_the_first_summary_resumes_and_runs_show_marks_the_range(
    tmp_path: Path,
) -> None:
    cli = HangoCli(tmp_path)
    log = tmp_path / "run.out"
    with log.open("w") as out:
        proc = start(cli, out, "run", "--agent", AGENT, PROMPT)
        # The line is printed after the summary was saved: kill the process right there.
        with anyio.fail_after(60):
            while "tokens (summary)" not in log.read_text():
                assert proc.poll() is None, log.read_text()
                await anyio.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    (run,) = await cli.runs()
    assert run.status is RunStatus.RUNNING
    at_kill = CONVERTER.structure(
        load_state(run.state).private["summarization"], SummarizationState
    )
    assert at_kill.compaction is not None and at_kill.compaction.number == 1
    first_end = at_kill.compaction.end

    resumed = cli.run("resume", str(run.id), "--force", env={"COLUMNS": "200"})
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    (done,) = await cli.runs()
    assert done.status is RunStatus.COMPLETED
    final = CONVERTER.structure(load_state(done.state).private["summarization"], SummarizationState)
    assert final.compaction is not None
    # The resumed run went on from the saved summary: its own summaries cover later messages,
    # one compaction each, and none of them is of the range already summarized.
    printed = LINE.findall(resumed.stdout).count("summary")
    assert final.compaction.number == 1 + printed
    assert final.compaction.end > first_end

    shown = cli.run("runs", "show", str(run.id), env={"COLUMNS": "200"})
    assert shown.returncode == 0, shown.stderr
    mark = f"── summarization: messages 1-{final.compaction.end - 1} compacted (summary"
    assert mark in shown.stdout
    assert "[scripted summary:" in shown.stdout
    # Append-only: runs show lists every message, those before the mark too.
    assert shown.stdout.index('read_page {"page": 1}') < shown.stdout.index(mark)
