"""Docs are part of the contract: their Python examples run, and their links resolve."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks() -> list[tuple[str, str]]:
    out = []
    for doc in DOCS:
        for i, block in enumerate(BLOCK.findall(doc.read_text(encoding="utf-8"))):
            # A block that is a file of a worked example (``# file: PATH``) is built and run
            # by that example's own test (tests/test_plugin_authoring.py).
            if not block.startswith("# file: "):
                out.append((f"{doc.relative_to(REPO)}#{i}", block))
    return out


@pytest.mark.parametrize(("where", "code"), python_blocks(), ids=[w for w, _ in python_blocks()])
def test_python_example_runs(where: str, code: str, tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    script = tmp_path / "example.py"
    script.write_text(code)
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"{where} failed:\n{done.stdout}\n{done.stderr}"


#: Pages whose links are checked too (their examples are each distribution's own).
LINKED = [
    *DOCS,
    *sorted(REPO.glob("plugins/*/README.md")),
    REPO / "bench" / "README.md",
    *sorted((REPO / "examples").rglob("README.md")),
]


@pytest.mark.parametrize("doc", LINKED, ids=[str(d.relative_to(REPO)) for d in LINKED])
def test_relative_links_resolve(doc: Path) -> None:
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", doc.read_text(encoding="utf-8")):
        assert (doc.parent / target).exists(), f"{doc.name} links to missing {target}"


def test_the_docs_hold_nothing_of_one_machine_or_one_team() -> None:
    """Contributor docs are about the project: no absolute paths of a machine, no notes about
    who commits (they once lived in docs/TEAM.md)."""
    assert not (REPO / "docs" / "TEAM.md").exists()
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        assert "/work/" not in text, f"{doc.name} holds a path of one machine"
        assert "the lead commits" not in text.lower(), f"{doc.name} holds notes about one team"


def test_the_index_links_every_page() -> None:
    """docs/index.md is the way in: every page under docs/ is linked from it, and the pages sit
    in the four folders of their kind."""
    index = REPO / "docs" / "index.md"
    linked = {
        (index.parent / target).resolve()
        for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", index.read_text(encoding="utf-8"))
    }
    for doc in sorted((REPO / "docs").rglob("*.md")):
        if doc == index:
            continue
        where = doc.relative_to(REPO / "docs")
        assert where.parts[0] in {"tutorial", "how-to", "reference", "explanation"}, (
            f"docs/{where} is in none of tutorial/, how-to/, reference/, explanation/"
        )
        assert doc.resolve() in linked, f"docs/index.md does not link docs/{where}"


def test_the_tutorial_agent_file_runs_as_shown(tmp_path: Path) -> None:
    """Section 4 of the tutorial: its agent file, its script and the `add` tool of section 1,
    written into one folder, run with the `hango` command and answer as the script says."""
    text = (REPO / "docs" / "tutorial" / "first-agent.md").read_text(encoding="utf-8")
    files = dict(re.findall(r"^```toml\n# (\S+\.toml)\n(.*?)^```", text, re.S | re.M))
    assert set(files) == {"agent.toml", "script.toml"}
    for name, body in files.items():
        (tmp_path / name).write_text(body, encoding="utf-8")
    add = re.search(r"^@hango\.tool\ndef add\(.*?\n\n\n", text, re.S | re.M)
    assert add is not None
    (tmp_path / "my_tools.py").write_text("import hango\n\n\n" + add.group(0), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "hango", "run", "--agent", "agent.toml", "--json", "What is 2 + 3?"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
        env={"PATH": "", "HANGO_DATABASE_URL": f"sqlite:///{tmp_path / 'hango.db'}"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"answer": "2 + 3 = 5."' in done.stdout.replace("\n", "").replace('":  "', '": "')
