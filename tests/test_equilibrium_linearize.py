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
    """About the four-bar's equilibrium under gravity, and (labelled, off any equilibrium)
    the local Jacobian at a moving state."""
    plain, redundant = fourbar.fourbar(), fourbar.fourbar(redundant=True)
    q_eq = jaxmbs.equilibrium(plain, fourbar_configuration(FOURBAR_EQUILIBRIUM + 0.3))
    a = jaxmbs.linearize(plain, q_eq, np.zeros(9))
    b = jaxmbs.linearize(redundant, q_eq, np.zeros(9))
    assert a.at_equilibrium and a.frequencies.size == 1
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, rtol=1e-9, atol=1e-9)
    q0, qd0 = fourbar.initial_state(plain)
    a = jaxmbs.linearize(plain, q0, qd0, equilibrium_only=False)
    b = jaxmbs.linearize(redundant, q0, qd0, equilibrium_only=False)
    assert not a.at_equilibrium
    np.testing.assert_allclose(a.eigenvalues, b.eigenvalues, rtol=1e-9, atol=1e-9)


# -- equilibrium of gravity-loaded mechanisms without springs ------------------------------


def fourbar_configuration(crank_angle: float) -> np.ndarray:
    """The default four-bar assembled at a crank angle (closed form, C above the ground)."""
    return fourbar._configuration(dict(fourbar.DEFAULTS), crank_angle)


def fourbar_potential(crank_angle):
    """V(θ) = g Σ mᵢ yᵢ of the four-bar in its one minimal coordinate, the crank angle:
    positions by the closed-form loop closure (an independent route to the equilibrium)."""
    p = fourbar.DEFAULTS
    B = p["l1"] * jnp.stack([jnp.cos(crank_angle), jnp.sin(crank_angle)])
    D = jnp.array([p["l0"], 0.0])
    d = jnp.linalg.norm(D - B)
    a = (p["l2"] ** 2 - p["l3"] ** 2 + d**2) / (2 * d)
    u = (D - B) / d
    C = B + a * u + jnp.sqrt(p["l2"] ** 2 - a**2) * jnp.stack([-u[1], u[0]])  # C above
    heights = jnp.stack([B[1] / 2, (B[1] + C[1]) / 2, C[1] / 2])
    return p["g"] * jnp.stack([p["m1"], p["m2"], p["m3"]]) @ heights


#: The stable equilibrium's crank angle: dV/dθ = 0 by Brent's method (V'' > 0 there).
FOURBAR_EQUILIBRIUM = brentq(
    lambda th: float(jax.grad(fourbar_potential)(th)), -2.5, -1.0, xtol=1e-15, rtol=1e-15
)


def test_equilibrium_of_pendulums_under_gravity_alone():
    """Hanging straight down, from a guess 0.3 rad away, from a guess off the circle, and
    from the equilibrium itself (Newton stops at once)."""
    math = pendulum.mathematical_pendulum()
    rho = float(math.params["rho"])
    for guess in (
        rho * np.array([np.sin(0.3), -np.cos(0.3)]),
        1.1 * rho * np.array([np.sin(-0.3), -np.cos(0.3)]),
        np.array([0.0, -rho]),
    ):
        np.testing.assert_allclose(jaxmbs.equilibrium(math, guess), [0.0, -rho], atol=1e-10)
    physical = pendulum.physical_pendulum()
    rho = float(physical.params["rho"])
    gamma = -np.pi / 2 + 0.3
    guess = np.array([rho * np.cos(gamma), rho * np.sin(gamma), gamma])
    q = jaxmbs.equilibrium(physical, guess)
    np.testing.assert_allclose(q, [0.0, -rho, -np.pi / 2], atol=1e-10)
    lam = jaxmbs.equilibrium_multipliers(physical, q)
    Q = np.array([0.0, -float(physical.params["m"]) * G, 0.0])
    C = np.asarray(jaxmbs.constraint_jacobian(physical, q, 0.0, physical.params))
    np.testing.assert_allclose(C.T @ np.asarray(lam), Q, atol=1e-10)  # the pin holds m g


@pytest.mark.parametrize("redundant", [False, True])
def test_equilibrium_of_the_fourbar_under_gravity(redundant):
    """The four-bar without springs hangs where dV/dθ = 0 in its minimal coordinate."""
    mech = fourbar.fourbar(redundant=redundant)
    q = jaxmbs.equilibrium(mech, fourbar_configuration(FOURBAR_EQUILIBRIUM + 0.3))
    assert abs(float(q[2]) - FOURBAR_EQUILIBRIUM) < 1e-10
    np.testing.assert_allclose(q, fourbar_configuration(FOURBAR_EQUILIBRIUM), atol=1e-10)
    # Started on the equilibrium it stays there.
    again = jaxmbs.equilibrium(mech, q)
    np.testing.assert_allclose(again, q, atol=1e-13)


def spatial_pendulum(orientation: str = "euler_parameters") -> jaxmbs.Mechanism:
    """A rod of length 2ρ hinged at its top end about the global x axis, gravity along −z."""
    from jaxmbs.model.joints import spatial

    body = spatial.Body("rod", "m", (0.02, 0.02, 0.001), orientation)
    hinge = spatial.Revolute("hinge", None, (0.0, 0.0, 0.0), (1.0, 0.0, 0.0), 0,
                             (0.0, 0.0, RHO), (1.0, 0.0, 0.0))  # fmt: skip
    hanging = spatial.pose((0.0, 0.0, -RHO), np.eye(3), orientation)
    return spatial.spatial_mechanism([body], [hinge], {"m": M}, reference_q=hanging)


