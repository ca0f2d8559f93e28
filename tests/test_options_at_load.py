"""Options that name a tool or a Python object are checked when the agent loads, before a run
is recorded (issue "Run integrity II", item 5): a typo is one line naming the table and key,
not a tool left ungated or unlimited, nor a predicate that fails mid-run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from hango.cli import main

AGENT = """
name = "t"
model = "scripted:script.toml"
tools = ["my_tools:deploy"]
{options}
"""
TOOLS = '''
import hango

@hango.tool
def deploy(env: str) -> str:
    """Deploy."""
    return "deployed " + env
'''


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (
            "[options.human_in_the_loop]\ninterrupt_on = { deplyo = true }",
            "[options.human_in_the_loop]: interrupt_on.deplyo: no tool 'deplyo' in this run",
        ),
        (
            "[options.human_in_the_loop]\ninterrupt_on = { deploy = true }\n"
            'when = { deploy = "no_such_module:check" }',
            "[options.human_in_the_loop]: when.deploy = 'no_such_module:check': "
            "ModuleNotFoundError",
        ),
        (
            "[options.limits.run.per_tool]\ndeplyo = 1",
            "[options.limits]: run.per_tool.deplyo: no tool 'deplyo' in this run",
        ),
    ],
    ids=["interrupt_on", "when", "per_tool"],
)
def test_an_option_naming_nothing_is_one_line_before_any_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, options: str, expected: str
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "agent.toml").write_text(AGENT.format(options=options))
    (tmp_path / "script.toml").write_text('[[turns]]\ntext = "hi"\n')
    (tmp_path / "my_tools.py").write_text(TOOLS)
    db = f"sqlite:///{tmp_path / 'hango.db'}"
    result = CliRunner().invoke(main, ["run", "--agent", "agent.toml", "--db", db, "go"])
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "agent.toml" in line and expected in line, line
    listed = CliRunner().invoke(main, ["runs", "list", "--json", "--db", db])
    assert json.loads(listed.stdout) == []
