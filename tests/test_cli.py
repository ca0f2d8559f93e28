"""The ``hango`` command, run as a real process (and under a real pseudo-terminal)."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo" / "agent.toml"


def hango(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"HANGO_DATABASE_URL": f"sqlite:///{cwd / 'hango.db'}", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hango", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def write_agent(folder: Path, script: str, extra: str = "") -> Path:
    (folder / "script.toml").write_text(textwrap.dedent(script))
    agent = folder / "agent.toml"
    agent.write_text(f'name = "t"\nmodel = "scripted:script.toml"\n{extra}')
    return agent


def test_run_list_show(tmp_path: Path) -> None:
    done = hango("run", "--agent", str(DEMO), "What are the open risks?", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "→ list_files" in done.stdout
    assert "Two open risks" in done.stdout
    assert "completed" in done.stdout

    listed = hango("runs", "list", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    (run,) = json.loads(listed.stdout)
    assert run["status"] == "completed"

    shown = hango("runs", "show", run["run_id"], "--json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["status"] == "completed"
    roles = [m["role"] for m in doc["messages"]]
    assert roles[0] == "user" and roles[-1] == "assistant"
    assert doc["messages"][0]["content"] == [{"type": "text", "text": "What are the open risks?"}]
    assert doc["state"]["version"] == 2
    assert any(
        b["type"] == "tool_result" and b.get("is_error")
        for m in doc["messages"] for b in m["content"]
    )  # fmt: skip

    text = hango("runs", "show", run["run_id"], cwd=tmp_path)
    assert text.returncode == 0 and "Two open risks" in text.stdout


def test_run_json_summary_and_session_continuation(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, '[[turns]]\ntext = "one"\n[[turns]]\ntext = "two"\n')
    first = hango("run", "--agent", str(agent), "--json", "hi", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    summary = json.loads(first.stdout)
    assert summary["status"] == "completed" and summary["stop_reason"] == "end_turn"
    again = hango(
        "run", "--agent", str(agent), "--session", summary["session_id"], "--json", "more",
        cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    shown = json.loads(hango("runs", "show", json.loads(again.stdout)["run_id"], "--json",
                             cwd=tmp_path).stdout)  # fmt: skip
    assert [m["content"][0]["text"] for m in shown["messages"]] == ["hi", "one", "more", "two"]


@pytest.mark.parametrize(
    ("agent_text", "expected"),
    [
        ('name = "t"\nmodel = "scripted:s.toml"\nmax_turns = "ten"\n', "max_turns"),
        ('name = "t"\nmodel = "scripted:s.toml"\ncolour = "blue"\n', "colour"),
        ('model = "scripted:s.toml"\n', "name"),
        ('name = "t"\nmodel = "scripted:s.toml"\ntools = ["nowhere:thing"]\n', "tools[0]"),
        ('name = "t"\nmodel = "carrier-pigeon:x"\n', "carrier-pigeon"),
        ('name = "t\n', "agent.toml"),
        ('name = 5\nmodel = "scripted:s.toml"\n', "$.name"),
        ('name = "t"\nmodel = "scripted:s.toml"\nmax_turns = true\n', "$.max_turns"),
        ('name = "t"\nmodel = "scripted:s.toml"\nmax_turns = 0\n', "$.max_turns"),
        ('name = "t"\nmodel = "scripted:s.toml"\nmax_tokens = 2.5\n', "$.max_tokens"),
        ('name = "t"\nmodel = "scripted:s.toml"\ntool_allowlist = "add"\n', "$.tool_allowlist"),
        ('name = "t"\nmodel = "scripted:s.toml"\ntools = "m:add"\n', "$.tools"),
    ],
)
def test_bad_agent_file_is_one_clear_line(tmp_path: Path, agent_text: str, expected: str) -> None:
    (tmp_path / "s.toml").write_text('[[turns]]\ntext = "x"\n')
    (tmp_path / "agent.toml").write_text(agent_text)
    out = hango("run", "--agent", str(tmp_path / "agent.toml"), "hi", cwd=tmp_path)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0]


def test_missing_agent_file(tmp_path: Path) -> None:
    out = hango("run", "--agent", str(tmp_path / "nope.toml"), "hi", cwd=tmp_path)
    assert out.returncode == 2 and "nope.toml" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("script", "expected"),
    [
        ('[[turns]]\ntext = "ok"\n[[turns]]\nstop_reason = "whenever"\n', "turn 1"),
        ("[[turns]]\ntool_calls = [{ input = {} }]\n", "turn 0"),
        ("turns = []\n", "non-empty"),
        ("[[turns]\n", "cannot read script"),
    ],
)
def test_bad_script_is_one_clear_line(tmp_path: Path, script: str, expected: str) -> None:
    agent = write_agent(tmp_path, script)
    out = hango("run", "--agent", str(agent), "hi", cwd=tmp_path)
    assert out.returncode == 2, out.stdout
    assert "Traceback" not in out.stderr
    assert "script.toml" in out.stderr and expected in out.stderr
    assert json.loads(hango("runs", "list", "--json", cwd=tmp_path).stdout) == []


def test_a_lone_surrogate_in_a_tool_result_is_printed_not_fatal(tmp_path: Path) -> None:
    # A file name read with surrogateescape carries lone surrogates; the terminal cannot
    # encode them, and printing the result must not fail the run that stored it fine.
    (tmp_path / "odd.py").write_text(
        "from hango import tool\n\n@tool\ndef odd() -> str:\n"
        '    """A name that is not UTF-8."""\n    return "x\\udcffy"\n\nTOOLS = [odd]\n'
    )
    agent = write_agent(
        tmp_path,
        '[[turns]]\ntext = "look"\n[[turns.tool_calls]]\nname = "odd"\ninput = {}\n'
        '[[turns]]\ntext = "done"\n',
        extra='tools = ["odd:TOOLS"]\n',
    )
    env = os.environ | {
        "HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}",
        "NO_COLOR": "1",
        "PYTHONIOENCODING": "utf-8",
    }
    out = subprocess.run(
        [sys.executable, "-m", "hango", "run", "--agent", str(agent), "hi"],
        cwd=tmp_path, env=env, capture_output=True, timeout=60,
    )  # fmt: skip
    stdout = out.stdout.decode("utf-8")
    assert out.returncode == 0, out.stderr.decode("utf-8", "replace")
    assert "← x\ufffdy" in stdout and "completed" in stdout


def test_unknown_run_id(tmp_path: Path) -> None:
    out = hango("runs", "show", "00000000-0000-0000-0000-0000000000aa", cwd=tmp_path)
    assert out.returncode == 2 and "not found" in out.stderr
    bad = hango("resume", "not-a-uuid", cwd=tmp_path)
    assert bad.returncode == 2 and "not a run id" in bad.stderr


def _read_until(fd: int, needle: bytes, timeout: float) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while needle not in out:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(
                f"{needle!r} not seen; output so far: {out.decode(errors='replace')}"
            )
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
    return out


@pytest.mark.parametrize("repair", [False, True], ids=["plain", "repair"])
def test_ctrl_c_in_a_terminal_saves_cancelled_and_resume_finishes(
    tmp_path: Path, repair: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the repair plugin the resumed run finishes the batch (only the calls that had
    not completed run); with it, they are answered as interrupted and the model goes on."""
    if not repair:
        monkeypatch.setenv("HANGO_DISABLE_PLUGINS", "repair")
    (tmp_path / "slow_tools.py").write_text(
        textwrap.dedent(
            '''
            import pathlib, time
            from hango import tool

            LOG = pathlib.Path(__file__).with_name("calls.log")

            @tool
            def note(text: str) -> str:
                """Write a note."""
                with LOG.open("a") as f:
                    f.write(text + "\\n")
                return "noted " + text

            @tool
            def slow(seconds: float) -> str:
                """Sleep."""
                with LOG.open("a") as f:
                    f.write("slow\\n")
                if not pathlib.Path(__file__).with_name("fast").exists():
                    time.sleep(seconds)
                return "slept"
            '''
        )
    )
    agent = write_agent(
        tmp_path,
        """
        [[turns]]
        text = "Working on it."
        tool_calls = [
            { name = "note", input = { text = "a" } },
            { name = "slow", input = { seconds = 60 } },
            { name = "note", input = { text = "b" } },
        ]
        [[turns]]
        text = "Finished."
        """,
        extra='tools = ["slow_tools:note", "slow_tools:slow"]\n',
    )
    env = os.environ | {"HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}"}
    pid, fd = pty.fork()
    if pid == 0:  # the child: hango on a real terminal
        os.chdir(tmp_path)
        os.execve(sys.executable, [sys.executable, "-m", "hango", "run", "--agent", str(agent),
                                   "go"], env)  # fmt: skip
    output = _read_until(fd, b"slow", timeout=30)
    assert b"\x1b[" in output, "rich must colour its output on a terminal"
    time.sleep(0.3)
    os.kill(pid, signal.SIGINT)
    output += _read_until(fd, b"hango resume", timeout=30)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130
    assert (tmp_path / "calls.log").read_text().split() == ["a", "slow"]

    (run,) = json.loads(hango("runs", "list", "--json", cwd=tmp_path).stdout)
    assert run["status"] == "cancelled"
    (tmp_path / "fast").touch()
    resumed = hango("resume", run["run_id"], cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert "Finished." in resumed.stdout
    shown = json.loads(hango("runs", "show", run["run_id"], "--json", cwd=tmp_path).stdout)
    results = [b for m in shown["messages"] for b in m["content"] if b["type"] == "tool_result"]
    log = (tmp_path / "calls.log").read_text().split()
    if repair:
        assert log == ["a", "slow"]
        assert results[0]["content"] == "noted a"
        assert all(r.get("is_error") and "interrupted" in r["content"] for r in results[1:])
    else:
        assert log == ["a", "slow", "slow", "b"]
        assert [r["content"] for r in results] == ["noted a", "slept", "noted b"]
    assert len(results) == 3
    again = hango("resume", run["run_id"], cwd=tmp_path)
    assert again.returncode == 2 and "already completed" in again.stderr


def test_resume_refuses_a_running_run_unless_forced(tmp_path: Path) -> None:
    """kill -9 leaves a foreground run marked running: resume refuses it (its process might
    still be executing it) until told with --force that the process is gone."""
    (tmp_path / "sleepy.py").write_text(
        textwrap.dedent(
            '''
            import pathlib, time
            from hango import tool

            @tool
            def nap(seconds: float) -> str:
                """Sleep, unless told to hurry."""
                if not pathlib.Path(__file__).with_name("fast").exists():
                    time.sleep(seconds)
                return "rested"
            '''
        )
    )
    agent = write_agent(
        tmp_path,
        '[[turns]]\ntool_calls = [{ name = "nap", input = { seconds = 60 } }]\n'
        '[[turns]]\ntext = "Done."\n',
        extra='tools = ["sleepy:nap"]\n',
    )
    env = os.environ | {"HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "hango", "run", "--agent", str(agent), "go"],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        listed = json.loads(hango("runs", "list", "--json", cwd=tmp_path).stdout or "[]")
        shown = listed and json.loads(
            hango("runs", "show", listed[0]["run_id"], "--json", cwd=tmp_path).stdout
        )
        if shown and len(shown["messages"]) >= 2:
            break
        time.sleep(0.2)
    proc.kill()
    proc.wait()
    (run,) = json.loads(hango("runs", "list", "--json", cwd=tmp_path).stdout)
    assert run["status"] == "running"
    refused = hango("resume", run["run_id"], cwd=tmp_path)
    assert refused.returncode == 2 and "--force" in refused.stderr
    (tmp_path / "fast").touch()
    forced = hango("resume", "--force", run["run_id"], cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert json.loads(hango("runs", "list", "--json", cwd=tmp_path).stdout)[0]["status"] == (
        "completed"
    )


def test_a_final_message_no_model_streamed_is_printed(tmp_path: Path) -> None:
    # hango-limits ends the run with its own message, made without a model call: nothing is
    # streamed, and the terminal must still show why the run stopped.
    agent = write_agent(
        tmp_path,
        '[[turns]]\ntext = "one"\n[[turns.tool_calls]]\nname = "write_todos"\n'
        'input = { todos = [] }\n[[turns]]\ntext = "two"\n',
        extra="[options.limits]\nrun = { model_calls = 1 }\n",
    )
    out = hango("run", "--agent", str(agent), "hi", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "the limit of 1 model call per run was reached" in out.stdout
