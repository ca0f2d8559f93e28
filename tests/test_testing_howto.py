"""docs/how-to/test-a-middleware.md, done as a plugin author outside this repository would: its
test file is written into an empty folder and run by pytest, which finds hango.testing's
fixtures through the ``pytest11`` entry point alone (no conftest, no configuration)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "how-to" / "test-a-middleware.md"
FILE_BLOCK = re.compile(r"^```python\n# file: (\S+)\n(.*?)^```", re.S | re.M)


def test_the_how_to_tests_pass_in_a_folder_of_their_own(tmp_path: Path) -> None:
    ((name, text),) = FILE_BLOCK.findall(DOC.read_text(encoding="utf-8"))
    (tmp_path / name).parent.mkdir(parents=True)
    (tmp_path / name).write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", name],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    # Every test ran; the PostgreSQL one skips only where no server answers, saying so.
    assert re.search(r"\b5 passed\b", out) or (
        re.search(r"\b4 passed, 1 skipped\b", out) and "PostgreSQL tests skipped" in out
    ), out
