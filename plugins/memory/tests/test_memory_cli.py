"""hango-memory from the command line, in real processes on a real SQLite file: a run killed
with SIGKILL after its memory write and resumed writes it once; the next run of the session
sees it; ``hango memory list|show|edit|delete`` read and correct it, one line on bad input."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from hango.middleware import memory_store
from hango.testing import HangoCli, kill_when

TOOLS = '''
import pathlib, time
from hango import tool

HERE = pathlib.Path(__file__).parent

@tool
def slow() -> str:
    """Work for a while, until told to hurry."""
    with (HERE / "calls.log").open("a") as f:
        f.write("slow\\n")
    while not (HERE / "fast").exists():
        time.sleep(0.05)
    return "slept"
'''

SCRIPT = """
[[turns]]
tool_calls = [
    { name = "write_memory", input = { key = "deploys", content = "deploy on Fridays" } },
    { name = "slow", input = {} },
]
[[turns]]
text = "Noted."
"""

AGENT = """
name = "ops"
model = "scripted:script.toml"
tools = ["slow_tools:slow"]

[options.memory]
paths = ["AGENTS.md"]
"""

TENANT = uuid.UUID(int=0)
#: Without history repair the resumed run finishes its interrupted batch itself.
NO_REPAIR = {"HANGO_DISABLE_PLUGINS": "repair"}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_run_killed_after_its_write_and_resumed_writes_once_and_people_correct_it(
    tmp_path: Path, agent_dir: Callable[..., Path], hango_cli: HangoCli
) -> None:
    agent_dir(
        agent=AGENT,
        script=SCRIPT,
        tools={"slow_tools": TOOLS},
        files={"AGENTS.md": "The team is in Lisbon."},
    )
    proc = hango_cli("run", "--agent", "agent.toml", "remember the deploy day", env=NO_REPAIR)
    await kill_when(proc, tmp_path / "calls.log", "slow", never="the slow tool never started")

    async with hango_cli.store() as store:
        (run,) = await store.list_runs(TENANT)
        mem = memory_store(store)
        assert len(await mem.memory_versions(TENANT, "ops", "deploys", run.session_id)) == 1
    (tmp_path / "fast").touch()
    resumed = hango_cli.run("resume", "--force", str(run.id), env=NO_REPAIR)
    assert resumed.returncode == 0, resumed.stderr
    assert "Noted." in resumed.stdout
    async with hango_cli.store() as store:
        versions = await memory_store(store).memory_versions(
            TENANT, "ops", "deploys", run.session_id
        )
    assert [v.content for v in versions] == ["deploy on Fridays"]  # once, across the kill

    session = str(run.session_id)
    listed = hango_cli.run(
        "memory", "list", "--agent", "agent.toml", "--session", session, "--json"
    )
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)
    assert (row["key"], row["scope"], row["version"], row["content"]) == (
        "deploys",
        "session",
        1,
        "deploy on Fridays",
    )
    assert (row["written_by"], row["run_id"]) == ("tool", str(run.id))

    edited = hango_cli.run(
        "memory", "edit", "deploys", "--agent", "ops", "--session", session,
        "--text", "deploy on Tuesdays",
    )  # fmt: skip
    assert edited.returncode == 0, edited.stderr
    assert edited.stdout.strip() == "saved deploys (version 2)"
    shown = hango_cli.run("memory", "show", "deploys", "--agent", "ops", "--session", session)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[:2] == ["deploys (version 2):", "deploy on Tuesdays"]
    assert lines[3].startswith(f"  v1  run {str(run.id)[:8]} call ")
    assert lines[4].startswith("  v2  a person at ")

    deleted = hango_cli.run("memory", "delete", "deploys", "--agent", "ops", "--session", session)
    assert deleted.returncode == 0 and deleted.stdout.strip() == "deleted deploys"
    empty = hango_cli.run("memory", "list", "--agent", "ops", "--session", session)
    assert empty.stdout.strip() == "agent ops has no memory entries"


def test_bad_input_is_one_line(hango_cli: HangoCli) -> None:
    bad_session = hango_cli.run("memory", "list", "--agent", "ops", "--session", "nope")
    assert bad_session.returncode == 1
    assert (
        bad_session.stderr.strip() == "error: --session must be a session id (a UUID), got 'nope'"
    )
    missing = hango_cli.run("memory", "show", "nothing", "--agent", "ops")
    assert missing.returncode == 1
    assert missing.stderr.strip() == "error: agent ops has no memory entry 'nothing'"
    gone = hango_cli.run("memory", "delete", "nothing", "--agent", "ops")
    assert gone.returncode == 1
    assert gone.stderr.strip() == "error: memory entry 'nothing' does not exist; nothing deleted"


EDITOR = """
import sys, anyio, datetime as dt, uuid
from hango import open_store
from hango.middleware import MemoryEdit, Provenance, memory_store

async def meanwhile():
    store = await open_store(sys.argv[1])
    try:
        await memory_store(store).write_memory(
            uuid.UUID(int=0), "ops", "k", MemoryEdit("set", "written meanwhile"),
            provenance=Provenance("person", dt.datetime.now(dt.UTC)),
        )
    finally:
        await store.aclose()

anyio.run(meanwhile)  # another person saves while this editor is open
with open(sys.argv[2], "w") as f:
    f.write("my edit\\n")
"""


def test_edit_refuses_to_save_over_a_write_made_while_the_editor_was_open(
    tmp_path: Path, hango_cli: HangoCli
) -> None:
    import sys

    first = hango_cli.run("memory", "edit", "k", "--agent", "ops", "--text", "original")
    assert first.returncode == 0, first.stderr
    editor = tmp_path / "editor.py"
    editor.write_text(EDITOR, encoding="utf-8")
    command = f"{sys.executable} {editor} {hango_cli.database_url}"
    editors = {"VISUAL": command, "EDITOR": command}  # click prefers VISUAL
    edited = hango_cli.run("memory", "edit", "k", "--agent", "ops", env=editors)
    assert edited.returncode == 1
    (line,) = edited.stderr.strip().splitlines()
    assert line.startswith("error: memory entry 'k' is at version 2 (last written by a person at ")
    assert line.endswith("not version 1: another write came first; read it again before writing")
    shown = hango_cli.run("memory", "show", "k", "--agent", "ops")
    assert shown.stdout.splitlines()[:2] == ["k (version 2):", "written meanwhile"]
