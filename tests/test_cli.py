"""The ``hango`` command, run as a real process (and under a real pseudo-terminal)."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import shutil
import signal
import sqlite3
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pyte
import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "examples" / "demo" / "agent.toml"
ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def hango(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"HANGO_DATABASE_URL": f"sqlite:///{cwd / 'hango.db'}", "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "hango", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip


def fast_demo(folder: Path) -> Path:
    """A copy of the demo agent without the pauses meant for people watching."""
    shutil.copytree(DEMO.parent, folder / "demo")
    script = folder / "demo" / "script.toml"
    script.write_text(script.read_text().replace("delay_ms = 12", "delay_ms = 0"))
    return folder / "demo" / "agent.toml"


def spawn_in_terminal(
    args: Sequence[str], cwd: Path, env: dict[str, str], cols: int = 100, rows: int = 30
) -> tuple[int, int]:
    """``python -m hango ARGS`` on a real pseudo-terminal of ``cols`` x ``rows``; returns the
    child's pid and the terminal's master end."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: hango on a real terminal
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.chdir(cwd)
        os.execve(sys.executable, [sys.executable, "-m", "hango", *args],
                  env | {"TERM": "xterm-256color"})  # fmt: skip
    return pid, fd


def read_all(fd: int, timeout: float = 60) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], deadline - time.monotonic())
        if not ready:
            break
        try:
            chunk = os.read(fd, 65536)
        except OSError:  # the child is gone and the terminal closed
            break
        if not chunk:
            break
        out += chunk
    return out


def screen_text(output: bytes, cols: int = 100, rows: int = 30) -> list[str]:
    """Every line a person saw, scrolled-off ones included, as a terminal shows them."""
    screen = pyte.HistoryScreen(cols, rows, history=10_000)
    pyte.ByteStream(screen).feed(output)
    history = ["".join(line[x].data for x in range(cols)) for line in screen.history.top]
    lines = [line.rstrip() for line in [*history, *screen.display]]
    while lines and not lines[-1]:
        lines.pop()
    return lines


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
        # One at a time: note b waits behind slow, so Ctrl-C leaves it unrun.
        extra='tools = ["slow_tools:note", "slow_tools:slow"]\nmax_tool_concurrency = 1\n',
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
    output += read_all(fd, timeout=10)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130
    assert (tmp_path / "calls.log").read_text().split() == ["a", "slow"]

    (run,) = json.loads(hango("runs", "list", "--json", cwd=tmp_path).stdout)
    assert run["status"] == "cancelled"
    (tmp_path / "fast").touch()
    # The hint, pasted as printed into a shell that has no HANGO_DATABASE_URL: it carries --db.
    plain = ANSI.sub(b"", output).decode().replace("\r", "")
    hint = plain.split("resume with:\n", 1)[1].splitlines()[0].strip()
    assert f"resume {run['run_id']} --db sqlite:///" in hint
    # Under `uv run` (as `uv run pytest` is), the hint says so; this terminal is elsewhere.
    assert hint.startswith("uv run --project ") == bool(os.environ.get("UV_RUN_RECURSION_DEPTH"))
    resumed = paste(hint, tmp_path)
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


