"""Programs run once per analysis compile with XLA's quick CPU settings at the top level
(`jaxmbs._internal.compile.quick_jit`), and inside a user's transformation are inlined
like any jitted function."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs._internal import compile as compile_
from jaxmbs.models import pendulum


def test_quick_settings_are_accepted_on_this_cpu():
    """The probe finds the options usable here (otherwise every analysis would silently
    compile with XLA's defaults)."""
    assert jax.default_backend() != "cpu" or compile_._quick_options() == (
        compile_.QUICK_CPU_OPTIONS
    )


def test_options_reach_the_top_level_compile_only(monkeypatch):
    """With an option XLA does not know, the top-level call fails in XLA (so the options are
    passed to its compile), while the same function under `jax.jit` — with concrete or with
    traced arguments — is inlined into the enclosing program and runs."""
    monkeypatch.setattr(compile_, "_quick_options", lambda: {"xla_no_such_option": 0})

    def f(x):
        return jnp.sin(x) * 2.0

    quick = compile_.quick_jit(f)
    with pytest.raises(Exception, match="xla_no_such_option"):
        quick(jnp.ones(3))
    x = jnp.linspace(0.0, 1.0, 3)
    np.testing.assert_allclose(jax.jit(lambda: quick(x))(), 2.0 * np.sin(x), rtol=1e-15)
    np.testing.assert_allclose(jax.jit(quick)(x), 2.0 * np.sin(x), rtol=1e-15)
    np.testing.assert_allclose(jax.grad(lambda y: quick(y).sum())(x), 2.0 * np.cos(x))


def test_linearize_inside_jit_with_concrete_arguments():
    """`linearize` (compiled with the quick settings at the top level) under `jax.jit` with
    the state closed over as constants and with a traced parameter: the pendulum's
    A = [[0, 1], [−g/l, 0]] each way."""
    mech = pendulum.mathematical_pendulum()
    q, qd = pendulum.initial_state(mech, 0.0)
    g, length = float(mech.params["g"]), float(mech.params["rho"])
    expected = np.array([[0.0, 1.0], [-g / length, 0.0]])
    top = jaxmbs.linearize(mech, q, qd).A
    closed = jax.jit(lambda: jaxmbs.linearize(mech, q, qd).A)()
    traced = jax.jit(lambda g_: jaxmbs.linearize(mech, q, qd, params={"g": g_}).A)(3.7)
    np.testing.assert_allclose(top, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(closed, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(traced, [[0.0, 1.0], [-3.7 / length, 0.0]], rtol=1e-12, atol=1e-12)
