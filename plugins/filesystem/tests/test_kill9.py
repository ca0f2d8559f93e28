"""A real ``kill -9``: a ``hango run`` process writes a file to the database-backed workspace,
is SIGKILLed at a later tool, and a NEW process resumes the run and reads the file the first
one wrote; counted, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from hango import RunStatus, open_store
from hango.testing import HangoCli, kill_when, write_agent

pytestmark = pytest.mark.anyio

NO_REPAIR = {"HANGO_DISABLE_PLUGINS": "repair"}

TOOLS = '''
import os, time
import uuid
from pathlib import Path

import hango

LOG = Path(os.environ["STALL_LOG"])


@hango.tool
def stall() -> str:
    """Wait (the first time: the test kills the process here)."""
    first = not LOG.exists()
    with LOG.open("a") as f:
        f.write("stalled\\n")
    if first:
        time.sleep(60)
    return "went on"
'''

SCRIPT = """
[[turns]]
[[turns.tool_calls]]
name = "write_file"
input = { path = "/notes/plan.md", content = "written before the kill\\n" }

[[turns]]
[[turns.tool_calls]]
name = "stall"
input = {}

[[turns]]
[[turns.tool_calls]]
name = "read_file"
input = { path = "/notes/plan.md" }

[[turns]]
text = "done"
"""

AGENT = """
name = "kill9"
model = "scripted:script.toml"
tools = ["kill_tools:TOOLS"]

[options.filesystem]
"""


async def test_a_run_killed_after_a_write_is_resumed_by_another_process(
    tmp_path: Path, database_url: str
) -> None:
    write_agent(
        tmp_path, agent=AGENT, script=SCRIPT, tools={"kill_tools": TOOLS + "\nTOOLS = [stall]\n"}
    )
    log = tmp_path / "stall.log"
    # Without hango-repair the killed call runs again on resume (it is idempotent), so the
    # count of stalls shows the resume really continued the killed run.
    tenant = uuid.uuid4()  # the PostgreSQL database is shared by the session's tests
    env = {"STALL_LOG": str(log), "HANGO_TENANT": str(tenant), **NO_REPAIR}
    cli = HangoCli(tmp_path, database_url=database_url, env=env)
    proc = cli("run", "--agent", "agent.toml", "remember")
    await kill_when(proc, log, "stalled", never="the stall tool never started")
    async with await open_store(database_url) as store:
        (run,) = await store.list_runs(tenant)
        killed = await store.get_run(tenant, run.id)
    assert killed.status is RunStatus.RUNNING
    assert "/notes/plan.md" in killed.state["private"]["filesystem"]["files"]
    resumed = cli("resume", "--force", str(run.id))  # a new process
    out, err = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out + err
    assert log.read_text() == "stalled\nstalled\n"  # killed once, ran again once
    async with await open_store(database_url) as store:
        done = await store.get_run(tenant, run.id)
        messages = await store.load_messages(tenant, done.session_id)
    assert done.status is RunStatus.COMPLETED
    assert [r.content for m in messages for r in m.tool_results] == [
        "Wrote /notes/plan.md (24 bytes).",  # once: the killed process's write, not repeated
        "went on",
        "     1 \twritten before the kill",  # read by the second process, from the database
    ]
