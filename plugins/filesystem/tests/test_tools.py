"""One tool suite, on both backends (``local`` on a real tmp dir; ``store`` in real SQLite and
PostgreSQL): results, paging by lines and by characters, clear failures, bounded results that
say when they were cut, permissions, per-batch scratch and call order within a batch."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import anyio
import pytest

from hango import RunStore, ToolResult, ToolUseBlock
from hango.middleware import Interrupt, ToolCallRequest
from hango_filesystem.tools import Limits

from .conftest import Ws, make_ws

pytestmark = pytest.mark.anyio


def pages_back(ws_pages: list[str]) -> str:
    """Reassemble read_file pages: rows are 'NNNNNN?\\t' + text; '+' rows continue a line."""
    lines: list[str] = []
    for page in ws_pages:
        for row in page.split("\n"):
            if row.startswith("[Rows "):
                continue
            head, _, text = row.partition("\t")
            if head.endswith("+"):
                lines[-1] += text
            else:
                lines.append(text)
    return "\n".join(lines) + "\n"


async def read_all(ws: Ws, path: str, **kw: int) -> tuple[str, int]:
    pages, offset = [], 0
    while True:
        result = await ws.call("read_file", path=path, offset=offset, **kw)
        assert not result.is_error, result.content
        pages.append(result.content)
        found = re.search(r"offset=(\d+)\)\.\]$", result.content)
        if found is None:
            return pages_back(pages), len(pages)
        offset = int(found.group(1))


async def test_write_read_ls_delete_round_trip(ws: Ws) -> None:
    assert (await ws.call("write_file", path="/src/app.py", content="a = 1\nb = 2\n")).content == (
        "Wrote /src/app.py (12 bytes)."
    )
    read = await ws.call("read_file", path="src/app.py")
    assert read.content == "     1 \ta = 1\n     2 \tb = 2"
    assert (await ws.call("ls", path="/")).content.splitlines()[-1] == "/src/"
    assert (await ws.call("ls", path="/src")).content == "/src/app.py (12 bytes)"
    assert (await ws.call("delete_file", path="/src/app.py")).content == "Deleted /src/app.py."
    missing = await ws.call("read_file", path="/src/app.py")
    assert missing.is_error and missing.content == "read_file: /src/app.py does not exist"
    assert (await ws.call("delete_file", path="/src/app.py")).is_error
    folder = await ws.call("read_file", path="/")
    assert folder.is_error and "is a folder" in folder.content


async def test_read_file_pages_by_lines_and_by_characters(ws: Ws) -> None:
    text = "".join(f"line {i}\n" for i in range(1, 101))
    await ws.call("write_file", path="/f.txt", content=text)
    page = await ws.call("read_file", path="/f.txt", offset=10, limit=5)
    assert page.content.splitlines()[0] == "    11 \tline 11"
    assert page.content.splitlines()[-1] == (
        "[Rows 11-15 of 100 (lines 11-15 of 100). Lines over 2000 characters take several "
        "rows, marked '+'. Continue with read_file(path='/f.txt', offset=15).]"
    )
    assert (await read_all(ws, "/f.txt", limit=7))[0] == text
    past = await ws.call("read_file", path="/f.txt", offset=100)
    assert past.content == "/f.txt: offset 100 is past the end (100 rows)."


async def test_a_one_line_json_file_is_read_in_bounded_pages(ws: Ws) -> None:
    # deepagents#553: one long line must not overflow the context.
    doc = json.dumps({"items": [{"id": i, "name": f"item-{i}" * 3} for i in range(12_000)]})
    assert "\n" not in doc and len(doc) > 500_000
    await ws.call("write_file", path="/big.json", content=doc)
    first = await ws.call("read_file", path="/big.json")
    assert len(first.content) <= 40_000 + 300
    back, pages = await read_all(ws, "/big.json")
    assert back == doc + "\n"
    assert pages == -(-len(doc) // 2000 // 19) or pages > 10  # bounded pages, many of them


async def test_edit_file_fails_clearly_on_zero_or_several_matches(ws: Ws) -> None:
    await ws.call("write_file", path="/c.py", content="x = 1\ny = 1\nx = 1\n")
    none = await ws.call("edit_file", path="/c.py", old_string="z = 1", new_string="z = 2")
    assert none.is_error and "old_string was not found; the file is unchanged" in none.content
    many = await ws.call("edit_file", path="/c.py", old_string="x = 1", new_string="x = 2")
    assert many.is_error and "occurs 2 times (lines 1, 3)" in many.content
    assert "replace_all=true" in many.content
    assert "x = 1\ny = 1\nx = 1" in pages_back([(await ws.call("read_file", path="/c.py")).content])
    one = await ws.call("edit_file", path="/c.py", old_string="y = 1", new_string="y = 9")
    assert one.content == "Edited /c.py: 1 replacement."
    both = await ws.call(
        "edit_file", path="/c.py", old_string="x = 1", new_string="x = 2", replace_all=True
    )
    assert both.content == "Edited /c.py: 2 replacements."
    assert pages_back([(await ws.call("read_file", path="/c.py")).content]) == (
        "x = 2\ny = 9\nx = 2\n"
    )
    same = await ws.call("edit_file", path="/c.py", old_string="x", new_string="x")
    assert same.is_error


async def test_glob_and_grep_over_folders_with_all_output_modes(ws: Ws) -> None:
    await ws.call("write_file", path="/src/a.py", content="import os\nTODO: one\n")
    await ws.call("write_file", path="/src/pkg/b.py", content="TODO: two\nTODO: three\n")
    await ws.call("write_file", path="/docs/readme.md", content="TODO: docs\n")
    globbed = await ws.call("glob", pattern="**/*.py")
    assert globbed.content == "/src/a.py (20 bytes)\n/src/pkg/b.py (22 bytes)"
    assert (await ws.call("glob", pattern="*.py", path="/src")).content == "/src/a.py (20 bytes)"
    assert (await ws.call("glob", pattern="/docs/*.md")).content == "/docs/readme.md (11 bytes)"
    files = await ws.call("grep", pattern="TODO")
    assert files.content == "/docs/readme.md\n/src/a.py\n/src/pkg/b.py"
    content = await ws.call("grep", pattern=r"TODO: t\w+", output_mode="content")
    assert content.content == "/src/pkg/b.py:1:TODO: two\n/src/pkg/b.py:2:TODO: three"
    counted = await ws.call("grep", pattern="TODO", glob="**/*.py", output_mode="count")
    assert counted.content == "/src/a.py:1\n/src/pkg/b.py:2"
    bad = await ws.call("grep", pattern="(")
    assert bad.is_error and "not a valid regular expression" in bad.content
    assert (await ws.call("glob", pattern="*.rs")).content == "No files match '*.rs' in /."


async def test_every_result_is_bounded_and_says_it_was_cut(kind: str, root: Path, store) -> None:  # type: ignore[no-untyped-def]
    ws = make_ws(kind, root, store, limits=Limits(max_entries=3, max_scan=5, match_chars=20))
    for i in range(8):
        await ws.call("write_file", path=f"/d/f{i}.txt", content=f"hit {'x' * 50}\n")
    listing = (await ws.call("ls", path="/d")).content.splitlines()
    assert len(listing) == 4 and listing[-1].startswith("[Cut: 3 of 8 entries shown.")
    globbed = (await ws.call("glob", pattern="**/*.txt")).content
    assert "[Cut: 3 of 5 matches shown." in globbed
    assert "[Cut: only the first 5 files under / were searched." in globbed
    grep = (await ws.call("grep", pattern="hit", output_mode="content")).content.splitlines()
    assert grep[0] == "/d/f0.txt:1:hit xxxxxxxxxxxxxxxx..."
    assert grep[3] == "[Cut at 3 results. Narrow the pattern, path or glob.]"


async def test_permissions_deny_read_only_and_symlinked_folders(
    kind: str,
    root: Path,
    store,  # type: ignore[no-untyped-def]
) -> None:
    rules = [
        {"paths": ["secret/**"], "operations": ["read", "write", "delete"], "mode": "deny"},
        {"paths": ["docs/**"], "operations": ["write", "delete"], "mode": "deny"},
    ]
    ws = make_ws(kind, root, store, permissions=rules)
    if kind == "local":
        (root / "secret").mkdir()
        (root / "secret" / "key.txt").write_text("KEY\n")
        (root / "docs").mkdir()
        (root / "docs" / "guide.md").write_text("guide\n")
        os.symlink("secret", root / "public")  # deepagentsjs#633
    else:
        open_ws = make_ws(kind, root, store)
        open_ws.state = ws.state
        await open_ws.call("write_file", path="/secret/key.txt", content="KEY\n")
        await open_ws.call("write_file", path="/docs/guide.md", content="guide\n")
    denied = await ws.call("read_file", path="/secret/key.txt")
    assert denied.is_error
    assert denied.content == (
        "read_file: path '/secret/key.txt' refused: read is denied by permissions[0] "
        "(deny read on /secret/key.txt)"
    )
    assert (await ws.call("read_file", path="/docs/guide.md")).content == "     1 \tguide"
    ro = await ws.call("edit_file", path="/docs/guide.md", old_string="guide", new_string="x")
    assert ro.is_error and "write is denied by permissions[1]" in ro.content
    assert (
        "/secret/key.txt:1:KEY"
        not in (await ws.call("grep", pattern="KEY", output_mode="content")).content
    )
    assert "/secret/key.txt" not in (await ws.call("glob", pattern="**/*")).content
    if kind == "local":
        through = await ws.call("read_file", path="/public/key.txt")
        assert through.is_error and "(deny read on /secret/key.txt)" in through.content
        assert (await ws.call("write_file", path="/public/new", content="x")).is_error
        assert not (root / "secret" / "new").exists()


async def test_an_interrupt_rule_pauses_the_call_before_it_runs(
    kind: str,
    root: Path,
    store,  # type: ignore[no-untyped-def]
) -> None:
    rules = [{"paths": ["src/**"], "operations": ["write"], "mode": "interrupt"}]
    ws = make_ws(kind, root, store, permissions=rules)
    with pytest.raises(Interrupt) as paused:
        await ws.call("write_file", path="/src/x.py", content="x")
    action = paused.value.action
    assert (action.middleware, action.tool) == ("filesystem", "write_file")
    assert "permissions[0] (interrupt write on /src/x.py)" in action.reason
    assert (await ws.call("read_file", path="/src/x.py")).is_error  # nothing was written
    assert not (await ws.call("write_file", path="/notes.txt", content="n")).is_error


async def test_batch_scratch_holds_the_mutated_paths_until_the_loop_clears_it(ws: Ws) -> None:
    await ws.call("write_file", path="/a.txt", content="a")
    await ws.call("write_file", path="/b.txt", content="b")
    await ws.call("edit_file", path="/a.txt", old_string="a", new_string="A")
    await ws.call("read_file", path="/b.txt")
    await ws.call("delete_file", path="/b.txt")
    await ws.call("edit_file", path="/nope.txt", old_string="a", new_string="A")  # failed
    assert ws.mutated == {"/a.txt", "/b.txt"}
    ws.end_batch()
    assert ws.mutated == set()


async def test_two_edits_of_one_batch_apply_in_call_order(ws: Ws) -> None:
    await ws.call("write_file", path="/order.txt", content="v0\n")
    results: dict[str, str] = {}

    async def edit(label: str, old: str, new: str) -> None:
        results[label] = (
            await ws.call("edit_file", path="/order.txt", old_string=old, new_string=new)
        ).content

    async with anyio.create_task_group() as tg:
        # Started in call order, run concurrently: the second needs the first's result.
        tg.start_soon(edit, "first", "v0", "v1")
        tg.start_soon(edit, "second", "v1", "v2")
    assert results == {
        "first": "Edited /order.txt: 1 replacement.",
        "second": "Edited /order.txt: 1 replacement.",
    }
    assert pages_back([(await ws.call("read_file", path="/order.txt")).content]) == "v2\n"


async def test_the_changing_tools_are_not_idempotent(ws: Ws) -> None:
    flags = {name: getattr(t, "idempotent", True) for name, t in ws.tools.items()}
    assert flags == {
        "ls": True,
        "read_file": True,
        "write_file": False,
        "edit_file": False,
        "glob": True,
        "grep": True,
        "delete_file": False,
    }


async def test_binary_and_non_text_files_are_refused_clearly(ws: Ws, root: Path) -> None:
    if ws.kind == "local":
        (root / "bin.dat").write_bytes(b"\x00\x01\x02" * 10)
        result = await ws.call("read_file", path="/bin.dat")
        assert result.is_error and "is a binary file (30 bytes)" in result.content
    lone = await ws.call("write_file", path="/s.txt", content="a\ud800b")
    assert lone.is_error and "lone UTF-16 surrogate" in lone.content


async def test_each_change_is_a_span_event_with_the_batch_count(
    ws: Ws, recording_span: Any, exporter: Any
) -> None:
    with recording_span():
        await ws.call("write_file", path="/a.txt", content="a")
        await ws.call("write_file", path="/b.txt", content="b")
        await ws.call("read_file", path="/a.txt")
        await ws.call("write_file", path="/a.txt", content="again")
    (span,) = exporter.get_finished_spans()
    changed = [e for e in span.events if e.name == "filesystem.file_changed"]
    assert [e.attributes["hango.filesystem.batch_changed"] for e in changed] == [1, 2, 2]
    assert [e.attributes["hango.middleware.name"] for e in changed] == ["filesystem"] * 3


async def offload(ws: Ws, call_id: str, name: str, content: str) -> str:
    """Run a call of another tool whose result is ``content`` through the middleware."""

    async def base(req: ToolCallRequest) -> ToolResult:
        return ToolResult(content)

    with ws.bound():
        result = await ws.mw.wrap_tool_call(
            ToolCallRequest(ToolUseBlock(call_id, name, {}), None, ws.state), base
        )
    return result.content


async def test_the_results_folder_is_bounded_read_only_and_honours_exclusions(
    kind: str, root: Path, store: RunStore
) -> None:
    ws = make_ws(
        kind, root, store, large_result_tokens=10, max_results_kept=2, large_result_exclude=["raw"]
    )
    big = "".join(f"line {i}\n" for i in range(100))
    assert await offload(ws, "c1", "raw", big) == big  # excluded: kept whole
    assert await offload(ws, "c2", "dump", "short") == "short"  # under the threshold
    for i in (3, 4, 5):
        preview = await offload(ws, f"c{i}", "dump", big)
        assert f"saved in full at /large_tool_results/c{i}" in preview
        assert "line 0" in preview and "line 99" in preview and "line 50" not in preview
    # deepagents#2055: the folder keeps the last two; the oldest went, content and all.
    listing = (await ws.call("ls", path="/large_tool_results")).content
    assert listing.splitlines() == [
        "/large_tool_results/c4 (790 bytes)",
        "/large_tool_results/c5 (790 bytes)",
    ]
    assert (await ws.call("read_file", path="/large_tool_results/c3")).is_error
    back, _ = await read_all(ws, "/large_tool_results/c5")
    assert back == big
    # The folder is hango's: the model reads it, never changes it.
    ro = await ws.call("delete_file", path="/large_tool_results/c5")
    assert ro.is_error and "delete is denied by the results folder" in ro.content
    assert (await ws.call("write_file", path="/large_tool_results/x", content="x")).is_error
