"""One bad row never hides the others (issue "Run integrity II", item 6): `runs list` lists
every run and marks the bad one; each command on the bad run names the run, the column and
what is wrong, in one line, with nothing changed."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hango.testing import HangoCli, write_agent

AGENT = 'name = "t"\nmodel = "scripted:script.toml"\n'
SCRIPT = '[[turns]]\ntext = "done"\n'

CASES = [
    ("runs", "config_json", "{garbage", "runs.config_json: not JSON"),
    ("runs", "config_json", "[]", "runs.config_json: not a JSON object (a list)"),
    ("runs", "created_at", "yesterday", "runs.created_at: Invalid isoformat string"),
    ("agents", "definition", "{garbage", "agents.definition: not JSON"),
]


@pytest.mark.parametrize(("table", "column", "value", "expected"), CASES)
def test_a_bad_row_is_named_and_hides_no_other_run(
    tmp_path: Path, table: str, column: str, value: str, expected: str
) -> None:
    write_agent(tmp_path, agent=AGENT, script=SCRIPT)
    write_agent(tmp_path / "other", agent=AGENT.replace('"t"', '"other"'), script=SCRIPT)
    cli = HangoCli(tmp_path)
    good = json.loads(cli.run("run", "--agent", "other/agent.toml", "--json", "fine").stdout)
    bad = json.loads(cli.run("run", "--agent", "agent.toml", "--json", "broken").stdout)
    with sqlite3.connect(tmp_path / "hango.db") as conn:
        if table == "runs":
            conn.execute(f"UPDATE runs SET {column} = ? WHERE id = ?", (value, bad["run_id"]))
        else:
            conn.execute(
                f"UPDATE agents SET {column} = ? WHERE id = "
                "(SELECT agent_id FROM runs WHERE id = ?)",
                (value, bad["run_id"]),
            )

    listed = cli.run("runs", "list")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("\t")[0]: line.split("\t") for line in listed.stdout.splitlines()}
    assert rows[good["run_id"]][4:] == ["completed", "fine"]
    if table == "runs":  # the run row itself is marked, with what is wrong
        assert rows[bad["run_id"]][4] == "unreadable" and expected in rows[bad["run_id"]][5]
    doc = {r["run_id"]: r for r in json.loads(cli.run("runs", "list", "--json").stdout)}
    assert doc[good["run_id"]]["problem"] is None
    assert len(doc) == 2

    for command in (
        ["runs", "show", "--json", bad["run_id"]],
        ["resume", bad["run_id"], "--approve", "call_1"],
    ):
        done = cli.run(*command)
        if table == "agents" and command[0] == "runs":
            continue  # showing a run does not read its agent's definition
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert expected in line and (bad["run_id"] in line or "agent " in line), line
    # Nothing was changed by any of it: the good run still shows, the bad value is still there.
    assert cli.run("runs", "show", good["run_id"]).returncode == 0
    with sqlite3.connect(tmp_path / "hango.db") as conn:
        kept = {r[0] for r in conn.execute(f"SELECT {column} FROM {table}")}
    assert value in kept