def test_equilibrium_of_a_spatial_pendulum_in_euler_parameters():
    from jaxmbs.model.joints import spatial

    mech = spatial_pendulum()
    tilt = 0.3
    rotation = np.array([[1, 0, 0], [0, np.cos(tilt), -np.sin(tilt)],
                         [0, np.sin(tilt), np.cos(tilt)]])  # fmt: skip
    guess = spatial.pose(rotation @ np.array([0.0, 0.0, -RHO]), rotation)
    q = jaxmbs.equilibrium(mech, guess)
    np.testing.assert_allclose(q, spatial.pose((0.0, 0.0, -RHO), np.eye(3)), atol=1e-10)


def test_equilibrium_gradient_under_gravity_against_central_differences():
    """dθ*/dm₂ of the four-bar's hanging crank angle (no springs: the geometric stiffness
    alone makes the equilibrium isolated)."""
    mech = fourbar.fourbar()
    guess = fourbar_configuration(FOURBAR_EQUILIBRIUM + 0.3)

    def angle(m2):
        return jaxmbs.equilibrium(mech, guess, params={"m2": m2})[2]

    grad = float(jax.grad(angle)(2.0))
    h = 1e-5
    fd = float((angle(2.0 + h) - angle(2.0 - h)) / (2 * h))
    assert abs(grad) > 1e-3
    assert abs(grad - fd) < 1e-7 * abs(fd)


def test_equilibrium_refuses_bad_arguments_by_name():
    mech = pendulum.physical_pendulum()
    guess = np.array([0.0, -0.5, -np.pi / 2])
    with pytest.raises(ValueError, match=r"params\['m'\] is not finite"):
        jaxmbs.equilibrium(mech, guess, params={"m": float("nan")})
    with pytest.raises(ValueError, match="keys the mechanism does not have"):
        jaxmbs.equilibrium(mech, guess, params={"mass": 1.0})
    with pytest.raises(ValueError, match="q_guess is not finite"):
        jaxmbs.equilibrium(mech, guess * np.nan)
    # A partial mapping replaces only its keys, as in simulate: the equilibrium does not
    # depend on the mass, the multipliers do.
    q = jaxmbs.equilibrium(mech, guess, params={"m": 2.0})
    np.testing.assert_allclose(q, guess, atol=1e-12)
    lam = jaxmbs.equilibrium_multipliers(mech, q, params={"m": 2.0})
    assert abs(abs(float(lam[1])) - 2.0 * G) < 1e-10


def test_equilibrium_without_an_isolated_one_says_why():
    """A pinned rod without gravity or springs: every angle is an equilibrium, and
    Newton's bordered stiffness is singular."""
    flat = planar.planar_mechanism(
        [planar.Body("rod", M, J)], [planar.Revolute("pivot", 0, (-RHO, 0.0))], {},
        gravity=(0.0, 0.0),
    ).with_structure(rod_state(0.0))  # fmt: skip
    with pytest.raises(RuntimeError, match="no isolated equilibrium near the guess"):
        jaxmbs.equilibrium(flat, rod_state(0.4) + 0.01)


# -- linearisation only about an equilibrium ------------------------------------------------


def test_linearize_refuses_a_state_that_is_not_an_equilibrium():
    """A physical pendulum at rest 30° from hanging: its "frequency" would mean nothing."""
    mech = pendulum.physical_pendulum()
    rho = float(mech.params["rho"])
    gamma = -np.pi / 2 + np.pi / 6
    q = np.array([rho * np.cos(gamma), rho * np.sin(gamma), gamma])
    with pytest.raises(ValueError, match="not an equilibrium"):
        jaxmbs.linearize(mech, q, np.zeros(3))
    moving = np.array([-rho * np.sin(gamma), rho * np.cos(gamma), 1.0])  # consistent q̇
    with pytest.raises(ValueError, match="not an equilibrium"):
        jaxmbs.linearize(mech, q, moving)
    local = jaxmbs.linearize(mech, q, np.zeros(3), equilibrium_only=False)
    assert not local.at_equilibrium
    assert local.eigenvalues.size == 2
    with pytest.raises(ValueError, match="only for a linearisation about an equilibrium"):
        _ = local.frequencies


def test_linearize_refuses_inconsistent_or_non_finite_states_and_merges_params():
    mech = pendulum.physical_pendulum()
    q = np.array([0.0, -0.5, -np.pi / 2])
    with pytest.raises(ValueError, match="inconsistent state"):
        jaxmbs.linearize(mech, q + np.array([0.01, 0.0, 0.0]), np.zeros(3))
    with pytest.raises(ValueError, match="inconsistent state"):
        jaxmbs.linearize(mech, q, np.array([0.0, 1.0, 0.0]))
    with pytest.raises(ValueError, match="not finite"):
        jaxmbs.linearize(mech, q * np.nan, np.zeros(3))
    p = {k: float(v) for k, v in mech.params.items()}
    lin = jaxmbs.linearize(mech, q, np.zeros(3), params={"J": 0.1})  # partial
    expected = np.sqrt(p["m"] * p["g"] * p["rho"] / (0.1 + p["m"] * p["rho"] ** 2))
    np.testing.assert_allclose(lin.frequencies, [expected], rtol=1e-10)
