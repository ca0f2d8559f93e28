"""The escape corpus and the resolver property: nothing outside the root is ever read, listed
or written, on ``local`` (a real tmp dir with hostile symlinks) and ``store``; every refusal
is an error result naming the path and the rule (never an exception that fails the run)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hango_filesystem import PathRefused, normalize, resolve_path
from hango_filesystem.paths import real_root

from .conftest import SECRET, Ws

pytestmark = pytest.mark.anyio


def hostile(root: Path, outside: Path) -> None:
    """Symlinks inside the root that point out of it, directly and through chains."""
    os.symlink(outside, root / "out")  # a linked folder (deepagentsjs#633)
    os.symlink(outside / "secret.txt", root / "chain2")
    os.symlink("chain2", root / "chain1")  # a chain ending outside (deepagentsjs PR#866)
    os.symlink("/etc", root / "etc_link")  # an absolute link
    os.symlink("loop2", root / "loop1")
    os.symlink("loop1", root / "loop2")
    os.symlink(outside / "planted.txt", root / "dangling")  # a write would create it outside
    (root / "sub").mkdir()
    os.symlink("../../outside", root / "sub" / "up")
    (root / "inside.txt").write_text("inside\n")
    os.symlink("inside.txt", root / "good_link")  # a link that stays inside


def snapshot(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


ESCAPE_PATHS = [
    "../outside/secret.txt",
    "/../outside/secret.txt",
    "../../../../../../etc/passwd",
    "a/../../outside/secret.txt",
    "./../outside/secret.txt",
    "sub/../../outside/secret.txt",
    "out/secret.txt",
    "/out/secret.txt",
    "out",
    "chain1",
    "chain2",
    "/etc_link/passwd",
    "etc_link",
    "sub/up/secret.txt",
    "sub/up",
    "loop1",
    "dangling",
    "bad\x00name",
    "\x00",
    "x\nnewline",
    "a" * 300,
    "/" + "d/" * 2100 + "f",
    "\ud800lone",
]

#: Look-alikes and encodings of traversal: file names inside the root, never a way out.
LOOKALIKES = [
    "\u2025/outside/secret.txt",  # two-dot leader
    "\uff0e\uff0e/outside/secret.txt",  # fullwidth full stops
    "%2e%2e/outside/secret.txt",
    "..\\outside\\secret.txt",
    "...",
    "..../outside",
    "notes..v2.txt",
    "..hidden",
    "trailing..",
]

GLOBS = ["**/../*", "../*", "/../**", "../outside/*", "a/**/../../*"]


@pytest.fixture
def hostile_root(kind: str, root: Path, outside: Path) -> Path:
    if kind == "local":
        hostile(root, outside)
    return root


async def test_the_escape_corpus_is_refused_entirely(
    ws: Ws, hostile_root: Path, outside: Path
) -> None:
    before = snapshot(outside)
    results = []
    for path in ESCAPE_PATHS + LOOKALIKES:
        results.append((path, await ws.call("read_file", path=path)))
        results.append((path, await ws.call("ls", path=path)))
        results.append((path, await ws.call("write_file", path=path, content="PWNED")))
        results.append(
            (path, await ws.call("edit_file", path=path, old_string=SECRET, new_string="PWNED"))
        )
        results.append((path, await ws.call("delete_file", path=path)))
        results.append((path, await ws.call("glob", pattern="**/*", path=path)))
        results.append((path, await ws.call("grep", pattern="SECRET", path=path)))
    for pattern in GLOBS:
        results.append((pattern, await ws.call("glob", pattern=pattern)))
        results.append((pattern, await ws.call("grep", pattern=".", glob=pattern)))
    results.append(("/", await ws.call("grep", pattern="SECRET", output_mode="content")))
    results.append(("/", await ws.call("glob", pattern="**/*")))
    results.append(("/", await ws.call("glob", pattern="**/secret.txt")))
    for path, result in results:
        assert SECRET not in result.content, (path, result.content)
        assert "PWNED" not in result.content
    assert snapshot(outside) == before  # nothing written, edited or deleted outside
    assert not (outside / "planted.txt").exists()
    for p in ESCAPE_PATHS:
        if ws.kind == "store" and _normalizes(p):
            continue  # a store path like out/secret.txt is just a name in the database
        read, _, write, _, delete, _, _ = [r for q, r in results if q == p]
        for result in (read, write, delete):
            assert result.is_error, (p, result.content)
    refused = [r.content for q, r in results if q in ESCAPE_PATHS and r.is_error]
    assert any("goes above the workspace root" in c for c in refused)
    assert any("contains a NUL character" in c for c in refused)
    assert any("bytes long; at most 4096" in c for c in refused)
    if ws.kind == "local":
        assert any("resolves outside the workspace root (a symlink)" in c for c in refused)
    for pattern in GLOBS:
        (glob_result, _) = [r for q, r in results if q == pattern]
        assert glob_result.is_error
        assert (
            "may not contain a '..' name" in glob_result.content or "above" in glob_result.content
        )


async def test_look_alikes_and_dots_in_names_are_file_names_inside_the_root(
    ws: Ws, root: Path, outside: Path
) -> None:
    # deepagents#5789: a name with '..' in it is a name, and the run goes on.
    for name in LOOKALIKES:
        wrote = await ws.call("write_file", path=name, content=f"content of {name}\n")
        assert not wrote.is_error, (name, wrote.content)
        read = await ws.call("read_file", path=name)
        assert f"content of {name}" in read.content
    assert (await ws.call("write_file", path="a/../b.txt", content="b")).content == (
        "Wrote /b.txt (1 bytes)."
    )
    if ws.kind == "local":
        assert (root / "notes..v2.txt").read_text() == "content of notes..v2.txt\n"
        assert (root / "\u2025" / "outside" / "secret.txt").exists()
        assert "PWNED" not in snapshot(outside).values()


async def test_symlinks_that_stay_inside_are_followed_and_checked_by_their_target(
    kind: str, root: Path, outside: Path, ws: Ws
) -> None:
    if kind == "store":
        return  # the store backend has no symlinks
    hostile(root, outside)
    assert "inside" in (await ws.call("read_file", path="good_link")).content
    listing = (await ws.call("ls", path="/")).content
    assert "/out (link)" in listing and SECRET not in listing


def _normalizes(path: str) -> bool:
    try:
        normalize(path)
    except PathRefused:
        return False
    return True


def test_absolute_paths_are_workspace_paths() -> None:
    # deepagentsjs#653/#544: '/etc/passwd' is the workspace's etc/passwd.
    assert normalize("/etc/passwd") == "/etc/passwd"
    assert normalize("etc//./passwd/") == "/etc/passwd"
    assert normalize("a/b/../c") == "/a/c"
    assert normalize("") == "/"
    with pytest.raises(PathRefused, match="goes above the workspace root"):
        normalize("a/../..")


SEGMENTS = st.sampled_from(
    [
        "..",
        ".",
        "",
        "a",
        "b",
        "out",
        "chain1",
        "sub",
        "up",
        "good_link",
        "a..b",
        "\u2025",
        "\uff0e\uff0e",
        "loop1",
        "dangling",
        "etc_link",
        "passwd",
        "secret.txt",
        "~",
        "\\..",
    ]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(SEGMENTS, max_size=8), absolute=st.booleans())
def test_property_no_path_resolves_outside_the_root(
    tmp_path: Path, parts: list[str], absolute: bool
) -> None:
    root = tmp_path / "proot"
    if not root.exists():
        root.mkdir()
        (tmp_path / "outside").mkdir(exist_ok=True)
        hostile(root, tmp_path / "outside")
    path = ("/" if absolute else "") + "/".join(parts)
    real = real_root(root)
    try:
        resolved = resolve_path(root, path)
    except PathRefused as exc:
        assert exc.path == path and exc.rule
        return
    resolved = Path(os.path.realpath(resolved))
    assert resolved == real or resolved.is_relative_to(real), (path, resolved)


@settings(max_examples=500, deadline=None)
@given(
    path=st.text(
        alphabet=st.sampled_from(["/", ".", "a", "\u2025", "\uff0e", "\\", "\x00", "b"]),
        max_size=40,
    )
)
def test_property_store_keys_are_canonical_and_never_climb(path: str) -> None:
    # The store backend's containment: its keys are normalized virtual paths, so no key can
    # name anything above / (there is no disk to escape to; the key space is the workspace).
    try:
        key = normalize(path)
    except PathRefused as exc:
        assert exc.rule in (
            "contains a NUL character",
            "goes above the workspace root",
        ), exc.rule
        return
    assert key.startswith("/")
    assert all(name not in ("", ".", "..") for name in key.split("/")[1:]) or key == "/"
    assert normalize(key) == key
