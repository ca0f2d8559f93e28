"""examples/skills-memory, as its README says: with the installed plugins, the model loads a
skill on demand, its tools narrow while the skill is active, it writes a memory entry, and
the next run of the session sees it; then the same from the ``hango`` command."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from hango import AgentDefinition, Harness, RunStatus, ScriptedModel
from hango.store.sqlite import SqliteRunStore
from hango.testing import HangoCli, RecordingModel

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "skills-memory"

pytestmark = pytest.mark.anyio


@pytest.fixture
def example(tmp_path: Path) -> Path:
    folder = tmp_path / "skills-memory"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


async def test_the_example_loads_a_skill_narrows_writes_memory_and_the_next_run_sees_it(
    example: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(example))  # the agent's tools module
    agent = AgentDefinition.from_file(example / "agent.toml")
    model = RecordingModel(ScriptedModel.from_file(example / "script.toml"))
    async with await SqliteRunStore.open(f"sqlite:///{tmp_path / 'hango.db'}") as store:
        harness = Harness(store, model=model, settings={})
        first = await harness.run(agent, "Write the release notes.")
        run = await store.get_run(harness.tenant_id, first.run_id)
        second = await harness.run(agent, "How do we write them?", session_id=run.session_id)
    assert (first.status, second.status) == (RunStatus.COMPLETED, RunStatus.COMPLETED)
    tools = [sorted(t.name for t in r.tools) for r in model.requests]
    everything = [
        "delete_memory", "list_changes", "load_skill", "publish", "read_memory",
        "search_memory", "write_memory", "write_todos",
    ]  # fmt: skip
    narrowed = ["list_changes", "load_skill", "read_memory", "write_memory"]
    assert tools == [everything, narrowed, narrowed, narrowed, everything]
    system = [[b.text for b in r.system] for r in model.requests]
    catalog = system[0][1]
    assert catalog.splitlines()[1:] == [
        "- incident-report: Write a blameless incident report (timeline, impact, causes, "
        "actions). Use after an outage or a failed release. (skills/incident-report/SKILL.md)",
        "- release-notes: Write release notes from the changes merged since the last release. "
        "Use when asked for release notes or a changelog. (skills/release-notes/SKILL.md)",
    ]
    assert all(s[1] == catalog for s in system)  # byte-stable across calls and runs
    memory = [s[-1] for s in system]
    assert "## AGENTS.md\nThe team releases on Tuesdays." in memory[0]
    assert "release-style" not in memory[2]
    assert "- release-style [session, v1, run " in memory[3]
    assert "- release-style [session, v1, run " in memory[4]  # the next run of the session


def test_the_readme_commands_run(example: Path, tmp_path: Path) -> None:
    cli = HangoCli(example)
    first = cli.run("run", "--agent", "agent.toml", "--json", "Write the release notes.")
    assert first.returncode == 0, first.stderr
    session = json.loads(first.stdout)["session_id"]
    second = cli.run("run", "--agent", "agent.toml", "--session", session, "How?")
    assert second.returncode == 0, second.stderr
    assert "from memory: release-style" in second.stdout
    listed = cli.run("memory", "list", "--agent", "agent.toml", "--session", session, "--json")
    assert listed.returncode == 0, listed.stderr
    (entry,) = json.loads(listed.stdout)
    assert (entry["key"], entry["version"], entry["written_by"]) == ("release-style", 1, "tool")
    assert uuid.UUID(entry["run_id"])
