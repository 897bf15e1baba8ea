"""Successes that are not, and failures that must be named (issue "Nothing silent, nothing
lost", items 6–9): a NaN event condition, a mass matrix that goes bad during the motion, a
projection that misses its own tolerance, a mechanism without `reference_q`, the time of an
initial-condition failure, the output times past a failure, unreachable tolerances."""

import warnings

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs

RHO = 0.5


def particle(mass_matrix) -> jaxmbs.Mechanism:
    """A free particle (x, y) without forces or constraints: x = x0 + v t exactly."""
    return jaxmbs.Mechanism(
        mass_matrix=mass_matrix,
        forces=lambda t, q, qd, p: jnp.zeros(2, q.dtype),
        params={},
        coordinate_names=("x", "y"),
        reference_q=np.zeros(2),
    )


def circle_particle(reference: bool = True) -> jaxmbs.Mechanism:
    """A particle on a circle of radius ρ under gravity (README's first mechanism)."""
    return jaxmbs.Mechanism(
        mass_matrix=lambda q, p: p["m"] * jnp.eye(2, dtype=q.dtype),
        forces=lambda t, q, qd, p: jnp.stack([jnp.zeros((), q.dtype), -p["m"] * p["g"]]),
        constraints=lambda t, q, p: jnp.atleast_1d(q @ q - p["rho"] ** 2),
        params={"m": 1.0, "g": 9.81, "rho": RHO},
        coordinate_names=("x", "y"),
        reference_q=np.array([0.3, -0.4]) if reference else None,
    )


Q0, QD0 = np.array([0.3, -0.4]), np.array([0.4, 0.3])  # on the circle, tangent velocity
SAVEAT = jnp.linspace(0.0, 2.0, 11)


def test_nan_event_condition_is_named_not_an_event():
    mech = circle_particle()
    event = diffrax.Event(lambda t, y, params, **kw: jnp.where(t > 0.3, jnp.nan, 1.0))
    sol = jaxmbs.simulate(mech, Q0, QD0, (0.0, 2.0), event=event, throw=False, saveat=SAVEAT)
    assert bool(sol.result == jaxmbs.RESULTS.event_not_finite)
    assert 0.3 < float(sol.t_final) < 0.5  # the first step end past 0.3
    assert bool(jnp.all(jnp.isnan(sol.q[sol.t_final < SAVEAT])))
    with pytest.raises(jaxmbs.SimulationError, match="event's condition function returned NaN"):
        jaxmbs.simulate(mech, Q0, QD0, (0.0, 2.0), event=event)
    # A finite event still fires and succeeds.
    crossing = diffrax.Event(lambda t, y, params, **kw: y[0][0])
    sol = jaxmbs.simulate(mech, Q0, QD0, (0.0, 2.0), event=crossing, throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.successful) and int(sol.event) == 0


@pytest.mark.parametrize(
    "mass_matrix, method",
    [
        # symmetric positive definite at x < 1, unsymmetric beyond
        (lambda q, p: jnp.eye(2, dtype=q.dtype).at[0, 1].add(jax.nn.relu(q[0] - 1.0)), "qr"),
        # symmetric, positive definite at x < 1, indefinite beyond (a jump: passing through
        # a singular M is a singular configuration where it happens). The augmented
        # system's LU solves with it: a Cholesky-based method fails its step there instead.
        (
            lambda q, p: jnp.diag(
                jnp.stack([jnp.ones((), q.dtype), jnp.where(q[0] < 1, 1.0, -1.0)])
            ),
            "kkt",
        ),
    ],
    ids=["loses-symmetry", "loses-definiteness"],
)
def test_mass_matrix_that_goes_bad_during_the_motion_is_named(mass_matrix, method):
    """x = t: M is fine up to t = 1; the first output past it (t = 1.2) names the failure."""
    mech = particle(mass_matrix)
    q0, qd0 = np.zeros(2), np.array([1.0, 0.0])
    run = dict(saveat=SAVEAT, method=method, throw=False)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), **run)
    assert bool(sol.result == jaxmbs.RESULTS.mass_matrix_invalid)
    assert abs(float(sol.t_final) - 1.2) < 1e-12
    assert bool(jnp.all(jnp.isfinite(sol.q[SAVEAT < 1.1])))
    assert bool(jnp.all(jnp.isnan(sol.q[SAVEAT > 1.1])))
    np.testing.assert_allclose(sol.ts, SAVEAT)  # the requested times, not inf
    with pytest.raises(jaxmbs.SimulationError, match=r"mass matrix M\(q\) lost.*t = 1\.2"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), saveat=SAVEAT, method=method)
    # Up to t = 1 the same run succeeds.
    ok = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.9), method=method, throw=False)
    assert bool(ok.result == jaxmbs.RESULTS.successful)


def test_projection_holds_its_tolerance_even_at_loose_step_tolerances():
    """rtol = atol = 1: steps too long for the projection to converge from are rejected,
    so every output lies on Φ = 0 (before: success with |Φ| = 10 at t = 1)."""
    mech = circle_particle()
    sol = jaxmbs.simulate(
        mech, Q0, QD0, (0.0, 1.0), rtol=1.0, atol=1.0, saveat=jnp.linspace(0, 1, 5), throw=False
    )
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    assert float(jnp.max(sol.position_residual)) < 1e-8
    assert int(sol.stats["num_rejected_steps"]) > 0


