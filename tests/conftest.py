"""Tests run in float64 (jaxmbs never switches it on by itself)."""

import os

import jax
import pytest

jax.config.update("jax_enable_x64", True)
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


@pytest.fixture(scope="module", autouse=True)
def _release_compiled_programs():
    """Drop JAX's compiled programs after each test module: a worker that ran dozens of
    modules held ~4.5 GB of them, and the suite's rare crashes inside XLA's compiler came
    late in long-lived workers. A module's own programs stay cached while it runs (`--dist
    loadfile` keeps it on one worker); a mechanism shared between modules compiles again."""
    yield
    jax.clear_caches()
