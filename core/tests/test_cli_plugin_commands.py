"""Plugins add subcommands to ``hango`` through the ``hango_cli_commands`` hook."""

from __future__ import annotations

from typing import Any

import click
import pytest
from click.testing import CliRunner

from hango import cli
from hango.hookspecs import hookimpl
from hango.plugins import make_plugin_manager


@click.command("greet")
def greet() -> None:
    """Say hello."""
    click.echo("hello from a plugin")


@click.command("runs")
def shadow_runs() -> None:
    click.echo("must never run")


class Good:
    @hookimpl
    def hango_cli_commands(self) -> list[click.Command]:
        return [greet, shadow_runs]


class Broken:
    @hookimpl
    def hango_cli_commands(self) -> list[click.Command]:
        raise RuntimeError("boom")


@pytest.fixture
def plugin_cli(monkeypatch: pytest.MonkeyPatch) -> click.Group:
    def manager(**_: Any) -> Any:
        pm = make_plugin_manager(load_entrypoints=False)
        pm.register(Good(), name="good")
        pm.register(Broken(), name="broken")
        return pm

    monkeypatch.setattr(cli, "make_plugin_manager", manager)
    monkeypatch.setattr(cli._HangoGroup, "_plugin_commands", None)
    monkeypatch.setattr(cli.main, "_plugin_commands", None, raising=False)
    return cli.main


def test_a_plugin_command_runs_and_a_taken_name_or_a_failing_hook_is_left_out(
    plugin_cli: click.Group,
) -> None:
    runner = CliRunner()
    with pytest.warns(Warning) as caught:
        listing = runner.invoke(plugin_cli, ["--help"])
    assert listing.exit_code == 0, listing.output
    assert "greet" in listing.output
    messages = [str(w.message) for w in caught]
    assert any("broken" in m and "boom" in m for m in messages), messages
    assert any("'runs' is taken" in m for m in messages), messages
    done = runner.invoke(plugin_cli, ["greet"])
    assert done.exit_code == 0
    assert done.output == "hello from a plugin\n"
