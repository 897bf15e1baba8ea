"""The documentation site (mkdocs + mkdocstrings) builds, and a broken cross-reference fails it.

`mkdocs build --strict` turns every warning into an error, among them mkdocs-autorefs'
"Could not find cross-reference target" for a ``[`name`][]`` that names no rendered object,
in the pages and in the docstrings the API reference renders.
"""

import os
import pathlib
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install '.[docs]'")
pytest.importorskip("mkdocstrings_handlers.python", reason="mkdocstrings-python is not installed")

ROOT = pathlib.Path(__file__).resolve().parent.parent


def build(config: pathlib.Path, site: pathlib.Path) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config)]
    return subprocess.run(
        [*command, "-d", str(site)],
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
    )


BROKEN = "[`jaxmbs.does_not_exist`][]"


def break_page(root: pathlib.Path) -> None:
    with open(root / "docs" / "index.md", "a") as page:
        page.write(f"\nSee {BROKEN}.\n")


def break_docstring(root: pathlib.Path) -> None:
    source = root / "jaxmbs" / "integrate" / "simulate.py"
    text = source.read_text()
    returns = "**Returns:** a [`jaxmbs.Solution`][]."
    assert text.count(returns) == 1
    source.write_text(text.replace(returns, f"**Returns:** a {BROKEN}."))


def intact(root: pathlib.Path) -> None:
    """The site as it is: it builds."""


@pytest.mark.parametrize(
    "breakage", [intact, break_page, break_docstring], ids=["intact", "page", "docstring"]
)
def test_docs_build_strict(tmp_path, breakage):
    """A copy of the site and the sources builds; with one reference broken it fails."""
    ignore = shutil.ignore_patterns("__pycache__")
    for folder in ("docs", "jaxmbs", "models"):
        shutil.copytree(ROOT / folder, tmp_path / folder, symlinks=True, ignore=ignore)
    shutil.copy(ROOT / "mkdocs.yml", tmp_path)
    breakage(tmp_path)
    run = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    if breakage is intact:
        assert run.returncode == 0, run.stdout + run.stderr
        # A docstring's cross-reference became a link to the rendered object.
        assert 'href="#jaxmbs.Solution"' in (tmp_path / "site" / "api" / "index.html").read_text()
        return
    assert run.returncode != 0
    assert "Could not find cross-reference target 'jaxmbs.does_not_exist'" in run.stderr
