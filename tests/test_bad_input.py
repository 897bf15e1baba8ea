"""Bad input gives a clear error naming the problem, never silent garbage."""

import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.model.joints import planar
from jaxmbs.models import fourbar, pendulum


@pytest.fixture(scope="module")
def model():
    mech = fourbar.fourbar()
    return (mech, *fourbar.initial_state(mech))


def test_wrong_shapes(model):
    mech, q0, qd0 = model
    with pytest.raises(ValueError, match=r"q0 must have shape \(9,\)"):
        jaxmbs.simulate(mech, q0[:8], qd0, (0.0, 1.0))
    with pytest.raises(ValueError, match=r"qd0 must have shape \(9,\)"):
        jaxmbs.simulate(mech, q0, jnp.zeros((9, 1)), (0.0, 1.0))
    with pytest.raises(ValueError, match="t_span"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0, 2.0))
    with pytest.raises(ValueError, match="saveat must lie within"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), saveat=jnp.array([0.5, 2.0]))
    with pytest.raises(ValueError, match="mass_matrix"):
        jaxmbs.Mechanism(lambda q, p: jnp.eye(3), lambda t, q, qd, p: q, n=2)
    with pytest.raises(ValueError, match="forces"):
        jaxmbs.Mechanism(lambda q, p: jnp.eye(2), lambda t, q, qd, p: q[:1], n=2)
    with pytest.raises(ValueError, match="unknown method"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), method="nope")


def test_non_finite_state(model):
    mech, q0, qd0 = model
    with pytest.raises(ValueError, match="not finite"):
        jaxmbs.simulate(mech, q0.at[3].set(jnp.nan), qd0, (0.0, 1.0))
    with pytest.raises(ValueError, match="not finite"):
        jaxmbs.simulate(mech, q0, qd0.at[0].set(jnp.inf), (0.0, 1.0))


def test_inconsistent_initial_conditions(model):
    mech, q0, qd0 = model
    with pytest.raises(
        ValueError, match=r"inconsistent initial conditions: \|Φ\(q0\)\| = 1.000e-02"
    ):
        jaxmbs.simulate(mech, q0.at[0].add(0.01), qd0, (0.0, 1.0))
    with pytest.raises(ValueError, match="inconsistent initial conditions"):
        jaxmbs.simulate(mech, q0, qd0.at[0].add(0.5), (0.0, 1.0))


def test_singular_mass_matrix(model):
    mech, q0, qd0 = model
    massless = {**mech.params, "m2": 0.0}
    with pytest.raises(ValueError, match="M\\(q0\\) is not positive definite"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 1.0), params=massless)
    with pytest.raises(ValueError, match="not positive definite"):
        planar.planar_mechanism(
            [planar.Body("b", 0.0, 1.0)],
            [planar.Revolute("pin", 0, (0.0, 0.0))],
            reference_q=np.zeros(3),
        )


def test_assemble_reports_failure():
    mech = fourbar.fourbar()
    q, _ = fourbar.initial_state(mech)
    # Crank angle fixed where the loop cannot close (ground link made too long).
    far = {**mech.params, "l0": 2.0}
    with pytest.raises(ValueError, match=r"did not converge: \|Φ\| = "):
        jaxmbs.assemble(mech, q, params=far, fixed=("crank.phi",))
    with pytest.raises(ValueError, match="unknown coordinate"):
        jaxmbs.assemble(mech, q, fixed=("crank.theta",))


def test_assemble_from_a_rough_guess():
    mech = pendulum.physical_pendulum()
    q, qd = jaxmbs.assemble(
        mech, jnp.array([0.3, -0.3, -0.9]), jnp.array([1.0, 0.0, 0.0]), fixed=("gamma",)
    )
    np.testing.assert_allclose(q[2], -0.9, rtol=1e-15)  # the fixed coordinate: its guess
    np.testing.assert_allclose(qd[2], 0.0, rtol=0, atol=1e-15)
    assert float(jnp.max(jnp.abs(jaxmbs.position_residual(mech, q, 0.0, mech.params)))) < 1e-13
    assert float(jnp.max(jnp.abs(jaxmbs.velocity_residual(mech, q, qd, 0.0, mech.params)))) < 1e-13


def test_state_functions_take_simulate_s_order():
    """position_residual, velocity_residual, constraint_jacobian, acceleration_rhs,
    accelerations and the reactions take (mechanism, q[, qd], t, params), as `simulate`
    and `equilibrium` do; the time defaults to 0 and the parameters to the mechanism's. The
    old order (time first) is refused with a message naming the order."""
    mech = fourbar.fourbar()
    q, qd = fourbar.initial_state(mech)
    t, p = 0.0, mech.params
    np.testing.assert_allclose(
        jaxmbs.position_residual(mech, q), jaxmbs.position_residual(mech, q, t, p)
    )
    np.testing.assert_allclose(
        jaxmbs.velocity_residual(mech, q, qd), jaxmbs.velocity_residual(mech, q, qd, t, p)
    )
    qdd = jaxmbs.accelerations(mech, q, qd)
    C, gamma = jaxmbs.constraint_jacobian(mech, q), jaxmbs.acceleration_rhs(mech, q, qd)
    assert float(jnp.max(jnp.abs(C @ qdd - gamma))) < 1e-12
    calls = {  # the old order
        "position_residual": lambda: jaxmbs.position_residual(mech, t, q, p),
        "velocity_residual": lambda: jaxmbs.velocity_residual(mech, t, q, qd, p),
        "constraint_jacobian": lambda: jaxmbs.constraint_jacobian(mech, t, q, p),
        "acceleration_rhs": lambda: jaxmbs.acceleration_rhs(mech, t, q, qd, p),
        "accelerations": lambda: jaxmbs.accelerations(mech, t, q, qd, p),
        "physical_reactions": lambda: jaxmbs.physical_reactions(mech, t, q, qd, jnp.eye(9)),
    }
    for call in calls.values():
        with pytest.raises(TypeError, match="in simulate's order"):
            call()


def cone():
    """A particle on the cone x² − y² = 0 pulled into its apex by a critically damped spring;
    at the apex the constraint gradient vanishes (rank 1 → 0)."""
    return jaxmbs.Mechanism(
        lambda q, p: jnp.eye(2),
        lambda t, q, qd, p: -100.0 * q - 20.0 * qd,
        lambda t, q, p: jnp.atleast_1d(q[0] ** 2 - q[1] ** 2),
        reference_q=np.array([1.0, 1.0]),
    )


def test_rank_change_is_reported():
    mech = cone()
    q0, qd0 = jnp.array([-1.0, -1.0]), jnp.array([0.0, 0.0])
    # Pivots below 10 % of their scale count as singular: reached near x ≈ 0.035.
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), rank_rtol=0.1, throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.singular_configuration)
    t_stop = float(sol.t_final)
    assert 0.1 < t_stop < 1.0 and bool(jnp.all(jnp.isnan(sol.q)))  # t1 was not reached
    # The state where it stopped: the same motion just short of the stop, unchecked.
    before = jaxmbs.simulate(mech, q0, qd0, (0.0, t_stop * (1 - 1e-9)), rank_rtol=None)
    assert abs(float(before.q[-1, 0])) < 0.036
    with pytest.raises(Exception, match="singular configuration"):
        jaxmbs.simulate(mech, q0, qd0, (0.0, 2.0), rank_rtol=0.1)
    # Stopping short of it is fine.
    ok = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.05), rank_rtol=0.1)
    assert bool(ok.result == jaxmbs.RESULTS.successful)
