"""The demo, through the real ``hango`` command in a subprocess: the README's first command
shows the plan, the blocked repeat and the refused tool; the interrupted-run example is
interrupted with SIGINT and resumed with its plan and a repaired history."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from hango.testing import hango_executable
from hango_repair import INTERRUPTED

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "demo"
HANGO = hango_executable()
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """The process environment without any HANGO_* setting of the caller, with a fresh SQLite
    database, a wide terminal (no wrapping to assert across) and a lockfile uv must not touch."""
    out = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    out |= {
        "HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}",
        "COLUMNS": "200",
        "PYTHONUNBUFFERED": "1",
        "UV_FROZEN": "1",
    }
    return out


def hango(env: dict[str, str], *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HANGO, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=check
    )


def show(env: dict[str, str], run_id: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(hango(env, "runs", "show", "--json", run_id).stdout)
    return doc


def first_command(readme: Path) -> list[str]:
    match = re.search(r"```sh\n(.+?)\n", readme.read_text(encoding="utf-8"))
    assert match, f"{readme} has a ```sh block"
    return shlex.split(match.group(1))


def test_the_readmes_start_with_the_same_demo_command() -> None:
    assert first_command(ROOT / "README.md") == first_command(DEMO / "README.md")


def test_readme_first_command_shows_plan_blocked_repeat_and_refused_tool(
    env: dict[str, str],
) -> None:
    command = first_command(DEMO / "README.md")
    assert command[:3] == ["uv", "run", "hango"]
    controller = (DEMO / "files" / "controller.py").read_bytes()
    done = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout

    # The plan, created and then updated step by step (piped: a line per change, then the
    # checklist once; a terminal updates one checklist in place, tests/test_cli.py).
    plans = re.findall(r"^plan (\d)/4 done", out, re.MULTILINE)
    assert plans == ["0", "1", "2", "3", "4"]
    assert "plan 0/4 done; now: List the workspace files\n" in out
    assert "plan 3/4 done; now: Write up the open risks\n" in out
    assert out.count("Plan (4/4 done)") == 1
    assert "  [x] Search the code for open TODOs\n  [x] Write up the open risks" in out
    assert "← Plan saved (4 todos: 0 completed, 1 in_progress, 3 pending)." in out
    # The third identical search is blocked; the first two ran.
    assert out.count("← controller.py:4: STALE_AFTER_S = None") == 2
    assert "✗ Not executed: this exact call was already made 2 times in this run (search" in out
    # edit_file is outside the allowlist: refused, and the file is untouched.
    assert "✗ Refused: tool 'edit_file' is not allowed for this agent." in out
    assert (DEMO / "files" / "controller.py").read_bytes() == controller
    assert "Two open risks, both from the files" in out
    assert re.search(r"^completed \(\d+ in / \d+ out tokens\)$", out, re.MULTILINE)

    # The stored run: the final plan in state_json, printed by `hango runs show`.
    (run_id,) = re.findall(rf"^run ({UUID})$", out, re.MULTILINE)
    text = hango(env, "runs", "show", run_id).stdout
    assert "Plan (4/4 done)" in text and "[x] Write up the open risks" in text
    state = show(env, run_id)["state"]
    assert [t["status"] for t in state["todos"]] == ["completed"] * 4


def test_interrupted_run_resumes_with_its_plan_and_a_repaired_history(
    env: dict[str, str],
) -> None:
    command = [
        HANGO,
        "run",
        "--agent",
        str(DEMO / "interrupt_agent.toml"),
        "Is the controller ready to ship?",
    ]
    proc = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    watchdog = threading.Timer(120, proc.kill)
    watchdog.start()
    try:
        assert proc.stdout is not None
        seen = []
        for line in proc.stdout:
            seen.append(line)
            if line.startswith("→ wait_for_ci"):
                proc.send_signal(signal.SIGINT)
                break
        rest, err = proc.communicate(timeout=60)
    finally:
        watchdog.cancel()
    out = "".join(seen) + rest
    assert proc.returncode == 130, out + err
    (run_id,) = re.findall(rf"^run ({UUID})$", out, re.MULTILINE)
    words, hint = err.strip().splitlines()[-2:]
    assert words == "cancelled; resume with:"
    assert f"hango resume {run_id} --db sqlite:///" in hint
    assert "Plan (1/3 done)" in out

    # Saved at the interruption: the plan, and a call without a result.
    stored = show(env, run_id)
    assert stored["status"] == "cancelled"
    assert [t["status"] for t in stored["state"]["todos"]] == [
        "completed",
        "in_progress",
        "pending",
    ]
    assert "Plan (1/3 done)" in hango(env, "runs", "show", run_id).stdout
    last = stored["messages"][-1]
    assert last["role"] == "user"  # the write_todos result; wait_for_ci has none
    assert len(last["content"]) == 1

    resumed = hango(env, "resume", run_id, check=False)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert f"resuming {run_id}" in resumed.stdout
    assert "→ wait_for_ci" not in resumed.stdout  # answered, not re-run
    assert "Plan (2/3 done)" in resumed.stdout
    assert "Not ready yet (controller.py)" in resumed.stdout

    stored = show(env, run_id)
    assert stored["status"] == "completed"
    messages = stored["messages"]
    (i,) = [
        i
        for i, m in enumerate(messages)
        if any(b.get("name") == "wait_for_ci" for b in m["content"])
    ]
    wait_id = next(b["id"] for b in messages[i]["content"] if b.get("name") == "wait_for_ci")
    answers = {b["tool_use_id"]: b for b in messages[i + 1]["content"]}
    assert answers[wait_id] == {
        "type": "tool_result",
        "tool_use_id": wait_id,
        "content": INTERRUPTED,
        "is_error": True,
    }
    assert [t["status"] for t in stored["state"]["todos"]] == [
        "completed",
        "pending",
        "completed",
    ]
