"""Gradients through an implicit solve of the stiff spring pendulum, in reverse and forward
mode, against central differences (split from `test_stiff.py` so that pytest-xdist's
workers, each given whole modules, balance). The central differences are one compiled
program shared by both modes."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import spring_pendulum as sp

T1 = 0.3
H = 1e-3  # the loss is amplified 1e5×: a smaller step would feel the solve's round-off


@pytest.fixture(scope="module")
def pendulum():
    mech = sp.spring_pendulum()
    return (mech, *sp.initial_state(mech, angle=-0.5, rate=1.0))


def _loss(pendulum, log_kc, adjoint=None):
    """1e5 × (final bob radius − 1) + final rod angle, of log(k, c)."""
    mech, q0, qd0 = pendulum
    params = {**mech.params, "k": jnp.exp(log_kc[0]), "c": jnp.exp(log_kc[1])}
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, T1), params=params, solver=diffrax.Kvaerno5(), rtol=1e-12,
        atol=1e-12, stabilization="none", adjoint=adjoint,
    )  # fmt: skip
    q = sol.q[-1]
    return 1e5 * (jnp.linalg.norm(q[3:5]) - 1.0) + q[2]


def _x(pendulum):
    mech = pendulum[0]
    return jnp.log(jnp.array([mech.params["k"], mech.params["c"]]))


@pytest.fixture(scope="module")
def central_differences(pendulum):
    """Central differences of the loss with step H, its four evaluations (x ± H eᵢ) one
    compiled program (a `lax.map`, not a vmap: batched LAPACK calls on CPU, see
    `jaxmbs.batch`), shared by both modes."""
    x = _x(pendulum)
    steps = H * jnp.eye(2)
    points = jnp.concatenate([x + steps, x - steps])
    values = np.asarray(jax.jit(lambda p: jax.lax.map(lambda y: _loss(pendulum, y), p))(points))
    return (values[:2] - values[2:]) / (2 * H)


@pytest.mark.parametrize("mode", ["reverse", "forward"])
def test_gradient_through_implicit_solve(pendulum, central_differences, mode, record_property):
    """d(final bob radius and rod angle)/d(k, c) against central differences; reverse mode
    the default (`jaxmbs.integrate.adjoint`). diffrax's checkpointed adjoint alone passed or
    failed (1.5e-3 relative off) with last-bit changes of the compiled program."""
    x = _x(pendulum)
    if mode == "forward":
        grad = jax.jacfwd(lambda y: _loss(pendulum, y, diffrax.ForwardMode()))(x)
    else:
        grad = jax.grad(lambda y: _loss(pendulum, y))(x)
    fd = central_differences
    record_property("relative_error", float(np.max(np.abs(np.asarray(grad) / fd - 1))))
    assert np.all(np.abs(fd) > 1e-3)  # (measured: h = 1e-4 off by 2e-6, 1e-3 by 2e-8)
    np.testing.assert_allclose(np.asarray(grad), fd, rtol=1e-6, atol=1e-8)