def paste(line: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``line`` run by a shell in ``cwd``, as a person pasting it would, without the test's
    database variable (uv found even when only ``uv run`` knew where it is)."""
    env = {k: v for k, v in os.environ.items() if k != "HANGO_DATABASE_URL"} | {"NO_COLOR": "1"}
    if os.environ.get("UV"):
        env["PATH"] = f"{Path(os.environ['UV']).parent}{os.pathsep}{env.get('PATH', '')}"
    return subprocess.run(
        ["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_resume_refuses_a_run_whose_claim_is_live_and_takes_it_over_once_lapsed(
    tmp_path: Path,
) -> None:
    """kill -9 leaves a foreground run marked running under its claim: resume refuses it
    (RunBusy: its process might still be executing it) until the claim lapses; --force waits
    for that, and without it, once lapsed, a plain resume recovers the run."""
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
    env = os.environ | {
        "HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}",
        "HANGO_RUN_LEASE_SECONDS": "120",
    }
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
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    (line,) = refused.stderr.strip().splitlines()
    assert f"run {run['run_id']} is being executed by " in line and "--force" in line
    with sqlite3.connect(tmp_path / "hango.db") as db:  # the dead process's claim lapses
        db.execute("UPDATE runs SET lease_expires_at = '2000-01-01T00:00:00.000000+00:00'")
    # Continuing the session says which command recovers the crashed run, in one line.
    busy = hango(
        "run", "--agent", str(agent), "--session", run["session_id"][:8], "more", cwd=tmp_path
    )  # fmt: skip
    assert busy.returncode == 2 and "Traceback" not in busy.stderr
    (line,) = busy.stderr.strip().splitlines()
    assert f"has run {run['run_id']} still marked running" in line
    recover = line.split("recover it with: ", 1)[1]
    assert f"resume {run['run_id']} --db" in recover and "--force" not in recover
    (tmp_path / "fast").touch()
    forced = paste(recover, tmp_path)
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


def test_terminal_run_renders_markdown_a_live_plan_and_spans_after_the_answer(
    tmp_path: Path,
) -> None:
    """What a person sees: the answer rendered as markdown, the plan once (updated in place,
    not reprinted), tool results by their first lines, and --trace console's spans after the
    whole run, never inside the streamed answer."""
    agent = fast_demo(tmp_path)
    env = os.environ | {"HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}"}
    pid, fd = spawn_in_terminal(
        ["run", "--trace", "console", "--agent", str(agent), "What are the open risks?"],
        tmp_path, env,
    )  # fmt: skip
    output = read_all(fd)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")
    lines = screen_text(output)
    text = "\n".join(lines)

    # Markdown: bold and code spans render as styles, the list keeps its numbers.
    assert "**Stale readings**" not in text and "`STALE_AFTER_S`" not in text
    assert any(line.strip().startswith("1 Stale readings") for line in lines), text
    # The plan: one checklist, the final one, above the answer; no stale copy anywhere.
    assert [line for line in lines if line.startswith("Plan (")] == ["Plan (4/4 done)"]
    assert "plan 1/4 done" not in text  # the piped form's progress lines
    plan = lines.index("Plan (4/4 done)")
    answer = lines.index("Two open risks, both from the files:")
    done = next(i for i, line in enumerate(lines) if line.startswith("completed ("))
    assert plan < answer < done
    # A result shows its first lines, then how many more there are.
    assert "    … 4 more lines" in lines
    # Spans come after the run's last line, the answer's lines stay together.
    spans = [i for i, line in enumerate(lines) if "  INTERNAL  " in line or "  CLIENT  " in line]
    assert spans and min(spans) > done
    assert lines[answer + 1] == "" and lines[answer + 2].strip().startswith("1 Stale readings")


def test_piped_output_is_plain(tmp_path: Path) -> None:
    agent = fast_demo(tmp_path)
    done = hango("run", "--agent", str(agent), "What are the open risks?", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "\x1b[" not in out
    assert "**Stale readings**" in out  # markdown stays as written
    assert "plan 1/4 done; now: Read the limits and the incident log" in out.splitlines()
    assert out.count("Plan (4/4 done)") == 1


def test_run_jsonl_streams_every_event_as_one_object_a_line(tmp_path: Path) -> None:
    agent = fast_demo(tmp_path)
    done = hango("run", "--jsonl", "--agent", str(agent), "What are the open risks?", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "run_started" and kinds[-1] == "run_finished"
    assert {"text_delta", "message_stop", "message_completed", "tool_call_started",
            "tool_call_finished", "todos_updated", "turn_finished"} <= set(kinds)  # fmt: skip
    assert events[-1]["status"] == "completed" and events[-1]["run_id"] == events[0]["run_id"]
    blocked = [e for e in events if e["type"] == "tool_call_finished" and e["result"]["is_error"]]
    assert [e["call"]["name"] for e in blocked] == ["search", "edit_file"]
    # The answer's text deltas, since the last turn ended, make up its final message.
    final = max(i for i, kind in enumerate(kinds) if kind == "message_completed")
    start = max(i for i, kind in enumerate(kinds[:final]) if kind == "turn_finished")
    streamed = "".join(e["text"] for e in events[start:final] if e["type"] == "text_delta")
    assert events[final]["message"]["content"] == [{"type": "text", "text": streamed}]
    assert streamed.startswith("Two open risks")


def test_run_json_prints_the_answer(tmp_path: Path) -> None:
    agent = write_agent(tmp_path, '[[turns]]\ntext = "The **answer**."\n')
    done = hango("run", "--agent", str(agent), "--json", "hi", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["answer"] == "The **answer**."
    both = hango("run", "--agent", str(agent), "--json", "--jsonl", "hi", cwd=tmp_path)
    assert both.returncode == 2 and "choose one" in both.stderr


def test_runs_list_at_80_columns_keeps_ids_and_status_whole(tmp_path: Path) -> None:
    """On a real 80-column terminal only the prompt gives way: every id is its whole unique
    8-character prefix (never "d32f06…") and every status word is whole (issue 27 item 13)."""
    agent = fast_demo(tmp_path)
    long = "What are the open risks in this project, file by file, with the fix for each? " * 3
    first = hango("run", "--agent", str(agent), "--json", long, cwd=tmp_path)
    run_id = json.loads(first.stdout)["run_id"]
    env = os.environ | {"HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}"}
    pid, fd = spawn_in_terminal(["runs", "list"], tmp_path, env, cols=80)
    lines = screen_text(read_all(fd), cols=80)
    os.waitpid(pid, 0)
    header, row = lines
    assert header.split() == ["run", "agent", "session", "started", "status", "prompt"]
    assert row.split()[0] == run_id[:8] and "completed" in row.split()
    assert "What are the open" in row and row.endswith("…") and len(row) <= 80


def test_runs_list_columns_and_id_prefixes(tmp_path: Path) -> None:
    agent = fast_demo(tmp_path)
    first = hango("run", "--agent", str(agent), "--json", "What are the open risks?", cwd=tmp_path)
    summary = json.loads(first.stdout)
    session = summary["session_id"]
    again = hango(
        "run", "--agent", str(agent), "--session", session[:8], "--json", "And the fix?",
        cwd=tmp_path,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["session_id"] == session

    # Piped: plain and complete, one tab-separated line per run (full ids, whole prompt).
    listed = hango("runs", "list", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    newest, oldest = [line.split("\t") for line in listed.stdout.splitlines()]
    run_id = summary["run_id"]
    assert oldest[:3] == [run_id, "demo", session] and oldest[4:] == [
        "completed", "What are the open risks?"
    ]  # fmt: skip
    assert newest[1:3] == ["demo", session] and newest[5] == "And the fix?"
    rows = json.loads(hango("runs", "list", "--json", cwd=tmp_path).stdout)
    assert [(r["agent"], r["prompt"]) for r in rows] == [
        ("demo", "And the fix?"), ("demo", "What are the open risks?")
    ]  # fmt: skip

    shown = hango("runs", "show", run_id[:6], cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(f"run {run_id}")
    # A truncated result says so: first lines, then how many more.
    assert "    … 4 more lines" in shown.stdout.splitlines()
    missing = hango("runs", "show", "ffff0000", cwd=tmp_path)
    other = "ffff0000" if not run_id.startswith("ffff0000") else "0000ffff"
    missing = hango("runs", "show", other, cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == f"error: no run id starts with '{other}'"
    short = hango("resume", run_id[:3], cwd=tmp_path)
    assert short.returncode == 2 and "at least 4" in short.stderr


def test_help_and_no_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top = hango("-h", cwd=tmp_path)
    assert top.returncode == 0 and "Usage: python -m hango" in top.stdout
    sub = hango("runs", "list", "-h", cwd=tmp_path)
    assert sub.returncode == 0 and "--limit" in sub.stdout
    from importlib.metadata import entry_points

    every = ",".join(ep.name for ep in entry_points(group="hango"))
    monkeypatch.setenv("HANGO_DISABLE_PLUGINS", every)
    none = hango("plugins", cwd=tmp_path)
    assert none.returncode == 0
    assert none.stdout.startswith("No middleware plugins are installed")
    assert json.loads(hango("plugins", "--json", cwd=tmp_path).stdout) == []


def _script(folder: Path) -> Path:
    (folder / "bin").mkdir(parents=True)
    script = folder / "bin" / "hango"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return folder


@pytest.mark.parametrize(
    ("uv", "where", "on_path", "expected"),
    [
        (True, "project", False, ["uv", "run", "hango"]),
        (True, "subfolder", False, ["uv", "run", "hango"]),
        (True, "elsewhere", False, ["uv", "run", "--project", "{project}", "hango"]),
        (False, "elsewhere", True, ["hango"]),
        (False, "elsewhere", False, ["{project}/.venv/bin/hango"]),
    ],
)
def test_the_hint_starts_hango_the_way_that_works_here(
    tmp_path: Path, uv: bool, where: str, on_path: bool, expected: list[str]
) -> None:
    from hango.cli.resume_hint import command, invocation

    project = tmp_path / "project"
    venv = _script(project / ".venv")
    (project / "subfolder").mkdir()
    (tmp_path / "elsewhere").mkdir()
    cwd = project if where == "project" else project / where if where == "subfolder" else (
        tmp_path / "elsewhere"
    )  # fmt: skip
    env = {"PATH": f"{venv / 'bin'}:/usr/bin" if on_path else "/usr/bin"}
    if uv:
        env |= {"UV_RUN_RECURSION_DEPTH": "1", "VIRTUAL_ENV": str(venv)}
    got = invocation(env, cwd, prefix=str(venv))
    assert got == [w.format(project=project.resolve()) for w in expected]
    line = command(["resume", "abc"], db="sqlite:///my db.sqlite", tenant="t-1", env=env, cwd=cwd,
                   options=["--model", "openai:x y"])  # fmt: skip
    assert line.startswith("HANGO_TENANT=t-1 ")
    assert line.endswith("resume abc --db 'sqlite:///my db.sqlite' --model 'openai:x y'")


def test_a_slow_tool_shows_a_spinner_with_its_elapsed_time(tmp_path: Path) -> None:
    (tmp_path / "slow_tool.py").write_text(
        "import time\nfrom hango import tool\n\n@tool\ndef brew(seconds: float) -> str:\n"
        '    """Wait."""\n    time.sleep(seconds)\n    return "brewed"\n'
    )
    agent = write_agent(
        tmp_path,
        '[[turns]]\ntool_calls = [{ name = "brew", input = { seconds = 1.6 } }]\n'
        '[[turns]]\ntext = "Done."\n',
        extra='tools = ["slow_tool:brew"]\n',
    )
    env = os.environ | {"HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}"}
    pid, fd = spawn_in_terminal(["run", "--agent", str(agent), "go"], tmp_path, env)
    output = read_all(fd)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 0, output.decode(errors="replace")
    # While it ran: a spinner frame (braille dots) with the tool's name and a clock.
    drawn = ANSI.sub(b"", output).decode()
    assert re.search(r"[⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏] brew  1\.\d s", drawn), drawn
    # Afterwards the spinner is gone and the result says how long the call took.
    lines = screen_text(output)
    assert not any("⠋" in line or " brew  1." in line for line in lines)
    assert any(re.fullmatch(r"  ← brewed  \(1\.\d s\)", line) for line in lines), lines


def test_a_failed_run_prints_the_command_that_resumes_it(tmp_path: Path) -> None:
    # The script ends after a tool call: the next model call fails and so does the run.
    agent = write_agent(tmp_path, '[[turns]]\ntool_calls = [{ name = "nowhere", input = {} }]\n')
    failed = hango("run", "--agent", str(agent), "--json", "go", cwd=tmp_path)
    assert failed.returncode == 1
    summary = json.loads(failed.stdout)
    assert summary["status"] == "failed" and summary["answer"] is None
    words, command = failed.stderr.strip().splitlines()[-2:]
    assert words == "resume with:"
    assert f"resume {summary['run_id']} --db sqlite:///" in command
    assert command.endswith("--json")
