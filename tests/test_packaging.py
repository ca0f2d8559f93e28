"""The distributions are ready to publish: `uv build --all-packages` makes wheels whose metadata
is complete (licence, authors, URLs, classifiers, a readable description) and whose
requirements all have real lower bounds, the plugins a compatible range of hango."""

from __future__ import annotations

import os
import shutil
import subprocess
import tomllib
import zipfile
from email.message import Message
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[1]


def _distributions() -> dict[str, Path]:
    """Wheel name prefix -> folder, for the core and every plugin in plugins/."""
    folders = [
        REPO / "core",
        *sorted(p.parent for p in (REPO / "plugins").glob("*/pyproject.toml")),
    ]
    names = {}
    for folder in folders:
        with (folder / "pyproject.toml").open("rb") as f:
            names[tomllib.load(f)["project"]["name"].replace("-", "_")] = folder
    return names


DISTRIBUTIONS = _distributions()


def _uv() -> str:
    # `uv run` sets UV to its own executable.
    uv = os.environ.get("UV") or shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not on PATH: run the suite with `uv run pytest`")
    return uv


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, zipfile.ZipFile]:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [_uv(), "build", "--all-packages", "--wheel", "--quiet", "--out-dir", str(out)],
        cwd=REPO, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    built = {p.name.split("-")[0]: zipfile.ZipFile(p) for p in out.glob("*.whl")}
    assert set(built) == set(DISTRIBUTIONS)
    return built


def _metadata(wheel: zipfile.ZipFile) -> tuple[Message, str]:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return Parser().parsestr(wheel.read(name).decode()), name.rsplit("/", 1)[0]


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_wheel_metadata_is_complete(wheels: dict[str, zipfile.ZipFile], dist: str) -> None:
    meta, info = _metadata(wheels[dist])
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    assert wheels[dist].read(f"{info}/licenses/LICENSE") == (REPO / "LICENSE").read_bytes()
    assert meta["Author"] == "hango developers"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Documentation", "Repository", "Issues"} <= set(urls)
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers
    assert "Programming Language :: Python :: 3.11" in classifiers
    assert meta["Summary"] and meta["Description-Content-Type"] == "text/markdown"
    description = meta.get_payload()
    assert isinstance(description, str)
    assert description.startswith("# hango") and "\\n" not in description
    assert len(description.splitlines()) > 5


@pytest.mark.parametrize("dist", sorted(DISTRIBUTIONS))
def test_every_requirement_has_a_lower_bound(wheels: dict[str, zipfile.ZipFile], dist: str) -> None:
    meta, _ = _metadata(wheels[dist])
    for line in meta.get_all("Requires-Dist") or []:
        req = Requirement(line)
        lower = [s for s in req.specifier if s.operator in (">=", "==", "~=")]
        assert lower, f"{dist}: {line} has no lower bound"
        if req.name == "hango":  # a plugin: a range of hango it was written for
            assert any(s.operator == "<" for s in req.specifier), f"{dist}: {line}"


def test_each_distribution_ships_the_repository_licence() -> None:
    licence = (REPO / "LICENSE").read_text()
    assert licence.lstrip().startswith("Apache License") and "Version 2.0" in licence
    for folder in DISTRIBUTIONS.values():
        assert (folder / "LICENSE").read_text() == licence, folder
