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
