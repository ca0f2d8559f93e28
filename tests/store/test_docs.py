"""docs/how-to/run-on-postgres.md shows real commands: every ``hango ...`` line in it parses."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from click.testing import CliRunner

from hango.cli import main

GUIDE = Path(__file__).parents[2] / "docs" / "how-to" / "run-on-postgres.md"


def documented_commands() -> list[list[str]]:
    text = GUIDE.read_text(encoding="utf-8")
    blocks = re.findall(r"^```(?:sh|ini)\n(.*?)^```", text, flags=re.MULTILINE | re.DOTALL)
    lines = [line.split(" #")[0].strip() for block in blocks for line in block.splitlines()]
    lines = [line.removeprefix("ExecStart=/opt/hango/bin/") for line in lines]
    found = [shlex.split(line)[1:] for line in lines if line.startswith("hango ")]
    # The test command line starts with an environment variable; it is not a hango command.
    return [argv for argv in found if not re.match(r"^[A-Z_]+=", argv[0])]


def test_every_hango_command_in_the_postgres_guide_parses() -> None:
    commands = documented_commands()
    assert {argv[0] for argv in commands} >= {"db", "submit", "worker", "runs"}
    for argv in commands:
        # --help last: the options before it must exist, with values of the right arity.
        result = CliRunner().invoke(main, [*argv, "--help"])
        assert result.exit_code == 0, (argv, result.output)


def test_the_guides_settings_table_names_each_setting_with_its_default_in_the_code() -> None:
    from hango.agent.storable import DEFAULT_MAX_RESULT_CHARS
    from hango.run.worker import db_wait_seconds
    from hango.store.retry import DEFAULT_RETRY_SECONDS

    text = GUIDE.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(HANGO_[A-Z_]+)` \| ([^|]+?) \|", text, flags=re.MULTILINE))
    assert rows == {
        "HANGO_DB_RETRY_SECONDS": f"{DEFAULT_RETRY_SECONDS:g}",
        "HANGO_DB_WAIT_SECONDS": "no limit",
        "HANGO_TOOL_RESULT_MAX_CHARS": f"{DEFAULT_MAX_RESULT_CHARS}",
    }
    assert db_wait_seconds({}) is None  # "no limit"
