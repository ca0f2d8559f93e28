"""docs/how-to/write-a-middleware-plugin.md, done as a new user would: its files are written
out, the plugin is built into a wheel and installed (into a folder of its own, put on
PYTHONPATH), an agent file lists it, and the real ``hango`` command runs it, resumes a queued
run and runs one under a worker. Each step checks what the middleware wrote."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from hango.testing import hango_executable

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "how-to" / "write-a-middleware-plugin.md"
HANGO = hango_executable()
FILE_BLOCK = re.compile(r"^```\w+\n# file: (\S+)\n(.*?)^```", re.S | re.M)


def doc_files() -> dict[str, str]:
    return dict(FILE_BLOCK.findall(DOC.read_text(encoding="utf-8")))


def test_the_doc_holds_the_whole_example() -> None:
    assert set(doc_files()) == {
        "hango-audit/src/hango_audit/__init__.py",
        "hango-audit/pyproject.toml",
        "my_agent/agent.toml",
        "my_agent/my_tools.py",
        "my_agent/script.toml",
    }


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The doc's plugin, built with ``uv build`` and installed into ``site/``."""
    work = tmp_path_factory.mktemp("authoring")
    for name, text in doc_files().items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text, encoding="utf-8")
    (work / "hango-audit" / "README.md").write_text("hango-audit\n")
    uv = ["uv"] if os.environ.get("UV") is None else [os.environ["UV"]]
    subprocess.run(
        [*uv, "build", "--wheel", "--out-dir", str(work / "dist"), str(work / "hango-audit")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = (work / "dist").glob("hango_audit-0.1.0-*.whl")
    subprocess.run(
        [*uv, "pip", "install", "--no-deps", "--target", str(work / "site"), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return work


def hango(work: Path, *args: str, plugin: bool = True) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ["PATH"],
        "HANGO_DATABASE_URL": f"sqlite:///{work / 'hango.db'}",
        "NO_COLOR": "1",
    }
    if plugin:
        env["PYTHONPATH"] = str(work / "site")
    return subprocess.run(
        [HANGO, *args], cwd=work, env=env, capture_output=True, text=True, timeout=120
    )


def audit(work: Path) -> list[dict[str, object]]:
    path = work / "audit.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [json.loads(line) for line in lines]


def test_installed_plugin_is_available_to_agents(installed: Path) -> None:
    done = hango(installed, "plugins", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = [r for r in json.loads(done.stdout) if r["name"] == "audit_log"]
    assert (row["distribution"], row["version"], row["slot"]) == (
        "hango-audit",
        "0.1.0",
        "available to agents",
    )


def test_listed_in_an_agent_it_runs_resumes_and_runs_under_a_worker(installed: Path) -> None:
    agent = "my_agent/agent.toml"
    done = hango(installed, "run", "--agent", agent, "--json", "What is 2 + 3?")
    assert done.returncode == 0, done.stderr
    first = json.loads(done.stdout)["run_id"]
    assert [(e["run"], e["event"], e.get("tool")) for e in audit(installed)] == [
        (first, "model_call", None),
        (first, "tool_call", "add"),
        (first, "model_call", None),
    ]
    shown = json.loads(hango(installed, "runs", "show", first, "--json").stdout)
    names = [(m["name"], m["distribution"]) for m in shown["stack"]]
    assert ("audit_log", "hango-audit") in names

    # Queued, then continued by `hango resume`: the recorded stack, audit included.
    queued = hango(installed, "submit", "--agent", agent, "What is 2 + 3?").stdout.strip()
    missing = hango(installed, "resume", queued, plugin=False)
    assert missing.returncode == 2
    assert "hango-audit" in missing.stderr and "Traceback" not in missing.stderr
    assert json.loads(hango(installed, "runs", "show", queued, "--json").stdout)["status"] == (
        "queued"
    )
    assert hango(installed, "resume", queued).returncode == 0
    assert [e["event"] for e in audit(installed) if e["run"] == queued] == [
        "model_call",
        "tool_call",
        "model_call",
    ]

    # Under a worker.
    third = hango(installed, "submit", "--agent", agent, "What is 2 + 3?").stdout.strip()
    env = {
        "PATH": os.environ["PATH"],
        "HANGO_DATABASE_URL": f"sqlite:///{installed / 'hango.db'}",
        "PYTHONPATH": str(installed / "site"),
    }
    worker = subprocess.Popen(
        [HANGO, "worker"],
        cwd=installed,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = json.loads(hango(installed, "runs", "show", third, "--json").stdout)
            if shown["status"] == "completed":
                break
            time.sleep(0.2)
        assert shown["status"] == "completed"
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=30)
    assert [e["event"] for e in audit(installed) if e["run"] == third] == [
        "model_call",
        "tool_call",
        "model_call",
    ]
