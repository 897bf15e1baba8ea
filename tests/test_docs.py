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


def test_site_builds_strict(tmp_path):
    run = build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert run.returncode == 0, run.stdout + run.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    # A docstring's cross-reference became a link to the rendered object.
    assert 'href="#jaxmbs.Solution"' in api


def test_broken_cross_reference_fails_the_build(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    config = (ROOT / "mkdocs.yml").read_text()
    assert config.count("paths: [.]") == 1
    (tmp_path / "mkdocs.yml").write_text(config.replace("paths: [.]", f"paths: [{ROOT}]"))
    with open(tmp_path / "docs" / "index.md", "a") as page:
        page.write("\nSee [`jaxmbs.does_not_exist`][].\n")
    run = build(tmp_path / "mkdocs.yml", tmp_path / "site")
    assert run.returncode != 0
    assert "Could not find cross-reference target 'jaxmbs.does_not_exist'" in run.stderr
