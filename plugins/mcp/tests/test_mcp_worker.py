"""An MCP tool under a PostgreSQL worker killed -9 mid-call: the next worker resumes the run;
a call the server did not declare idempotent is never run again silently (its outcome is
reported unknown), one it did declare idempotent runs again."""

from __future__ import annotations

import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from hango import RunStatus
from hango.testing import HangoCli, kill_when

SERVER = Path(__file__).parent / "servers" / "mcp_server.py"

AGENT = f"""
name = "payer"
model = "scripted:script.toml"

[options.mcp.servers.shop]
command = {sys.executable!r}
args = [{str(SERVER)!r}]
env = {{ MCP_CALL_LOG = "calls.log" }}
cwd = "."
"""

SCRIPT = """
[[turns]]
tool_calls = [{{ name = "shop_{tool}", input = {{ seconds = 8 }} }}]
[[turns]]
text = "Finished."
"""


def lines(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.anyio
@pytest.mark.postgres
@pytest.mark.parametrize(
    ("tool", "reruns"), [("charge", False), ("slow", True)], ids=["not-idempotent", "idempotent"]
)
async def test_a_worker_killed_mid_call_resumes_without_a_silent_rerun(
    tmp_path: Path,
    agent_dir: Callable[..., Path],
    postgres_url: str,
    tenant: uuid.UUID,
    tool: str,
    reruns: bool,
) -> None:
    agent_dir(agent=AGENT, script=SCRIPT.format(tool=tool))
    # Without history repair a resumed run finishes its interrupted batch itself (with it, an
    # interrupted idempotent call is answered "interrupted" instead of run again).
    env = {"HANGO_TENANT": str(tenant), "HANGO_DISABLE_PLUGINS": "repair"}
    cli = HangoCli(tmp_path, database_url=postgres_url, env=env)
    submitted = cli.run("submit", "--agent", "agent.toml", "pay")
    assert submitted.returncode == 0, submitted.stderr
    log = tmp_path / "calls.log"
    first = cli.popen("worker", "--lease", "1", "--concurrency", "1")
    await kill_when(first, log, f"{tool} start", within=60)

    second = cli.popen("worker", "--lease", "1", "--concurrency", "1")
    try:
        deadline = time.monotonic() + 60
        while True:
            (run,) = await cli.runs(tenant)
            if run.status in (RunStatus.COMPLETED, RunStatus.FAILED):
                break
            assert second.poll() is None, second.communicate()
            assert time.monotonic() < deadline, f"the run stayed {run.status}"
            await anyio.sleep(0.2)
    finally:
        second.send_signal(signal.SIGTERM)
        second.communicate(timeout=30)
    assert run.status is RunStatus.COMPLETED
    async with cli.store() as store:
        messages = await store.load_messages(tenant, run.session_id)
    results = [r for m in messages for r in m.tool_results]
    assert len(results) == 1, results
    (result,) = results
    started = [line for line in lines(log) if " start" in line]
    if reruns:
        assert len(started) == 2 and (result.content, result.is_error) == ("slept 8 s", False)
    else:
        assert started == ["charge start"]  # never run twice
        assert result.is_error and "unknown" in result.content.lower()
