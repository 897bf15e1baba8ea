"""Tests run in float64 (jaxmbs never switches it on by itself), and compile with XLA's
quick CPU settings (below)."""

import json
import os
import pathlib
import statistics
import subprocess
import sys

#: XLA's CPU compiler without its backend (LLVM) optimisations and with its older elemental
#: kernel emitter: most of the suite's time is compilation, and these settings cut it by
#: ~40 % (four heavy modules on 2 workers: 406 → 245 s) at the cost of slower compiled
#: code. The programs are the same HLO, so results differ at most by rounding; the
#: rough-road test (`test_reverse_replay.py`) still sees the checkpointed adjoint's defect
#: under them (7.9e-2 relative with diffrax's checkpointed adjoint, against 1.7e-3 with the
#: default settings). Code generation in one piece rather than split over threads
#: (`parallel_codegen_split_count=1`): two workers already keep the two cores busy, and the
#: split costs CPU time (three four-bar and McPherson programs: 10.6 → 9.6 CPU-s, lower in
#: each of five paired runs). The benchmarks and the library's solves keep XLA's defaults; the
#: library compiles its one-shot analyses with the first two (`jaxmbs._internal.compile`).
QUICK_XLA_FLAGS = (
    "--xla_cpu_use_fusion_emitters=false --xla_backend_optimization_level=0"
    " --xla_cpu_parallel_codegen_split_count=1"
)


def _quick_xla_flags() -> str:
    """`QUICK_XLA_FLAGS` if this jaxlib accepts them (an unknown flag aborts XLA), else "".
    Decided once by the first process; pytest-xdist's workers inherit the environment."""
    probe = [sys.executable, "-c", "import jax.numpy as jnp; jnp.zeros(1).block_until_ready()"]
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {QUICK_XLA_FLAGS}"}
    return (
        QUICK_XLA_FLAGS
        if subprocess.run(probe, env=env, capture_output=True).returncode == 0
        else ""
    )


if "JAXMBS_TEST_XLA_FLAGS" not in os.environ:  # XLA reads XLA_FLAGS when it starts
    os.environ["JAXMBS_TEST_XLA_FLAGS"] = _quick_xla_flags()
    os.environ["XLA_FLAGS"] = (
        f"{os.environ.get('XLA_FLAGS', '')} {os.environ['JAXMBS_TEST_XLA_FLAGS']}".strip()
    )

import jax  # noqa: E402
import pytest  # noqa: E402
from helpers import collect_less  # noqa: E402

jax.config.update("jax_enable_x64", True)
collect_less()
# The CLI's persistent compilation cache stays off in tests run in-process (tests that want
# it pass --cache to a fresh process).
os.environ.setdefault("JAXMBS_CACHE_DIR", "none")


@pytest.fixture
def float32():
    """Run one test with float64 switched off (JAX's default dtype float32)."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Recorded properties travel between xdist workers as plain Python values: a NumPy or
    JAX scalar there cannot be serialised and takes the worker down with it."""
    outcome = yield
    report = outcome.get_result()
    report.user_properties = [
        (name, value.tolist() if hasattr(value, "tolist") else value)
        for name, value in report.user_properties
    ]


#: A worker drops JAX's compiled programs after a test module once its resident memory passes
#: this many bytes (`_release_compiled_programs`).
MEMORY_BUDGET = 4 * 2**30


def _resident_bytes() -> int | None:
    """This process's resident memory (Linux's /proc; None where unknown)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drop JAX's compiled programs after a test module when the worker holds more than
    `MEMORY_BUDGET` (or its memory is unknown): a worker that ran dozens of modules held
    ~4.5 GB of them, and the suite's rare crashes inside XLA's compiler came late in
    long-lived workers. Below the budget the programs stay: the next modules reuse the
    small ones every test compiles (eager arithmetic, the initial checks) and the shared
    models' solves. Eight modules in one process: 205 s and 1 652 compilations when every
    module dropped them, 138 s and 1 285 compilations kept (peak 1.4 → 3.2 GB)."""
    yield
    resident = _resident_bytes()
    if resident is None or resident > MEMORY_BUDGET:
        jax.clear_caches()


#: Each test module's seconds in the last measured suite run (`python -m benchmarks.suite`
#: writes it): the order in which the modules are handed to the workers.
MODULE_SECONDS = pathlib.Path(__file__).with_name("module_seconds.json")


def pytest_configure(config):
    """pytest-xdist hands whole modules (`--dist loadfile`) to the workers in the order of
    the collection, not reordered by test count: see `pytest_collection_modifyitems`."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
    """The longest modules first (longest-processing-time scheduling): the workers then
    finish within about one short module of each other. In the suite's order the two
    workers of the README's command ended 94 s apart (830 and 924 s of work). A module
    without a record counts as a median one; the tests inside a module keep their order."""
    recorded = json.loads(MODULE_SECONDS.read_text()) if MODULE_SECONDS.exists() else {}
    median = statistics.median(recorded.values()) if recorded else 0.0

    def seconds(item) -> float:
        return recorded.get(item.path.name, median)

    items.sort(key=lambda item: -seconds(item))  # stable: a module's tests stay in order
