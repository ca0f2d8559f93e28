"""The plugin manager and the pinned stack, with plugins installed through real entry points
(temporary distributions on sys.path, found by importlib.metadata: the ``install`` fixture)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from conftest import Install
from hango import PluginError
from hango.agent.stack import STACK_ORDER
from hango.cli import main
from hango.config import ConfigError
from hango.discovery import check_options, default_stack, discover, resolve_stack
from hango.middleware import StackConfig
from hango.plugins import PluginWarning, make_plugin_manager

#: The pinned slot the test plugin fills, and the setting that sets aside the shipped plugin
#: filling it (entry point ``retry``, middleware ``tool_retry``): every slot has one now.
SLOT_NAME = "tool_retry"
REAL_ASIDE = {"HANGO_DISABLE_PLUGINS": "retry"}


def test_plugin_installed_through_its_entry_point(install: Install) -> None:
    install("hango-testplug", "testplug", SLOT_NAME)
    pm = make_plugin_manager(env=REAL_ASIDE)
    assert pm.has_plugin("testplug")
    (placement,) = [p for p in discover(StackConfig(), pm) if p.plugin == "testplug"]
    assert (placement.distribution, placement.version) == ("hango-testplug", "1.2.3")
    assert placement.slot == STACK_ORDER.index(SLOT_NAME)
    assert placement.capabilities == ("prompt_contributor",)
    assert SLOT_NAME in [m.name for m in default_stack(StackConfig(settings=REAL_ASIDE), pm)]


def test_blocking_by_environment_variable(install: Install) -> None:
    install("hango-testplug", "testplug", SLOT_NAME)
    pm = make_plugin_manager(env={"HANGO_DISABLE_PLUGINS": " other, testplug, retry "})
    assert not pm.has_plugin("testplug")
    with pytest.warns(
        PluginWarning, match="HANGO_DISABLE_PLUGINS names no installed plugin or middleware: other"
    ):
        assert SLOT_NAME not in [m.name for m in default_stack(StackConfig(), pm)]


def test_default_stack_honours_the_settings_it_is_given(install: Install) -> None:
    install("hango-testplug", "testplug", SLOT_NAME)
    disabled = StackConfig(settings={"HANGO_DISABLE_PLUGINS": "testplug,retry"})
    assert SLOT_NAME not in [m.name for m in default_stack(disabled)]
    assert SLOT_NAME in [m.name for m in default_stack(StackConfig(settings=REAL_ASIDE))]


def test_an_unknown_name_to_disable_is_warned_about(install: Install) -> None:
    install("hango-testplug", "testplug", SLOT_NAME)
    pm = make_plugin_manager(env={"HANGO_DISABLE_PLUGINS": "testplg,todo,retry"})
    with pytest.warns(PluginWarning) as caught:
        discover(StackConfig(settings=REAL_ASIDE), pm)
    (warning,) = caught
    assert str(warning.message).startswith(
        "HANGO_DISABLE_PLUGINS names no installed plugin or middleware: testplg (installed: "
    )
    assert "testplug" in str(warning.message)
    assert pm.has_plugin("testplug") and not pm.has_plugin("todo")


def test_a_middleware_name_disables_its_middleware(install: Install) -> None:
    """HANGO_DISABLE_PLUGINS takes the names `hango plugins` shows, not only entry points."""
    install("hango-testplug", "testplug", SLOT_NAME)
    pm = make_plugin_manager(env={"HANGO_DISABLE_PLUGINS": SLOT_NAME})
    assert pm.has_plugin("testplug")
    assert SLOT_NAME not in [p.name for p in discover(StackConfig(settings={}), pm)]


def test_two_distributions_claiming_one_name_is_an_error_naming_both(install: Install) -> None:
    install("hango-first", "first", "skills")
    install("hango-second", "second", "skills")
    with pytest.raises(PluginError) as info:
        default_stack(StackConfig(), make_plugin_manager(env={}))
    message = str(info.value)
    assert "'skills'" in message and "hango-first" in message and "hango-second" in message


def test_a_plugin_that_fails_to_load_names_itself_and_blocks_only_who_needs_it(
    install: Install,
) -> None:
    install("hango-broken", "broken", "x", body="import not_a_module_anywhere\n")
    install("hango-testplug", "testplug", SLOT_NAME)
    pm = make_plugin_manager(env=REAL_ASIDE)
    (failure,) = pm.failures.values()
    assert "'broken'" in failure and "hango-broken" in failure
    assert "not_a_module_anywhere" in failure and "HANGO_DISABLE_PLUGINS=broken" in failure
    # An agent that does not need it gets its stack (the plugin is warned about, left out).
    with pytest.warns(PluginWarning, match="left out: plugin 'broken'"):
        assert SLOT_NAME in [m.name for m in default_stack(StackConfig(settings=REAL_ASIDE), pm)]
    # One that lists a middleware nobody else provides is told which plugin failed.
    with pytest.raises(ConfigError) as info, pytest.warns(PluginWarning):
        resolve_stack(StackConfig(agent_middleware=("x",), settings={}), pm)
    assert "plugins that failed: plugin 'broken'" in str(info.value)


def test_a_plugin_with_an_unknown_hook_is_rejected(install: Install) -> None:
    body = (
        "import hango.middleware\n\n@hango.middleware.hookimpl\n"
        "def hango_middlewares(config):\n    return None\n"
    )
    install("hango-typo", "typo", "x", body=body)
    pm = make_plugin_manager(env={})
    assert not pm.has_plugin("typo")
    assert "hango_middlewares" in pm.failures["typo"] and "hango-typo" in pm.failures["typo"]


def test_an_options_schema_that_is_not_json_schema_names_its_plugin(install: Install) -> None:
    body = (
        "import hango.middleware\n\n@hango.middleware.hookimpl\ndef hango_options_schema():\n"
        '    return {"sloppy": {"type": "nonsense"}}\n'
    )
    install("hango-sloppy", "sloppy", "x", body=body)
    with pytest.raises(PluginError) as info:
        check_options({"sloppy": {"a": 1}}, make_plugin_manager(env={}), source="a.toml")
    message = str(info.value)
    assert "[options.sloppy]" in message and "hango-sloppy" in message
    assert "'nonsense'" in message


def test_names_of_a_plugins_own_are_available_to_agents_not_placed(install: Install) -> None:
    install("hango-custom", "custom", "my_custom_thing")
    pm = make_plugin_manager(env={})
    assert "my_custom_thing" not in [m.name for m in default_stack(StackConfig(), pm)]
    (placement,) = [p for p in discover(StackConfig(), pm) if p.plugin == "custom"]
    assert placement.slot is None
    result = CliRunner().invoke(main, ["plugins", "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.output)}
    assert rows["my_custom_thing"]["slot"] == "available to agents"
    assert rows["my_custom_thing"]["distribution"] == "hango-custom"


def test_empty_stack_without_plugins() -> None:
    assert default_stack(StackConfig(), make_plugin_manager(load_entrypoints=False)) == []


def test_every_hook_is_documented() -> None:
    from hango import hookspecs

    hooks = [n for n in dir(hookspecs) if n.startswith("hango_")]
    assert hooks == [
        "hango_cli_commands",
        "hango_engines",
        "hango_middleware",
        "hango_options_schema",
    ]
    for name in hooks:
        doc = getattr(hookspecs, name).__doc__ or ""
        assert doc.startswith("Return")
    assert ":param config:" in (hookspecs.hango_middleware.__doc__ or "")
    assert "Example::" in (hookspecs.hango_options_schema.__doc__ or "")
    assert "Example::" in (hookspecs.hango_cli_commands.__doc__ or "")
    assert "Example::" in (hookspecs.hango_engines.__doc__ or "")
    assert hookspecs.__doc__ and "hookimpl" in hookspecs.__doc__


def test_stack_order_is_pinned() -> None:
    assert STACK_ORDER == (
        "skills", "filesystem", "subagent", "mcp", "summarization", "repair_tool_calls",
        "todo", "repeat_call", "limits", "agent", "model_fallback", "prompt_cache", "memory",
        "human_in_the_loop", "tool_retry", "tool_allowlist",
    )  # fmt: skip


def test_an_options_schema_hook_that_raises_blocks_only_its_own_tables(install: Install) -> None:
    body = (
        "import hango.middleware\n\n@hango.middleware.hookimpl\ndef hango_options_schema():\n"
        "    raise RuntimeError('schema file missing')\n"
    )
    install("hango-flaky", "flaky", "x", body=body)
    pm = make_plugin_manager(env={})
    check_options({"limits": {"run": {"model_calls": 3}}}, pm, source="a.toml")
    with pytest.raises(ConfigError) as info:
        check_options({"flaky": {"a": 1}}, pm, source="a.toml")
    message = str(info.value)
    assert message.startswith("a.toml: [options.flaky]: no installed middleware")
    assert "hango_options_schema raised RuntimeError: schema file missing" in message
    assert "hango-flaky" in message and "HANGO_DISABLE_PLUGINS=flaky" in message
