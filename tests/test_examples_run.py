"""The public examples run: every ```python block of README.md and of the documentation
pages (docs/*.md) executes without error.

A page's blocks run in order in one fresh namespace, in a subprocess of their own (float64
on, XLA's settings inherited from tests/conftest.py, matplotlib without a display), whose
working directory is a temporary folder, so files the examples write land there. A block
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


#: Runs a page's blocks (a JSON file: page name and blocks) in one namespace. Each block is
#: compiled with the page as its file name and its own line numbers, so a traceback names
#: the page's line. Prints one line per block that finished.
DRIVER = """
import json, sys, time
spec = json.load(open(sys.argv[1]))
namespace = {"__name__": "__main__"}
for block in spec["blocks"]:
    start = time.perf_counter()
    code = compile("\\n" * (block["line"] - 1) + block["source"], spec["page"], "exec")
    exec(code, namespace)
    seconds = time.perf_counter() - start
    print(f"BLOCK DONE {spec['page']}:{block['line']} in {seconds:.1f} s", flush=True)
"""


def run_page(page: pathlib.Path, folder: pathlib.Path) -> subprocess.CompletedProcess:
    runnable = [block for block in blocks(page) if block["not_run"] is None]
    spec = folder / "blocks.json"
    spec.write_text(json.dumps({"page": str(page.relative_to(ROOT)), "blocks": runnable}))
    env = {
        **os.environ,
        "JAX_ENABLE_X64": "1",
        "MPLBACKEND": "Agg",
        "JAXMBS_CACHE_DIR": "none",
    }
    return subprocess.run(
        [sys.executable, "-c", DRIVER, str(spec)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


RUNNABLE_PAGES = [page for page in PAGES if any(b["not_run"] is None for b in blocks(page))]


@pytest.mark.parametrize("page", RUNNABLE_PAGES, ids=lambda page: page.name)
def test_page_examples_run(page, tmp_path):
    """Every unmarked ```python block of the page runs, in order, in one namespace."""
    expected = [block["line"] for block in blocks(page) if block["not_run"] is None]
    run = run_page(page, tmp_path)
    done = [
        int(line.split()[2].rsplit(":", 1)[1])
        for line in run.stdout.splitlines()
        if line.startswith("BLOCK DONE ")
    ]
    assert run.returncode == 0, f"{page.name}: blocks done {done}\n{run.stdout}\n{run.stderr}"
    assert done == expected


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
