"""How `hango run` ends when its reader goes away or a signal stops it (issue "Run integrity
II", items 11 and 12): no traceback, the run saved as cancelled and resumable without
--force, --json / --jsonl still end with the run's summary, SIGTERM exits 143."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hango.testing import HangoCli, write_agent

TOOLS = '''
import pathlib, time
from hango import tool

HERE = pathlib.Path(__file__).parent

@tool
def step(n: int) -> str:
    """One step."""
    with (HERE / "calls.log").open("a") as f:
        f.write(f"step {n}\\n")
    if not (HERE / "fast").exists():
        time.sleep(0.5)
    return f"step {n} done " + "x" * 2000
'''

SCRIPT = (
    "".join(
        f'[[turns]]\ntext = "Turn {n}."\nusage = {{ input_tokens = 100, output_tokens = 10 }}\n'
        f'tool_calls = [{{ name = "step", input = {{ n = {n} }} }}]\n'
        for n in range(8)
    )
    + '[[turns]]\ntext = "All done."\n'
)

AGENT = 'name = "t"\nmodel = "scripted:script.toml"\ntools = ["steps:step"]\n'


@pytest.fixture
def cli(tmp_path: Path) -> HangoCli:
    write_agent(tmp_path, agent=AGENT, script=SCRIPT, tools={"steps": TOOLS})
    return HangoCli(tmp_path)


def status(cli: HangoCli) -> str:
    (run,) = json.loads(cli.run("runs", "list", "--json").stdout)
    return str(run["status"])


def test_a_closed_pipe_cancels_quietly_and_resumes_without_force(cli: HangoCli) -> None:
    env = cli.environment()
    piped = subprocess.run(
        f"{sys.executable} -m hango run --agent agent.toml go | head -1",
        shell=True, cwd=cli.cwd, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert piped.stdout.startswith("run ") and len(piped.stdout.splitlines()) == 1
    assert "Traceback" not in piped.stderr and "Broken pipe" not in piped.stderr
    assert status(cli) == "cancelled"
    log = cli.cwd / "calls.log"
    assert not log.exists() or len(log.read_text().splitlines()) < 8  # stopped, not run unseen
    (cli.cwd / "fast").touch()
    run_id = json.loads(cli.run("runs", "list", "--json").stdout)[0]["run_id"]
    resumed = cli.run("resume", run_id)
    assert resumed.returncode == 0, resumed.stderr
    assert status(cli) == "completed"
    done = log.read_text().splitlines()
    # Nothing ran twice; a call cut off by the cancel is answered as interrupted (hango-repair).
    assert len(done) == len(set(done)) and done[-1] == "step 7"


@pytest.mark.parametrize(
    ("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)], ids=["term", "int"]
)
@pytest.mark.parametrize("output", ["--json", "--jsonl"])
def test_a_signal_still_ends_json_output_with_the_saved_run(
    cli: HangoCli, sig: signal.Signals, code: int, output: str
) -> None:
    proc = cli.popen("run", "--agent", "agent.toml", output, "go")
    log = cli.cwd / "calls.log"
    deadline = time.monotonic() + 60
    while not (log.exists() and log.read_text().count("step") >= 2):
        assert time.monotonic() < deadline and proc.poll() is None
        time.sleep(0.05)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    assert "Traceback" not in err and "Aborted" not in err
    if output == "--json":
        doc = json.loads(out)
    else:
        *_, doc = [json.loads(line) for line in out.splitlines()]
        assert doc["type"] == "run_finished"
    assert doc["status"] == "cancelled" == status(cli)
    assert doc["usage"]["input_tokens"] >= 200  # what the run had spent, as saved
