"""Lenient inputs are refused in one line, long prompts come from standard input or a file
(issue "Run integrity II", items 17, 18 and 19)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner

from hango.cli import main


def agent(folder: Path) -> Path:
    (folder / "script.toml").write_text('[[turns]]\ntext = "done"\n')
    path = folder / "agent.toml"
    path.write_text('name = "t"\nmodel = "scripted:script.toml"\n')
    return path


def hango(folder: Path, *args: str, input: str | None = None) -> tuple[int, str, str]:
    db = f"sqlite:///{folder / 'hango.db'}"
    result = CliRunner().invoke(main, [*args], input=input, env={"HANGO_DATABASE_URL": db})
    return result.exit_code, result.stdout, result.stderr


def one_line(code: int, err: str) -> str:
    assert code == 2, err
    assert "Traceback" not in err
    (line,) = err.strip().splitlines()
    return line


def runs(folder: Path) -> list[dict[str, object]]:
    code, out, err = hango(folder, "runs", "list", "--json")
    assert code == 0, err
    listed: list[dict[str, object]] = json.loads(out)
    return listed


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["run", "--agent", "agent.toml", ""], "the message (MESSAGE) is empty"),
        (["run", "--agent", "agent.toml", "  \n\t"], "the message (MESSAGE) is empty"),
        (["run", "--agent", "agent.toml"], "give the message as MESSAGE, -"),
        (["submit", "--agent", "agent.toml", ""], "the message (MESSAGE) is empty"),
        (
            ["run", "--agent", "agent.toml", "--base-url", "http://127.0.0.1:1/v1", "hi"],
            "--base-url: model 'scripted:script.toml' has no base URL",
        ),
        (["runs", "list", "--limit", "-1"], "-1 is not in the range x>=1"),
        (["runs", "list", "--limit", "0"], "0 is not in the range x>=1"),
        (["runs", "list", "--db", "sqlite:///no/such/folder/x.db"], "folder no/such/folder"),
        (["run", "--agent", "agent.toml", "--message-file", "missing.md"], "missing.md"),
    ],
)
def test_a_lenient_input_is_one_line_and_records_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    agent(tmp_path)
    code, _, err = hango(tmp_path, *args)
    assert expected in one_line(code, err)
    assert not (tmp_path / "no").exists()  # the missing folder was not made
    assert runs(tmp_path) == []


def test_the_message_comes_from_standard_input_or_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 3 MB prompt (past the size of an argument list) piped in or read from a file is the
    run's user message, byte for byte."""
    monkeypatch.chdir(tmp_path)
    agent(tmp_path)
    big = "x" * 3_000_000 + "\nlast line ünïcode\n"
    code, out, err = hango(tmp_path, "run", "--agent", "agent.toml", "--json", "-", input=big)
    assert code == 0, err
    piped = json.loads(out)["run_id"]
    (tmp_path / "prompt.md").write_text("from a file\n", encoding="utf-8")
    code, out, err = hango(
        tmp_path, "submit", "--agent", "agent.toml", "--json", "--message-file", "prompt.md"
    )
    assert code == 0, err
    queued = json.loads(out)["run_id"]
    code, out, err = hango(tmp_path, "runs", "show", "--json", piped)
    assert json.loads(out)["messages"][0]["content"][0]["text"] == big
    code, out, err = hango(tmp_path, "runs", "show", "--json", queued)
    assert json.loads(out)["messages"][0]["content"][0]["text"] == "from a file\n"
    # Both ways at once is refused.
    code, _, err = hango(
        tmp_path, "run", "--agent", "agent.toml", "--message-file", "prompt.md", "hi"
    )
    assert "give the message as MESSAGE" in one_line(code, err)


def test_runs_list_reads_only_each_runs_first_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`runs list` reads the one message it shows: a later message of the session that no
    longer decodes does not stop the list (it would if the history were loaded)."""
    monkeypatch.chdir(tmp_path)
    agent(tmp_path)
    code, out, err = hango(tmp_path, "run", "--agent", "agent.toml", "--json", "first prompt")
    assert code == 0, err
    with sqlite3.connect(tmp_path / "hango.db") as conn:
        rows = conn.execute("UPDATE messages SET content = '{garbage' WHERE seq > 0").rowcount
    assert rows >= 1
    code, out, err = hango(tmp_path, "runs", "list")
    assert code == 0, err
    assert out.rstrip().endswith("\tcompleted\tfirst prompt")
    # The history itself still says which row is bad.
    code, _, err = hango(tmp_path, "runs", "show", out[:8])
    assert "message 1 of session" in one_line(code, err)
