"""Runge–Kutta stage combinations as multiply-adds (`jaxmbs.stages`): the same sums as
diffrax's tensor products, the same solves, and no library product left in the step."""

import re

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from diffrax._solver import runge_kutta
from helpers import assert_same_solve

from jaxmbs import stages


def test_stage_sum_matches_tensordot():
    rng = np.random.default_rng(0)
    ks = {"q": jnp.asarray(rng.normal(size=(7, 5))), "v": jnp.asarray(rng.normal(size=(7, 2, 3)))}
    for a in (rng.normal(size=7), np.array([0.5, 0.0, 0.0, 2.0, 0.0, 0.0, -1.0]), np.zeros(7)):
        expected = {name: jnp.tensordot(a, k, axes=1) for name, k in ks.items()}
        for coefficients in (a, jnp.asarray(a)):
            got = stages.stage_sum(coefficients, ks)
            for name in ks:
                np.testing.assert_allclose(got[name], expected[name], rtol=1e-14, atol=1e-15)
        traced = jax.jit(stages.stage_sum)(jnp.asarray(a), ks)  # traced coefficients
        for name in ks:
            np.testing.assert_allclose(traced[name], expected[name], rtol=1e-14, atol=1e-15)


def _solve(solver, y0):
    """A damped, forced oscillator chain: 3 positions, 3 velocities, rtol = atol = 1e-9."""
    stiffness = jnp.array([[2.0, -1.0, 0.0], [-1.0, 2.0, -1.0], [0.0, -1.0, 1.0]])

    def field(t, y, args):
        q, v = y[:3], y[3:]
        spring = sum(stiffness[:, j] * q[j] for j in range(3))  # no dot in the field
        return jnp.concatenate([v, -args * spring - 0.1 * v + jnp.sin(t)])

    sol = diffrax.diffeqsolve(
        diffrax.ODETerm(field), solver, 0.0, 5.0, None, y0, args=1.5,
        stepsize_controller=diffrax.PIDController(rtol=1e-9, atol=1e-9),
    )  # fmt: skip
    return sol.ys[-1], sol.stats["num_steps"]


@pytest.mark.parametrize("solver", [diffrax.Tsit5(), diffrax.Dopri8()], ids=["Tsit5", "Dopri8"])
def test_unrolled_stages_same_solve_no_library_product(solver):
    assert stages.active, "diffrax no longer has the stage sums that jaxmbs.stages replaces"
    wrapped = stages.unrolled_stages(solver)
    assert isinstance(wrapped, stages.UnrolledStages)
    y0 = jnp.array([1.0, 0.0, -0.5, 0.0, 0.3, 0.0])
    y_plain, steps_plain = _solve(solver, y0)
    y_unrolled, steps_unrolled = _solve(wrapped, y0)
    # The same sums in another order: the same steps, to round-off (rtol = atol = 1e-9).
    scale = max(1.0, float(jnp.max(jnp.abs(y_plain))))
    assert_same_solve(
        y_unrolled, steps_unrolled, y_plain, steps_plain, 1e-11 * scale, 1e-7 * scale, "y(5)"
    )
    # Single and vmapped: diffrax's products are dots (the vmapped one after a transpose of
    # the stage buffer); the wrapped step has none, and diffrax's own sums are restored.
    single = jax.jit(lambda y: _solve(wrapped, y)[0]).lower(y0)
    batch = jax.jit(jax.vmap(lambda y: _solve(wrapped, y)[0])).lower(jnp.stack([y0, 2 * y0]))
    for lowered in (single, batch):
        assert not re.search(r"= \S+ dot\(", lowered.compile().as_text())
    plain = jax.jit(lambda y: _solve(solver, y)[0]).lower(y0).compile().as_text()
    assert re.search(r"= \S+ dot\(", plain)
    assert runge_kutta.vector_tree_dot is not stages.stage_sum


def test_unrolled_stages_gradient():
    """Reverse mode recomputes the steps of the checkpointed loop: with the same sums."""
    y0 = jnp.array([1.0, 0.0, -0.5, 0.0, 0.3, 0.0])
    wrapped = stages.unrolled_stages(diffrax.Tsit5())
    grad_plain = jax.grad(lambda y: _solve(diffrax.Tsit5(), y)[0][0])(y0)
    grad_unrolled = jax.grad(lambda y: _solve(wrapped, y)[0][0])(y0)
    np.testing.assert_allclose(grad_unrolled, grad_plain, rtol=1e-9, atol=1e-11)
    h = 1e-6
    central = [
        (_solve(wrapped, y0.at[i].add(h))[0][0] - _solve(wrapped, y0.at[i].add(-h))[0][0]) / (2 * h)
        for i in range(2)
    ]
    np.testing.assert_allclose(grad_unrolled[:2], central, rtol=1e-6, atol=1e-8)


def test_unrolled_stages_wraps_runge_kutta_only():
    assert stages.unrolled_stages(diffrax.Euler()) == diffrax.Euler()
    assert isinstance(stages.unrolled_stages(diffrax.Heun()), stages.UnrolledStages)
