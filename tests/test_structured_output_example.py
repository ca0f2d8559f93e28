"""The structured-output example from a fresh clone, through the real ``hango`` command: the
README's ``hango run --json`` returns the validated object as ``output`` after one invalid
attempt was sent back with its reason and retried; ``runs show --json`` carries the same."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path

from hango.testing import hango_executable

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "structured-output"
HANGO = hango_executable()
REPORT = {
    "cities": [
        {"city": "Paris", "temp_c": 21.5, "sky": "clear"},
        {"city": "Oslo", "temp_c": -3.0, "sky": "snow"},
    ]
}


def test_the_readme_run_returns_the_validated_output_after_one_retry(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HANGO_")}
    env |= {"HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}", "UV_FROZEN": "1"}
    first = re.search(r"```sh\n(.+?)\n", (EXAMPLE / "README.md").read_text(encoding="utf-8"))
    assert first is not None
    command = shlex.split(first.group(1))
    assert command[:3] == ["uv", "run", "hango"] and "--json" in command
    done = subprocess.run(
        [HANGO, *command[3:]], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout)
    assert summary["status"] == "completed"
    assert summary["output"] == REPORT

    shown = subprocess.run(
        [HANGO, "runs", "show", "--json", summary["run_id"]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["output"] == REPORT
    assert doc["state"]["output_failures"] == 1
    feedback = [
        block["text"]
        for m in doc["messages"]
        if m["role"] == "user"
        for block in m["content"]
        if block["type"] == "text" and "not accepted" in block["text"]
    ]
    assert len(feedback) == 1
    assert "$.cities[0].temp_c: '21.5' is not of type 'number'" in feedback[0]
