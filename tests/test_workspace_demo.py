"""The workspace demo from a fresh clone, through the real ``hango`` command: the README's run
reads and greps the project, stops suspended at the edit, the printed approve command edits
the file once, and the large build log is offloaded and read back in pages."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from hango.testing import hango_executable

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "examples" / "workspace"
HANGO = hango_executable()


def test_the_demo_edits_after_approval_and_pages_through_an_offloaded_result(
    tmp_path: Path,
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    env |= {"HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}", "COLUMNS": "200"}
    line = re.search(r"```sh\n(.+?)\n", (DEMO / "README.md").read_text(encoding="utf-8"))
    assert line is not None
    copy, run = line.group(1).split(" && ")
    assert shlex.split(copy)[:3] == ["cp", "-r", "examples/workspace"]
    demo = tmp_path / "demo"
    shutil.copytree(DEMO, demo, ignore=shutil.ignore_patterns("__pycache__"))
    command = shlex.split(run.replace(shlex.split(copy)[3], str(demo)))
    assert command[:3] == ["uv", "run", "hango"]

    def hango(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [HANGO, *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
        )

    first = hango(*command[3:])
    assert first.returncode == 3, first.stdout + first.stderr
    assert "/src/config.py:4:RETRIES = 1" in first.stdout
    assert "interrupt write on /src/config.py" in first.stdout
    config = demo / "project" / "src" / "config.py"
    assert "RETRIES = 1" in config.read_text(encoding="utf-8")
    approve = re.search(r"^\s+.*hango (resume \S+ --approve \S+)$", first.stdout, re.M)
    assert approve is not None, first.stdout
    done = hango(*shlex.split(approve.group(1)))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Edited /src/config.py: 1 replacement." in done.stdout
    assert config.read_text(encoding="utf-8").count("RETRIES = 3") == 1
    assert "saved in full at /large_tool_results/toolu_build_log" in done.stdout
    assert "/large_tool_results/toolu_build_log:3" in done.stdout  # grep counted the errors

    run_id = shlex.split(approve.group(1))[1]
    doc = json.loads(hango("runs", "show", "--json", run_id).stdout)
    (offloaded,) = doc["state"]["private"]["filesystem"]["offloaded"]
    assert offloaded == {
        "tool_call_id": "toolu_build_log",
        "tool": "build_log",
        "path": "/large_tool_results/toolu_build_log",
        "chars": 333_000,
    }
    results = {
        b["tool_use_id"]: b["content"]
        for m in doc["messages"]
        for b in m["content"]
        if b["type"] == "tool_result"
    }
    assert len(results["toolu_build_log"]) < 5_000  # the history keeps the preview only
    pages = [c for c in results.values() if c.startswith(("     1 \t2026", "   301 \t2026"))]
    assert len(pages) == 2 and all(len(p) <= 41_000 for p in pages)
    assert "step 0600 upload" in pages[1] and "Continue with read_file" in pages[1]
