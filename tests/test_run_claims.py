"""One executor per run across processes (issue 27 item 1), on SQLite and PostgreSQL: a run a
`hango run` is executing is refused to `hango resume` and to `Harness.execute` in another
process (`RunBusy`, one line, nothing run); two `hango resume --force` of a killed run make one
executor, not two. Counted by the tool's own log, with and without hango-repair."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import anyio
import pytest

from hango import Harness, RunBusy, RunStatus
from hango.testing import HangoCli, kill_when, write_agent

pytestmark = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]

TOOLS = '''
import pathlib, time
from hango import tool

HERE = pathlib.Path(__file__).parent

@tool
def slow(label: str) -> str:
    """Work until told to go on."""
    with open(HERE / "calls.log", "a") as log:
        log.write(f"slow {label}\\n")
    while not (HERE / "go").exists():
        time.sleep(0.05)
    return f"{label} done"
'''

SCRIPT = """
[[turns]]
tool_calls = [{ name = "slow", input = { label = "a" } }]
[[turns]]
tool_calls = [{ name = "slow", input = { label = "b" } }]
[[turns]]
text = "Finished."
"""

AGENT = """
name = "claimed"
model = "scripted:script.toml"
tools = ["claim_tools:slow"]
"""

with_and_without_repair = pytest.mark.parametrize("repair", [False, True], ids=["bare", "repair"])


def cli_for(
    tmp_path: Path, database_url: str, tenant: uuid.UUID, repair: bool, lease: str
) -> HangoCli:
    write_agent(tmp_path, agent=AGENT, script=SCRIPT, tools={"claim_tools": TOOLS})
    env: dict[str, str | None] = {"HANGO_RUN_LEASE_SECONDS": lease, "HANGO_TENANT": str(tenant)}
    if not repair:
        env["HANGO_DISABLE_PLUGINS"] = "repair"
    return HangoCli(tmp_path, database_url=database_url, env=env)


def calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


async def only_run(cli: HangoCli, tenant: uuid.UUID) -> uuid.UUID:
    with anyio.fail_after(30):
        while not (runs := await cli.runs(tenant)):  # noqa: ASYNC110 - another process's row
            await anyio.sleep(0.05)
    (run,) = runs
    return run.id


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    return line


@with_and_without_repair
async def test_a_run_another_process_executes_is_refused_to_resume_and_to_execute(
    tmp_path: Path, database_url: str, tenant: uuid.UUID, repair: bool
) -> None:
    # A claim long enough not to lapse while the test looks.
    cli = cli_for(tmp_path, database_url, tenant, repair, lease="30")
    proc = cli.popen("run", "--agent", "agent.toml", "go")
    try:
        with anyio.fail_after(30):
            while not calls(tmp_path):
                assert proc.poll() is None, proc.communicate()
                await anyio.sleep(0.05)
        run_id = await only_run(cli, tenant)
        refused = cli.run("resume", str(run_id))
        assert refused.returncode == 2
        assert f"run {run_id} is being executed by " in one_line(refused)
        async with cli.store() as store:
            before = await store.get_run(tenant, run_id)
            with pytest.raises(RunBusy, match=str(run_id)):
                await Harness(store, tenant_id=tenant, settings={}).execute(run_id)
            assert await store.get_run(tenant, run_id) == before  # nothing written
        (tmp_path / "go").touch()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Finished." in out
    assert calls(tmp_path) == ["slow a", "slow b"]  # the in-flight call ran once


@with_and_without_repair
async def test_two_forced_resumes_of_a_killed_run_make_one_executor(
    tmp_path: Path, database_url: str, tenant: uuid.UUID, repair: bool
) -> None:
    cli = cli_for(tmp_path, database_url, tenant, repair, lease="2")
    killed = cli.popen("run", "--agent", "agent.toml", "go")
    await kill_when(killed, tmp_path / "calls.log", "slow")
    run_id = await only_run(cli, tenant)
    # Both wait for the dead process's claim to lapse, then race for it.
    first = cli.popen("resume", "--force", str(run_id))
    second = cli.popen("resume", "--force", str(run_id))
    try:
        deadline = time.monotonic() + 60
        while first.poll() is None and second.poll() is None:
            assert time.monotonic() < deadline, "neither resume was refused"
            await anyio.sleep(0.05)
        loser, winner = (first, second) if first.poll() is not None else (second, first)
        _, err = loser.communicate()
        assert loser.returncode == 2, err
        (line,) = err.strip().splitlines()
        assert f"run {run_id} is being executed by " in line
        (tmp_path / "go").touch()
        _, err = winner.communicate(timeout=60)
    finally:
        for proc in (first, second):
            if proc.poll() is None:
                proc.kill()
    assert winner.returncode == 0, err
    # Killed in its call (idempotent: run again by the one executor that resumed, or with
    # hango-repair answered as interrupted), never by two; the next call once.
    again = [] if repair else ["slow a"]
    assert calls(tmp_path) == ["slow a", *again, "slow b"]
    async with cli.store() as store:
        done = await store.get_run(tenant, run_id)
    assert (done.status, done.lease_owner) == (RunStatus.COMPLETED, None)
