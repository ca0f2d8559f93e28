"""The approval demo from a fresh clone, through the real ``hango`` command: the README's run
stops as suspended, ``runs show --json`` lists the pending call, the printed approve command
completes it with the file edited once, and a rejection completes it with the file unchanged.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import pytest

from hango.testing import hango_executable

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "examples" / "approval"
HANGO = hango_executable()
ENTRY = "- Tool calls can wait for a person's approval (hango-approval).\n"


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    out |= {
        "HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}",
        "APPROVAL_DEMO_WORKSPACE": str(tmp_path / "workspace"),
        "COLUMNS": "200",
        "UV_FROZEN": "1",
    }
    return out


def hango(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [HANGO, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def readme_run(env: dict[str, str]) -> tuple[str, str]:
    """Run the README's first command; returns its output and the run id."""
    first = re.search(r"```sh\n(.+?)\n", (DEMO / "README.md").read_text(encoding="utf-8"))
    assert first is not None
    command = shlex.split(first.group(1))
    assert command[:3] == ["uv", "run", "hango"]
    done = subprocess.run(
        [HANGO, *command[3:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 3, done.stdout + done.stderr
    run_id = re.search(r"^run ([0-9a-f-]{36})$", done.stdout, re.M)
    assert run_id is not None, done.stdout
    return done.stdout, run_id.group(1)


def show(env: dict[str, str], run_id: str) -> dict[str, Any]:
    done = hango(env, "runs", "show", "--json", run_id)
    assert done.returncode == 0, done.stderr
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def changelog(env: dict[str, str]) -> str:
    return (Path(env["APPROVAL_DEMO_WORKSPACE"]) / "CHANGELOG.md").read_text(encoding="utf-8")


def test_the_demo_stops_suspended_and_an_approval_edits_the_file_once(
    env: dict[str, str],
) -> None:
    out, run_id = readme_run(env)
    assert "suspended: waiting for a decision on 1 tool call(s)" in out
    assert "⏸ waiting for a person: tool 'edit_file' needs a person's approval" in out
    assert changelog(env) == (DEMO / "files" / "CHANGELOG.md").read_text(encoding="utf-8")

    doc = show(env, run_id)
    assert doc["status"] == "suspended"
    (pending,) = doc["pending"]
    assert pending["tool"] == "edit_file"
    assert pending["input"]["path"] == "CHANGELOG.md"
    assert pending["decisions"] == ["approve", "edit", "reject"]
    call_id = pending["tool_call_id"]

    # The command the run printed, run exactly as printed: under `uv run` it starts with
    # `uv run hango`, as the cancelled-run hint does (issue 27 item 14).
    (approve,) = [line.strip() for line in out.splitlines() if "--approve" in line]
    assert approve == f"uv run hango resume {run_id} --approve {call_id}"
    done = subprocess.run(
        shlex.split(approve), cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed" in done.stdout
    assert changelog(env).count(ENTRY) == 1
    assert show(env, run_id)["pending"] == []

    # Deciding again changes nothing; a different decision is refused in one line.
    again = hango(env, "resume", run_id, "--approve", call_id)
    assert again.returncode == 0 and "already recorded" in again.stderr
    other = hango(env, "resume", run_id, "--reject", call_id)
    assert other.returncode == 2
    assert other.stderr.strip().splitlines() == [
        line for line in other.stderr.strip().splitlines() if line.startswith("error: ")
    ]
    assert "already decided (approve" in other.stderr
    assert changelog(env).count(ENTRY) == 1


def test_a_rejection_completes_the_run_with_the_file_unchanged(env: dict[str, str]) -> None:
    _, run_id = readme_run(env)
    call_id = show(env, run_id)["pending"][0]["tool_call_id"]
    done = hango(env, "resume", run_id, "--reject", f"{call_id}=Not in this release.")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "completed" in done.stdout
    assert changelog(env) == (DEMO / "files" / "CHANGELOG.md").read_text(encoding="utf-8")
    results = [
        b for m in show(env, run_id)["messages"] for b in m["content"] if b["type"] == "tool_result"
    ]
    assert results[-1]["is_error"] is True
    rejected = "Rejected by a person: Not in this release. The call did not run."
    assert results[-1]["content"] == rejected
