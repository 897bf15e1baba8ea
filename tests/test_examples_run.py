"""The public examples run: every ```python block of README.md and of the documentation
pages (docs/*.md) executes without error.

A page's blocks run in order in one fresh namespace (float64 on, XLA's settings inherited
from tests/conftest.py, matplotlib without a display), with a temporary folder of the
page's own as working directory, so files the examples write land there; the pages run one
after another in one subprocess. A block
may use what an earlier block of its page defined. A block that is not meant to run alone
(a sketch with placeholders, a call that needs several machines) is marked by an HTML
comment on the last non-blank line before it, with its reason:

    <!-- not run: needs a coordinator and four processes -->

Any unmarked block that raises fails its page's test, with the traceback pointing at the
page's own line numbers.
"""

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Fewer runnable blocks than this means examples were lost or the extraction broke.
MIN_BLOCKS = 25

FENCE = re.compile(
    r"^(?P<indent> *)```(?P<info>[^`\n]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>\S.*?)\s*-->\s*\Z", re.DOTALL)
MARKER = re.compile(r"<!--\s*not run:")


def blocks(page: pathlib.Path) -> list[dict]:
    """The page's ```python blocks, in order: first line number, source, and the reason
    it is not run (None for a block that runs)."""
    text = page.read_text()
    found = []
    for match in FENCE.finditer(text):
        if match.group("info").strip().split(" ")[0] not in ("python", "py"):
            continue
        before = text[: match.start()].rstrip("\n ")
        last_line = before[before.rfind("\n") + 1 :]
        marker = NOT_RUN.search(last_line + "\n")
        found.append(
            {
                "line": text.count("\n", 0, match.start("body")) + 1,
                "source": match.group("body"),
                "not_run": marker.group("reason") if marker else None,
            }
        )
    return found


#: Runs every page's blocks, each page in a fresh namespace and its own working directory (a
#: JSON file lists them), in one interpreter: importing JAX and jaxmbs once instead of once
#: per page. Each block is compiled with the page as its file name and its own line numbers,
#: so a traceback names the page's line. A page stops at its first failing block; the next
#: page still runs. Writes, per page, the blocks that finished and the traceback, if any.
#: Its cyclic collector is set as pytest's (`helpers.collect_less`).
DRIVER = """
import json, os, sys, traceback
import helpers, jaxmbs
helpers.collect_less()
spec = json.load(open(sys.argv[1]))
report = {}
for page in spec["pages"]:
    os.chdir(page["folder"])
    namespace = {"__name__": "__main__"}
    done, error = [], None
    try:
        for block in page["blocks"]:
            code = compile("\\n" * (block["line"] - 1) + block["source"], page["page"], "exec")
            exec(code, namespace)
            done.append(block["line"])
    except BaseException:
        error = traceback.format_exc()
    report[page["page"]] = {"done": done, "error": error}
json.dump(report, open(spec["report"], "w"))
"""


RUNNABLE_PAGES = [page for page in PAGES if any(b["not_run"] is None for b in blocks(page))]


@pytest.fixture(scope="module")
def page_runs(tmp_path_factory) -> dict:
    """Every runnable page's blocks run by `DRIVER` in one subprocess (float64 on, XLA's
    settings inherited from tests/conftest.py, matplotlib without a display), each page in a
    temporary folder of its own, so files the examples write land there: per page, the
    blocks that finished and the traceback of the one that failed."""
    root = tmp_path_factory.mktemp("examples")
    pages = []
    for page in RUNNABLE_PAGES:
        folder = root / page.stem
        folder.mkdir()
        runnable = [block for block in blocks(page) if block["not_run"] is None]
        pages.append(
            {"page": str(page.relative_to(ROOT)), "folder": str(folder), "blocks": runnable}
        )
    spec, report = root / "pages.json", root / "report.json"
    spec.write_text(json.dumps({"pages": pages, "report": str(report)}))
    env = {
        **os.environ,
        "JAX_ENABLE_X64": "1",
        "MPLBACKEND": "Agg",
        "JAXMBS_CACHE_DIR": "none",
        "PYTHONPATH": os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-c", DRIVER, str(spec)],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0 and report.exists(), f"{run.stdout}\n{run.stderr}"
    return json.loads(report.read_text())


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda page: page.name)
def test_page_examples_run(page, page_runs):
    """Every unmarked ```python block of the page runs, in order, in one namespace."""
    expected = [block["line"] for block in blocks(page) if block["not_run"] is None]
    run = page_runs[str(page.relative_to(ROOT))]
    assert run["error"] is None, f"{page.name}: blocks done {run['done']}\n{run['error']}"
    assert run["done"] == expected


def test_examples_are_found():
    """The examples exist and are extracted: the README's own, and enough in all. Every
    "not run" marker sits right before a ```python block (none left behind by an edit)."""
    every = {page.name: blocks(page) for page in PAGES}
    counts = {
        name: sum(block["not_run"] is None for block in found) for name, found in every.items()
    }
    assert sum(counts.values()) >= MIN_BLOCKS, counts
    assert counts["README.md"] >= 1
    for page in PAGES:
        markers = len(MARKER.findall(FENCE.sub("", page.read_text())))  # not in code
        marked = sum(block["not_run"] is not None for block in every[page.name])
        assert markers == marked, f"{page.name}: a 'not run' marker before no ```python block"


def test_marker_convention(tmp_path):
    """A marked block is left out, an unmarked one kept; the marker must sit right before
    the block it names."""
    page = tmp_path / "page.md"
    page.write_text(
        "Text.\n\n```python\nx = 1\n```\n\n<!-- not run: a sketch -->\n```python\nmech\n```\n"
        "\n<!-- not run: stale -->\n\nSome words.\n\n```python\ny = x\n```\n\n```bash\nls\n```\n"
    )
    found = blocks(page)
    assert [(block["line"], block["not_run"]) for block in found] == [
        (4, None),
        (9, "a sketch"),
        (17, None),
    ]
