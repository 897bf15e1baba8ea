"""Static equilibrium (residual, analytic cases, gradient by the implicit function theorem) and
linearisation (analytic frequencies, absolute vs joint coordinates, independence of the
formulation and of redundant rows)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

import jaxmbs
from jaxmbs.model.joints import forces, planar
from jaxmbs.models import chain, fourbar, pendulum

M, G, RHO, J = 1.0, 9.81, 0.5, 1.0 / 12


def torsion_pendulum(k: float = 20.0, phi0: float = 0.4, c: float = 0.0):
    """A rod pinned at its end with a torsional spring: m g ρ cos φ + k (φ − φ0) = 0."""
    spring = forces.RotationalSpringDamper(
        "torsion", stiffness="k", damping=c, free_angle=phi0, body_i=None, body_j=0
    )
    mech = planar.planar_mechanism(
        [planar.Body("rod", M, J)], [planar.Revolute("pivot", 0, (-RHO, 0.0))], {"k": k},
        elements=[spring],
    )  # fmt: skip
    return mech.with_structure(np.array([RHO, 0.0, 0.0]))


def rod_state(phi: float) -> np.ndarray:
    return np.array([RHO * np.cos(phi), RHO * np.sin(phi), phi])


def analytic_angle(k: float, phi0: float) -> float:
    return brentq(lambda f: M * G * RHO * np.cos(f) + k * (f - phi0), -np.pi / 2, np.pi / 2)


def test_equilibrium_of_the_torsion_pendulum():
    mech = torsion_pendulum()
    q = jaxmbs.equilibrium(mech, rod_state(1.0) + np.array([0.05, -0.02, 0.0]))  # off Φ = 0
    assert abs(float(q[2]) - analytic_angle(20.0, 0.4)) < 1e-12
    assert float(jnp.max(jnp.abs(jaxmbs.position_residual(mech, q, 0.0, mech.params)))) < 1e-12
    lam = jaxmbs.equilibrium_multipliers(mech, q)
    np.testing.assert_allclose(np.asarray(lam), [0.0, -M * G], atol=1e-10)  # the pin holds mg


def test_equilibrium_gradient_against_central_differences_and_the_analytic_one():
    mech = torsion_pendulum()
    guess = rod_state(0.0)

    def angle(k):
        return jaxmbs.equilibrium(mech, guess, params={"k": k})[2]

    k = 20.0
    grad = float(jax.grad(angle)(k))
    h = 1e-4
    fd = float((angle(k + h) - angle(k - h)) / (2 * h))
    phi = analytic_angle(k, 0.4)
    analytic = -(phi - 0.4) / (k - M * G * RHO * np.sin(phi))  # dF/dk + dF/dφ dφ/dk = 0
    assert abs(grad) > 1e-3
    assert abs(grad - fd) < 1e-6 * abs(fd)
    assert abs(grad - analytic) < 1e-9 * abs(analytic)


def test_equilibrium_that_does_not_converge_says_so():
    mech = torsion_pendulum()
    with pytest.raises(RuntimeError, match="did not converge in 2 Newton steps"):
        jaxmbs.equilibrium(mech, rod_state(2.5), max_steps=2)


def test_physical_pendulum_frequency_and_formulation_independence():
    """Blajer's physical pendulum hanging at rest: ω² = m g ρ / (J + m ρ²)."""
    mech = pendulum.physical_pendulum()
    p = {k: float(v) for k, v in mech.params.items()}
    q = np.array([0.0, -p["rho"], -np.pi / 2])
    expected = np.sqrt(p["m"] * p["g"] * p["rho"] / (p["J"] + p["m"] * p["rho"] ** 2))
    runs = {m: jaxmbs.linearize(mech, q, np.zeros(3), method=m) for m in ("qr", "kkt", "banded")}
    for lin in runs.values():
        assert lin.A.shape == (2, 2)
        np.testing.assert_allclose(lin.frequencies, [expected], rtol=1e-10)
        np.testing.assert_allclose(lin.damping_ratios, [0.0], atol=1e-10)


def test_damped_torsion_pendulum_eigenvalues():
    """J_O φ̈ + c φ̇ + (k − m g ρ sin φ*) δφ = 0 about the equilibrium φ*."""
    k, c = 20.0, 0.7
    mech = torsion_pendulum(k=k, c=c)
    q = jaxmbs.equilibrium(mech, rod_state(0.0))
    phi = float(q[2])
    lin = jaxmbs.linearize(mech, q, np.zeros(3))
    inertia = J + M * RHO**2
    roots = np.roots([inertia, c, k - M * G * RHO * np.sin(phi)])
    np.testing.assert_allclose(np.sort_complex(lin.eigenvalues), np.sort_complex(roots), rtol=1e-9)
    omega = np.sqrt((k - M * G * RHO * np.sin(phi)) / inertia)
    np.testing.assert_allclose(lin.frequencies, [omega], rtol=1e-9)
    np.testing.assert_allclose(lin.damping_ratios, [c / (2 * inertia * omega)], rtol=1e-9)