def test_mechanism_without_reference_q_is_analysed_at_q0():
    mech = circle_particle(reference=False)
    sol = jaxmbs.simulate(mech, Q0, QD0, (0.0, 1.0), rtol=1e-10, atol=1e-10)
    reference = jaxmbs.simulate(circle_particle(), Q0, QD0, (0.0, 1.0), rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(sol.q, reference.q, atol=1e-12)
    # Traced q0 (under jit) cannot be analysed: the error names reference_q.
    with pytest.raises(ValueError, match="reference_q"):
        jax.jit(lambda q: jaxmbs.simulate(mech, q, QD0, (0.0, 1.0)).q)(jnp.asarray(Q0))


def test_initial_condition_failure_is_at_t0_and_keeps_the_requested_times():
    mech = circle_particle()
    sol = jaxmbs.simulate(mech, Q0 * 1.1, QD0, (0.5, 2.0), saveat=SAVEAT[3:], throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.inconsistent_initial_conditions)
    assert abs(float(sol.t_final) - 0.5) < 1e-15
    np.testing.assert_allclose(sol.ts, SAVEAT[3:])
    assert bool(jnp.all(jnp.isnan(sol.q)))


def test_times_past_a_failure_are_the_requested_ones():
    """A step limit: outputs past t_final are NaN at their own times, not at inf."""
    mech = circle_particle()
    sol = jaxmbs.simulate(mech, Q0, QD0, (0.0, 2.0), saveat=SAVEAT, max_steps=10, throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.max_steps_reached)
    np.testing.assert_allclose(sol.ts, SAVEAT)
    assert bool(jnp.all(jnp.isnan(sol.q[sol.t_final < SAVEAT])))
    assert bool(jnp.all(jnp.isfinite(sol.q[sol.t_final >= SAVEAT])))


@pytest.mark.parametrize("tol", [0.0, 1e-16])
def test_unreachable_tolerances_refused_before_compiling(tol):
    mech = circle_particle()
    with pytest.raises(ValueError, match=r"cannot be met in float64"):
        jaxmbs.simulate(mech, Q0, QD0, (0.0, 1.0), rtol=tol, atol=tol)


def test_float32_tolerances_below_its_resolution(float32):
    mech = circle_particle()
    q0, qd0 = jnp.asarray(Q0, jnp.float32), jnp.asarray(QD0, jnp.float32)
    with pytest.raises(ValueError, match=r"cannot be met in float32.*jax_enable_x64"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), rtol=1e-10, atol=1e-10)
    with pytest.warns(UserWarning, match="chase round-off"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 0.1), rtol=3e-6, atol=3e-6)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the float32 tolerances that work: no warning
        jaxmbs.simulate(mech, q0, qd0, (0.0, 0.1), rtol=1e-5, atol=1e-5)


def test_failures_under_grad_raise_their_cause():
    """With throw=True inside jax.grad (no jit), the cause is raised, not a concretization
    error from reading the failure time; equilibrium likewise."""
    from jaxmbs.models import pendulum, slider_crank

    mech = slider_crank.slider_crank(driven=True, r=0.6, L=0.5)
    q0, qd0 = slider_crank.initial_state(mech)

    def final_x(r):
        return jaxmbs.simulate(mech, q0, qd0, (0.0, 0.1), params={"r": r}).q[-1, 0]

    with pytest.raises(jaxmbs.SimulationError, match=r"singular configuration.*t = 0\.031"):
        jax.grad(final_x)(0.6)
    physical = pendulum.physical_pendulum()
    far = np.array([2.0, 1.5, 0.4])

    def height(m):
        return jaxmbs.equilibrium(physical, far, params={"m": m}, max_steps=1)[1]

    with pytest.raises(RuntimeError, match="did not converge in 1 Newton steps"):
        jax.grad(height)(1.0)


def test_gradient_with_respect_to_an_inconsistent_q0_is_nan():
    """The outputs of a run refused at its initial state are NaN, and so is every gradient
    through them: reverse and forward mode, with respect to q0 and to the parameters."""
    mech = circle_particle()

    def final_x(q0, g=9.81):
        sol = jaxmbs.simulate(mech, q0, QD0, (0.0, 0.5), params={"g": g}, throw=False)
        return sol.q[-1, 0]

    bad = jnp.asarray(Q0 * 1.1)
    assert bool(jnp.isnan(final_x(bad)))
    assert bool(jnp.all(jnp.isnan(jax.grad(final_x)(bad))))
    assert bool(jnp.all(jnp.isnan(jax.jacfwd(final_x)(bad))))
    assert bool(jnp.isnan(jax.grad(final_x, argnums=1)(bad, 9.81)))
    good = jax.grad(final_x)(jnp.asarray(Q0))
    assert bool(jnp.all(jnp.isfinite(good))) and float(jnp.max(jnp.abs(good))) > 1e-3
