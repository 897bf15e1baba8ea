"""Tests run in float64 (jaxmbs never switches it on by itself)."""

import jax

jax.config.update("jax_enable_x64", True)