def joint_coordinate_double_pendulum(length: float = 1.0, mass: float = 1.0, g: float = 9.81):
    """Two uniform rods, coordinates the joint angles (α1 from the downward vertical, α2
    relative): no constraints, T and V written in α."""

    def centres(a):
        t1, t2 = a[0], a[0] + a[1]
        c1 = 0.5 * length * jnp.stack([jnp.sin(t1), -jnp.cos(t1)])
        c2 = 2 * c1 + 0.5 * length * jnp.stack([jnp.sin(t2), -jnp.cos(t2)])
        return c1, c2, jnp.stack([t1, t2])

    def kinetic(a, ad, p):
        (c1, c2, th), (v1, v2, w) = jax.jvp(centres, (a,), (ad,))
        rods = mass * (v1 @ v1 + v2 @ v2) + mass * length**2 / 12 * (w @ w)
        return 0.5 * rods

    def potential(a, p):
        c1, c2, _ = centres(a)
        return mass * g * (c1[1] + c2[1])

    return jaxmbs.Mechanism.from_lagrangian(kinetic, potential, n=2)


def test_chain_in_absolute_coordinates_against_joint_coordinates():
    absolute = chain.chain(2)
    hanging = chain.configuration(2, 1.0, [0.0, 0.0])
    lin_abs = jaxmbs.linearize(absolute, hanging, np.zeros(6))
    lin_joint = jaxmbs.linearize(joint_coordinate_double_pendulum(), np.zeros(2), np.zeros(2))
    assert lin_abs.A.shape == (4, 4)
    assert lin_abs.frequencies.size == 2
    np.testing.assert_allclose(lin_abs.frequencies, lin_joint.frequencies, rtol=1e-9)
    # Two uniform rods, small angles: M = m l² [[4/3, 1/2], [1/2, 1/3]], K = m g l diag(3/2, 1/2),
    # det(K − ω² M) = 0 gives ω² = (g / l)(3 ∓ 6/√7).
    analytic = np.sqrt(9.81 * (3 + np.array([-1.0, 1.0]) * 6 / np.sqrt(7)))
    np.testing.assert_allclose(lin_abs.frequencies, analytic, rtol=1e-9)


def test_redundant_rows_leave_the_eigenvalues_unchanged():
    plain, redundant = fourbar.fourbar(), fourbar.fourbar(redundant=True)
    q0, qd0 = fourbar.initial_state(plain)
    a = jaxmbs.linearize(plain, q0, qd0)
    b = jaxmbs.linearize(redundant, q0, qd0)
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, rtol=1e-9, atol=1e-9)
    # a moving four-bar is not at equilibrium, but it has a state matrix all the same
    assert np.max(np.abs(a.eigenvalues)) > 0.1


def test_pfaffian_chaplygin_sleigh():
    """A sleigh (knife edge a behind the centre of mass, no gravity) moving straight ahead at
    u₀: δω̇ = −m a u₀ / (J + m a²) δω, and δu, x, y, φ neutral — eigenvalues {0, 0, 0, 0, λ}
    with five states (three positions, two independent velocities)."""
    m, J, a, u0 = 2.0, 0.3, 0.4, 1.5
    mech = planar.planar_mechanism(
        [planar.Body("sleigh", m, J)], [planar.KnifeEdge("blade", 0, (-a, 0.0))], gravity=(0.0, 0.0)
    ).with_structure(np.zeros(3))
    lin = jaxmbs.linearize(mech, np.zeros(3), np.array([u0, 0.0, 0.0]))
    assert lin.A.shape == (5, 5) and len(lin.positions) == 3 and len(lin.velocities) == 2
    s = lin.eigenvalues
    np.testing.assert_allclose(s[:4], 0.0, atol=1e-9)
    np.testing.assert_allclose(s[4], -m * a * u0 / (J + m * a**2), rtol=1e-9)
    kkt = jaxmbs.linearize(mech, np.zeros(3), np.array([u0, 0.0, 0.0]), method="kkt")
    np.testing.assert_allclose(kkt.eigenvalues, s, atol=1e-9)
