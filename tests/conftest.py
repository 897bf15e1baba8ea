"""Tests run in float64 (jaxmbs never switches it on by itself)."""

import jax
import pytest

jax.config.update("jax_enable_x64", True)


@pytest.fixture
def float32():
    """Run one test with float64 switched off (JAX's default dtype float32)."""
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)
