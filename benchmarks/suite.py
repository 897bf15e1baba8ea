"""`python -m benchmarks.suite [--workers 2]`: the test suite's wall time, recorded.

Runs the README's test command (`python -m pytest -q -n WORKERS --dist loadfile tests`, with
the stack limit CI sets) in a fresh process, and writes its wall time, the pass count, the
slowest tests and the machine to `benchmarks/suite_time.json`, which `python -m benchmarks`
reads for its suite row (the suite takes too long to run inside that command), and each test
module's seconds to `tests/module_seconds.json`, the order in which `tests/conftest.py` hands
the modules to the workers (the longest first). Run it alone
on the machine: the time is mostly compilation, and anything beside it slows that down.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import resource
import subprocess
import sys
import time

import jax

RECORD = os.path.join(os.path.dirname(__file__), "suite_time.json")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODULE_SECONDS = os.path.join(ROOT, "tests", "module_seconds.json")
#: How many of the slowest tests the record lists.
SLOWEST = 20
#: CI raises the stack limit to 64 MiB before the tests (`.ci/run`).
STACK = 64 * 1024 * 1024


def usable_cpus() -> int:
    """The CPUs this process may run on."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _raise_stack() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_STACK)
    limit = STACK if hard == resource.RLIM_INFINITY else min(STACK, hard)
    resource.setrlimit(resource.RLIMIT_STACK, (max(soft, limit), hard))


def run_suite(workers: int = 2) -> tuple[dict, dict[str, float]]:
    """The README's test command, timed; its summary line and every test's duration parsed:
    the record (the `SLOWEST` tests in it) and the seconds of each module, longest first."""
    command = [sys.executable, "-m", "pytest", "-q", "-n", str(workers), "--dist", "loadfile",
               "-p", "no:cacheprovider", "--durations=0", "tests"]  # fmt: skip
    start = time.perf_counter()
    done = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, preexec_fn=_raise_stack
    )
    wall = time.perf_counter() - start
    counts = {
        k: int(v) for v, k in re.findall(r"(\d+) (passed|failed|errors?|skipped)", done.stdout)
    }
    durations = [
        {"seconds": float(s), "phase": phase, "test": test}
        for s, phase, test in re.findall(
            r"^([\d.]+)s (call|setup|teardown)\s+(\S+)", done.stdout, re.M
        )
    ]
    modules: dict[str, float] = {}
    for d in durations:
        module = os.path.basename(d["test"].split("::")[0])
        modules[module] = modules.get(module, 0.0) + d["seconds"]
    failures = re.findall(r"^(?:FAILED|ERROR) (\S+)", done.stdout, re.M)
    return {
        "command": " ".join(["python"] + command[1:]),
        "returncode": done.returncode,
        "failures": failures,
        "output_tail": done.stdout[-3000:] if done.returncode else "",
        "wall_s": wall,
        "counts": counts,
        "slowest": durations[:SLOWEST],
        "workers": workers,
        "cpus": usable_cpus(),
        "jax": jax.__version__,
        "date": datetime.date.today().isoformat(),
    }, dict(sorted(modules.items(), key=lambda item: -item[1]))  # fmt: skip


def suite_row() -> tuple[str, str, str, str]:
    """The suite's row of `python -m benchmarks`, from the last recorded run."""
    with open(RECORD) as f:
        r = json.load(f)
    passed = r["counts"].get("passed", 0)
    return (
        f"test suite wall time, {r['workers']} workers",
        f"{r['wall_s'] / 60:.1f} min",
        "≤ 6 min",
        f"{passed} passed, {len(r['failures'])} failed; slowest test "
        f"{r['slowest'][0]['seconds']:.0f} s; recorded {r['date']}, {r['cpus']} CPUs, jax "
        f"{r['jax']} (`python -m benchmarks.suite`)",
    )


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.suite", description=__doc__)
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    args = parser.parse_args()
    record, modules = run_suite(args.workers)
    with open(RECORD, "w") as f:
        json.dump(record, f, indent=1)
    if record["returncode"] == 0:  # a partial run would misorder the next ones
        with open(MODULE_SECONDS, "w") as f:
            json.dump({name: round(s, 1) for name, s in modules.items()}, f, indent=1)
    print(" | ".join(suite_row()))
    sys.exit(record["returncode"])


if __name__ == "__main__":
    main()
