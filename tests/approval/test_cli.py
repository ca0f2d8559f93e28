"""``hango resume``'s decision options and what a suspended run prints, through the real
command (and click's runner for the options that fail before anything is opened)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner

from hango.cli import main

TOOLS = '''
from pathlib import Path

from hango import tool

HERE = Path(__file__).parent


def note(line):
    with (HERE / "executions.log").open("a") as f:
        f.write(line + "\\n")


@tool
def deploy(env: str) -> str:
    """Deploy."""
    note(f"deploy {env}")
    return f"deployed to {env}"


@tool
def preview(branch: str) -> str:
    """Deploy a preview."""
    note(f"preview {branch}")
    return f"preview of {branch}"


TOOLS = [deploy, preview]
'''

SCRIPT = """
[[turns]]
[[turns.tool_calls]]
name = "deploy"
input = { env = "prod" }
id = "call_a"
[[turns.tool_calls]]
name = "deploy"
input = { env = "eu" }
id = "call_b"

[[turns]]
text = "done"
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "cli_tools.py").write_text(TOOLS)
    (tmp_path / "script.toml").write_text(SCRIPT)
    (tmp_path / "agent.toml").write_text(
        'name = "cli"\nmodel = "scripted:script.toml"\ntools = ["cli_tools:TOOLS"]\n'
        # One at a time: the tests read the executions in call order (they are about decisions).
        "max_tool_concurrency = 1\n"
        "[options.human_in_the_loop]\n"
        'interrupt_on = { deploy = ["approve", "edit", "reject", "respond"], preview = false }\n'
    )
    return tmp_path


def hango(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    env |= {"HANGO_DATABASE_URL": f"sqlite:///{folder / 'hango.db'}", "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "hango", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def executions(folder: Path) -> list[str]:
    log = folder / "executions.log"
    return log.read_text().splitlines() if log.exists() else []


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--edit", "call_a"], "expected CALL_ID=..."),
        (["--edit", "call_a={oops"], "arguments are not JSON"),
        (["--edit", "call_a=[1, 2]"], "must be a JSON object"),
        (["--respond", "call_a"], "expected CALL_ID=..."),
        (["--approve", "call_a", "--reject", "call_a"], "given two decisions"),
        (["--approve", "=x"], "expected CALL_ID first"),
    ],
)
def test_malformed_decisions_are_refused_before_anything_is_opened(
    options: list[str], message: str, tmp_path: Path
) -> None:
    db = f"sqlite:///{tmp_path / 'never.db'}"
    result = CliRunner().invoke(main, ["resume", str(uuid.uuid4()), "--db", db, *options])
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "never.db").exists()


def test_a_suspended_run_prints_its_commands_and_takes_several_decisions(folder: Path) -> None:
    ran = hango(folder, "run", "--agent", "agent.toml", "ship it")
    assert ran.returncode == 3, ran.stdout + ran.stderr
    run_id = ran.stdout.splitlines()[0].split()[-1]
    assert "pending:" in ran.stdout and "decide with one of:" in ran.stdout
    for option in ("--approve call_a", "--reject call_b=REASON", "--respond call_a=TEXT"):
        assert f"hango resume {run_id} {option}" in ran.stdout
    assert f"""hango resume {run_id} --edit 'call_b={{"env": "eu"}}'""" in ran.stdout

    shown = hango(folder, "runs", "show", run_id)
    assert shown.returncode == 0, shown.stderr
    assert "suspended" in shown.stdout and f"hango resume {run_id} --approve call_b" in shown.stdout

    # One decision: the run stays suspended, says what it still waits for, runs nothing.
    partly = hango(folder, "resume", run_id, "--json", "--approve", "call_a")
    assert partly.returncode == 3, partly.stdout + partly.stderr
    doc = json.loads(partly.stdout)
    assert (doc["status"], doc["recorded"]) == ("suspended", ["call_a"])
    assert [p["tool_call_id"] for p in doc["pending"]] == ["call_b"]
    assert executions(folder) == []

    # The other, an edit into another (ungated) tool, completes the run.
    edit = 'call_b=preview {"branch": "main"}'
    done = hango(folder, "resume", run_id, "--json", "--edit", edit)
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout)["status"] == "completed"
    assert executions(folder) == ["deploy prod", "preview main"]


def test_queue_leaves_the_decided_run_to_a_worker(folder: Path) -> None:
    ran = hango(folder, "run", "--agent", "agent.toml", "ship it")
    run_id = ran.stdout.splitlines()[0].split()[-1]
    queued = hango(
        folder, "resume", run_id, "--queue", "--reject", "call_a=no", "--respond", "call_b=ok"
    )
    assert queued.returncode == 0, queued.stdout + queued.stderr
    assert f"run {run_id} is queued" in queued.stdout
    shown = json.loads(hango(folder, "runs", "show", "--json", run_id).stdout)
    assert shown["status"] == "queued"
    assert [p["decision"]["type"] for p in shown["pending"]] == ["reject", "respond"]
    assert executions(folder) == []


def test_a_decision_for_a_run_this_process_cannot_continue_is_refused_unrecorded(
    folder: Path,
) -> None:
    ran = hango(folder, "run", "--agent", "agent.toml", "ship it")
    run_id = ran.stdout.splitlines()[0].split()[-1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    env |= {"HANGO_DATABASE_URL": f"sqlite:///{folder / 'hango.db'}", "COLUMNS": "200"}
    # As if hango-todo (in the run's recorded stack) were not installed here.
    refused = subprocess.run(
        [sys.executable, "-m", "hango", "resume", run_id, "--approve", "call_a",
         "--approve", "call_b"],
        cwd=folder, env=env | {"HANGO_DISABLE_PLUGINS": "todo"}, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "hango-todo" in refused.stderr and "not installed here" in refused.stderr
    shown = json.loads(hango(folder, "runs", "show", "--json", run_id).stdout)
    assert shown["status"] == "suspended"  # not left "running" with nobody running it
    assert [p["decision"] for p in shown["pending"]] == [None, None]
    done = hango(folder, "resume", run_id, "--approve", "call_a", "--approve", "call_b")
    assert done.returncode == 0, done.stdout + done.stderr
    assert executions(folder) == ["deploy prod", "deploy eu"]
