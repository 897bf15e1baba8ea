"""`MultiplyAddRungeKutta`: diffrax's explicit methods with the stage sums as multiply-adds
are the same methods (steps, dense output, error estimate) up to round-off."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmbs.integrate.solvers import MultiplyAddRungeKutta, multiply_add_stages


def _solve(solver, y0, adjoint=None):
    """A damped nonlinear oscillator (van der Pol, μ = 2) with dense output."""

    def field(t, y, args):
        return jnp.stack([y[1], args * (1 - y[0] ** 2) * y[1] - y[0]])

    return diffrax.diffeqsolve(
        diffrax.ODETerm(field),
        solver,
        0.0,
        5.0,
        None,
        y0,
        args=2.0,
        saveat=diffrax.SaveAt(ts=jnp.linspace(0.0, 5.0, 23)),  # between steps: interpolated
        stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        adjoint=adjoint or diffrax.RecursiveCheckpointAdjoint(),
        max_steps=10_000,
    )


METHODS = [diffrax.Tsit5, diffrax.Dopri5, diffrax.Dopri8, diffrax.Bosh3]  # FSAL


@pytest.mark.parametrize("method", [*METHODS, diffrax.Heun])  # and one without FSAL
def test_one_step_equals_diffrax(method):
    """y₁, the error estimate and the stages of one step equal diffrax's to round-off."""
    term = diffrax.ODETerm(lambda t, y, args: jnp.stack([y[1], -jnp.sin(y[0]) - 0.3 * y[1]]))
    y0 = jnp.array([1.2, -0.4])
    steps = []
    for solver in (method(), MultiplyAddRungeKutta(method())):
        state = solver.init(term, 0.0, 0.8, y0, None)
        y1, error, dense, _, result = solver.step(term, 0.0, 0.8, y0, None, state, False)
        assert bool(result == diffrax.RESULTS.successful)
        steps.append((y1, error, dense["k"]))
    (y1, error, k), (y1_ma, error_ma, k_ma) = steps
    np.testing.assert_allclose(y1_ma, y1, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(k_ma, k, rtol=1e-14, atol=1e-15)
    # The error estimate is a sum with cancellation: round-off relative to the stages.
    np.testing.assert_allclose(error_ma, error, rtol=0, atol=1e-14 * float(jnp.max(jnp.abs(k))))
    assert float(jnp.max(jnp.abs(error))) > 1e-12  # a real estimate, not zero


@pytest.mark.parametrize("method", METHODS)
def test_same_solve_as_diffrax(method):
    """Whole solves agree to the integration accuracy: the error estimate's round-off can
    move a step-size decision (Dopri8: same number of steps, steps shifted)."""
    y0 = jnp.array([2.0, 0.0])
    reference = _solve(method(), y0)
    sol = _solve(MultiplyAddRungeKutta(method()), y0)
    steps, steps_ref = int(sol.stats["num_steps"]), int(reference.stats["num_steps"])
    assert abs(steps - steps_ref) <= max(2, steps_ref // 50)
    np.testing.assert_allclose(sol.ys, reference.ys, rtol=0, atol=1e-7)


def test_gradients_in_both_modes():
    y0 = jnp.array([2.0, 0.0])

    def final(y0, solver, adjoint=None):
        return _solve(solver, y0, adjoint).ys[-1, 0]

    solver = MultiplyAddRungeKutta(diffrax.Tsit5())
    reverse = jax.grad(final)(y0, solver)
    forward = jax.jacfwd(lambda y: final(y, solver, diffrax.ForwardMode()))(y0)
    reference = jax.grad(final)(y0, diffrax.Tsit5())
    np.testing.assert_allclose(reverse, reference, rtol=1e-9)
    np.testing.assert_allclose(forward, reference, rtol=1e-9)


def test_only_explicit_runge_kutta_is_wrapped():
    assert isinstance(multiply_add_stages(diffrax.Tsit5()), MultiplyAddRungeKutta)
    implicit = diffrax.Kvaerno5()
    assert multiply_add_stages(implicit) is implicit
