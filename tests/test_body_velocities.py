"""Spatial velocities in a user's terms (`Layout.rates`, `Layout.velocities`): a body's centre
velocity and angular velocity, global or in the body's frame, to the coordinates' rates and
back, for Euler-parameter and ZXZ bodies alike; checked by the round trip, by the
Euler-parameter normalisation's derivative, and by the mechanism's own kinetic energy
against ½ m |v|² + ½ ω'ᵀ J ω' written by hand."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmbs.model.joints import spatial
from jaxmbs.model.joints.orientation import zxz_rates
from jaxmbs.model.joints.spatial import body_angular_velocity

MASSES = (2.0, 3.0)
INERTIAS = ((0.1, 0.2, 0.3), (0.4, 0.25, 0.15))  # principal, distinct: a wrong frame shows


@pytest.fixture(scope="module")
def free_bodies():
    """Two free bodies (one in Euler parameters, one in ZXZ angles), no joints, no gravity,
    at a generic configuration, with random velocities and angular velocities."""
    bodies = [
        spatial.Body("a", MASSES[0], INERTIAS[0]),
        spatial.Body("b", MASSES[1], INERTIAS[1], orientation=spatial.ZXZ),
    ]
    rng = np.random.default_rng(7)
    e = rng.normal(size=4)
    q = np.concatenate([rng.normal(size=3), e / np.linalg.norm(e), rng.normal(size=3)])
    q = np.concatenate([q, [0.3, 1.1, -0.7]])  # θ = 1.1: far from the gimbal lock
    mech = spatial.spatial_mechanism(bodies, [], gravity=(0.0, 0.0, 0.0), reference_q=q)
    return mech, spatial.Layout.from_bodies(bodies), jnp.asarray(q), rng.normal(size=(2, 2, 3))


@pytest.mark.parametrize("frame", ["global", "body"])
def test_rates_and_velocities_are_inverse(free_bodies, frame):
    """ω and ṙ → q̇ → ω and ṙ to round-off; the Euler parameters' rates keep eᵀe = 1
    (eᵀė = 0); the ZXZ rates give back ω' through the autodiff-based `body_angular_velocity`."""
    _, layout, q, (v, omega) = free_bodies
    qd = layout.rates(q, v, omega, frame=frame)
    v_back, omega_back = layout.velocities(q, qd, frame=frame)
    np.testing.assert_allclose(v_back, v, rtol=0, atol=1e-14)
    np.testing.assert_allclose(omega_back, omega, rtol=0, atol=1e-13)
    e, e_dot = q[3:7], qd[3:7]
    assert abs(float(e @ e_dot)) < 1e-15
    assert float(jnp.max(jnp.abs(e_dot))) > 0.1
    omega_body = layout.velocities(q, qd, frame="body")[1][1]
    rates = zxz_rates(q[10:13], omega_body)
    np.testing.assert_allclose(body_angular_velocity(q[10:13], rates), omega_body, atol=1e-13)


def test_kinetic_energy_in_the_bodies_frames(free_bodies):
    """T of the mechanism (its mass matrix from the coordinates) at the rates of given
    global (v, ω) equals Σ ½ m |v|² + ½ ω'ᵀ J ω' with ω' = Aᵀ ω: the angular velocity's
    frame is the right one (with distinct principal inertias a transposed A changes T)."""
    mech, layout, q, (v, omega) = free_bodies
    qd = layout.rates(q, v, omega)
    A = layout.rotations(q)
    expected = 0.0
    for k in range(2):
        omega_body = A[k].T @ omega[k]
        expected += 0.5 * MASSES[k] * v[k] @ v[k]
        expected += 0.5 * omega_body @ (jnp.asarray(INERTIAS[k]) * omega_body)
    energy = jax.jit(mech.energy)(q, qd)
    assert abs(float(energy - expected)) < 1e-13 * float(expected)
    wrong = jnp.sum(jnp.asarray(INERTIAS[1]) * (A[1] @ omega[1]) ** 2) / 2
    right = jnp.sum(jnp.asarray(INERTIAS[1]) * (A[1].T @ omega[1]) ** 2) / 2
    assert abs(float(wrong - right)) > 1e-2  # the check can tell the frames apart


def test_bad_input_is_refused(free_bodies):
    _, layout, q, (v, omega) = free_bodies
    with pytest.raises(ValueError, match="shape"):
        layout.rates(q, v[0], omega)
    with pytest.raises(ValueError, match="frame"):
        layout.rates(q, v, omega, frame="world")
    with pytest.raises(ValueError, match="frame"):
        layout.velocities(q, jnp.zeros(13), frame="inertial")


def test_zxz_rates_at_the_gimbal_lock_are_not_finite():
    """At sin θ = 0 no angle rates give a rotation about the body's x or y axis."""
    rates = zxz_rates(jnp.array([0.2, 0.0, 0.4]), jnp.array([1.0, 0.0, 0.0]))
    assert not bool(jnp.all(jnp.isfinite(rates)))
