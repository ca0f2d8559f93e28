"""Bad input gets one clear line, printed as written, with no secret in it; an in-memory store
works (issue "Run integrity", items 14 and 15)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from hango import Harness, RunStatus, ScriptedModel, open_store
from hango.agent.definition import AgentDefinition


def hango(*args: str, cwd: Path, db: str | None = None) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "HANGO_DATABASE_URL": db or f"sqlite:///{cwd / 'hango.db'}",
        "NO_COLOR": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "hango", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def agent(folder: Path, extra: str = "", script: str = '[[turns]]\ntext = "hi"\n') -> Path:
    (folder / "script.toml").write_text(textwrap.dedent(script))
    path = folder / "agent.toml"
    path.write_text(f'name = "t"\nmodel = "scripted:script.toml"\n{extra}')
    return path


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


@pytest.mark.parametrize("path", ["a:b:c", "tools:smile:now"])
def test_a_tool_path_is_printed_as_written(tmp_path: Path, path: str) -> None:
    done = hango(
        "run", "--agent", str(agent(tmp_path, f'tools = ["{path}"]\n')), "hi", cwd=tmp_path
    )
    line = one_line(done)
    assert f"'{path}'" in line  # no emoji in place of ":b:" or ":smile:"


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ("[[turns]]\ntext = 5\n", "turn 0: expected a string, got int 5 @ turns[0].text"),
        (
            '[[turns]]\ntext = "a"\n[[turns]]\ntext = "b"\nusage = { output_tokens = -1 }\n',
            "turn 1: expected a token count (an integer >= 0), got -1 "
            "@ turns[1].usage.output_tokens",
        ),
    ],
)
def test_a_malformed_script_names_the_turn(tmp_path: Path, script: str, expected: str) -> None:
    done = hango("run", "--agent", str(agent(tmp_path, script=script)), "hi", cwd=tmp_path)
    line = one_line(done)
    assert line.endswith(expected) and "script.toml" in line


@pytest.mark.parametrize(
    "url",
    ["mysql://app:s3cret-pw@db.internal/prod", "postgresql://app:s3cret-pw@127.0.0.1:1/prod"],
)
def test_a_database_url_in_an_error_never_shows_its_password(tmp_path: Path, url: str) -> None:
    done = hango("runs", "list", cwd=tmp_path, db=url)
    assert done.returncode != 0
    assert "s3cret-pw" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


@pytest.mark.anyio
async def test_an_in_memory_store_runs_an_agent() -> None:
    store = await open_store("sqlite:///:memory:")
    try:
        harness = Harness(store, model=ScriptedModel.from_turns([{"text": "hello"}]), settings={})
        finished = await harness.run(AgentDefinition(name="t", model="scripted:inline"), "hi")
        assert finished.status is RunStatus.COMPLETED
        messages = await store.load_messages(
            harness.tenant_id, (await store.get_run(harness.tenant_id, finished.run_id)).session_id
        )
        assert [m.text for m in messages] == ["hi", "hello"]
    finally:
        await store.aclose()
