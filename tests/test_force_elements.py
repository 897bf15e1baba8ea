"""Force elements against analytic cases: the spring-mass frequency, the damped oscillator's
solution and logarithmic decrement, the rotational-spring pendulum's equilibrium, spatial
springs on Euler-parameter bodies, and the one-sided law."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import brentq

import jaxmbs
from jaxmbs.model.joints import forces, planar, spatial

TOL = 1e-11


def slider(stiffness: float, damping: float, dim: int):
    """A body on a prismatic joint along the ground's x axis, tied to the origin by a spring
    of free length 1 (no gravity): m ẍ + c ẋ + k (x − 1) = 0."""
    spring = forces.SpringDamper(
        "spring", stiffness="k", damping="c", free_length=1.0, body_i=None,
        point_i=(0.0,) * dim, body_j=0, point_j=(0.0,) * dim,
    )  # fmt: skip
    params = {"k": stiffness, "c": damping}
    if dim == 2:
        joint = planar.Translational("rail", None, (0.0, 0.0), (1.0, 0.0), 0)
        return planar.planar_mechanism(
            [planar.Body("mass", 2.0, 0.1)], [joint], params, gravity=(0.0, 0.0), elements=[spring]
        ).with_structure(np.array([1.0, 0.0, 0.0]))
    x, y = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0)
    joint = spatial.Translational("rail", None, (0.0, 0.0, 0.0), x, y, 0, (0.0, 0.0, 0.0), x, y)
    return spatial.spatial_mechanism(
        [spatial.Body("mass", 2.0, (0.1, 0.2, 0.3))], [joint], params, gravity=(0.0, 0.0, 0.0),
        elements=[spring],
    ).with_structure(spatial.pose((1.0, 0.0, 0.0), np.eye(3)))  # fmt: skip


#: Output times of every run of the slider (three periods at 40 outputs each in
#: `oscillate`): the runs of one built slider then share one compiled solve.
SLIDER_OUT = 121


@pytest.fixture(scope="module")
def sliders():
    """The slider of `slider` (k = 50, m = 2, c = 0) in the plane and in space, each built
    once: k and c are parameters, so the damped runs pass c and reuse the compiled solve."""
    return {dim: slider(50.0, 0.0, dim) for dim in (2, 3)}


def run_slider(mech, x0: float, ts, params=None):
    q, qd = np.zeros(mech.n), np.zeros(mech.n)
    q[0] = x0
    if mech.n == 7:
        q[3] = 1.0  # e0 of the identity orientation
    sol = jaxmbs.simulate(
        mech, q, qd, (0.0, float(ts[-1])), saveat=ts, params=params, rtol=TOL, atol=TOL
    )
    assert sol.successful
    return np.asarray(sol.q[:, 0])


@pytest.mark.parametrize("dim", [2, 3])
def test_spring_mass_frequency(sliders, dim):
    k, m = 50.0, 2.0
    omega = np.sqrt(k / m)
    ts = np.linspace(0.0, 3.0, SLIDER_OUT)
    x = run_slider(sliders[dim], 1.1, ts, params={"k": k, "c": 0.0})
    np.testing.assert_allclose(x, 1.0 + 0.1 * np.cos(omega * ts), atol=1e-8)


def test_damped_oscillator_solution_and_logarithmic_decrement(sliders):
    k, c, m = 50.0, 0.8, 2.0
    omega = np.sqrt(k / m)
    zeta = c / (2 * np.sqrt(k * m))
    omega_d = omega * np.sqrt(1 - zeta**2)
    period = 2 * np.pi / omega_d
    ts = np.linspace(0.0, 3 * period, SLIDER_OUT)  # 40 outputs per period
    x = run_slider(sliders[2], 1.1, ts, params={"k": k, "c": c}) - 1.0
    phase = np.cos(omega_d * ts) + zeta * omega / omega_d * np.sin(omega_d * ts)
    analytic = 0.1 * np.exp(-zeta * omega * ts) * phase
    np.testing.assert_allclose(x, analytic, atol=1e-9)
    # δ = ln(x(t) / x(t + T_d)) = 2π ζ / √(1 − ζ²), over each of the three periods.
    decrements = np.log(x[0:-1:40] / x[40::40])
    np.testing.assert_allclose(decrements, 2 * np.pi * zeta / np.sqrt(1 - zeta**2), rtol=1e-7)


def rotational_pendulum(k: float, c: float, phi0: float):
    """A rod pinned at its end (ρ = 0.5 from the centre of mass) with a torsional spring to
    the ground: static equilibrium m g ρ cos φ + k (φ − φ0) = 0."""
    spring = forces.RotationalSpringDamper(
        "torsion", stiffness="k", damping="c", free_angle=phi0, body_i=None, body_j=0
    )
    joint = planar.Revolute("pivot", 0, (-0.5, 0.0))
    return planar.planar_mechanism(
        [planar.Body("rod", 1.0, 1.0 / 12)], [joint], {"k": k, "c": c}, elements=[spring]
    ).with_structure(np.array([0.5, 0.0, 0.0]))


def pendulum_state(phi: float) -> np.ndarray:
    return np.array([0.5 * np.cos(phi), 0.5 * np.sin(phi), phi])


def test_rotational_spring_pendulum_equilibrium():
    k, phi0, m, g, rho = 20.0, 0.4, 1.0, 9.81, 0.5
    phi_star = brentq(lambda f: m * g * rho * np.cos(f) + k * (f - phi0), -np.pi / 2, np.pi / 2)
    mech = rotational_pendulum(k, 1.5, phi0)
    zero = np.zeros(3)
    qdd = np.asarray(jaxmbs.accelerations(mech, pendulum_state(phi_star), zero, 0.0))
    assert np.max(np.abs(qdd)) < 1e-10
    off = np.asarray(jaxmbs.accelerations(mech, pendulum_state(phi_star + 0.01), zero, 0.0))
    assert off[2] < -0.1  # displaced upward, the net torque turns it back (sign check)
    sol = jaxmbs.simulate(
        mech, pendulum_state(phi0), zero, (0.0, 30.0), saveat=jnp.array([30.0]), rtol=TOL, atol=TOL
    )
    assert abs(float(sol.q[-1, 2]) - phi_star) < 1e-8
    torque = float(jaxmbs.element_forces(mech, sol)["torsion"][-1])
    assert abs(torque - k * (phi_star - phi0)) < 1e-6


def test_spatial_torsion_spring_about_a_joint_axis():
    """A body on a revolute about the global z axis with a torsional spring: φ(t) = φ₀ cos ωt,
    ω = √(k / J_zz), whichever body frame the Euler parameters start from."""
    k, J = 3.0, 0.3
    z = (0.0, 0.0, 1.0)
    joint = spatial.Revolute("hinge", None, (0.0, 0.0, 0.0), z, 0, (0.0, 0.0, 0.0), z)
    spring = forces.RotationalSpringDamper("torsion", stiffness=k, body_i=None, body_j=0)
    mech = spatial.spatial_mechanism(
        [spatial.Body("disc", 1.0, (0.2, 0.25, J))], [joint], elements=[spring]
    ).with_structure(spatial.pose((0.0, 0.0, 0.0), np.eye(3)))
    phi0 = 0.3
    c, s = np.cos(phi0), np.sin(phi0)
    q0 = spatial.pose((0.0, 0.0, 0.0), np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]]))
    ts = np.linspace(0.0, 2.0, 41)
    sol = jaxmbs.simulate(mech, q0, np.zeros(7), (0.0, 2.0), saveat=ts, rtol=TOL, atol=TOL)
    angle = np.asarray(jaxmbs.element_forces(mech, sol)["torsion"]) / k
    np.testing.assert_allclose(angle, phi0 * np.cos(np.sqrt(k / J) * ts), atol=1e-8)
    energy = np.asarray(sol.energy)
    assert np.max(np.abs(energy - energy[0])) < 1e-9 * energy[0]


def test_one_sided_law_is_open_below_the_clearance_and_a_spring_above():
    law = forces.one_sided(stiffness=1e4, clearance=0.01, damping=50.0, sharpness=1e-6)
    p = {}
    assert abs(float(law(jnp.asarray(0.0), jnp.asarray(1.0), p))) < 1e-6
    closed = float(law(jnp.asarray(0.02), jnp.asarray(0.5), p))
    assert abs(closed - (1e4 * 0.01 + 50.0 * 0.5)) < 1e-3
    slope = jax.grad(lambda d: law(d, jnp.asarray(0.0), p))
    assert abs(float(slope(jnp.asarray(0.02))) - 1e4) < 1e-2
    assert float(slope(jnp.asarray(0.0))) < 1e-2


def test_invalid_elements_are_refused_before_tracing():
    spring = forces.SpringDamper("s", stiffness=1.0, body_i=None, point_i=(0.0, 0.0), body_j=3)
    with pytest.raises(ValueError, match="refers to body 3"):
        planar.planar_mechanism([planar.Body("b", 1.0, 1.0)], [], elements=[spring])
    with pytest.raises(ValueError, match="unique"):
        planar.planar_mechanism([planar.Body("b", 1.0, 1.0)], [], elements=[spring, spring])


def test_bushing_stiffness_recovered_from_a_static_load():
    """A body held only by a bushing (full, symmetric 6 × 6 K with couplings) under gravity:
    at the equilibrium the bushing carries the weight and no moment: f = K δ = (W, 0) with
    W = (0, 0, −m g) (f pulls δ back: the force on the body is −f, upward), so
    δ = K⁻¹ (W, 0) — the stiffness read back from the static load."""
    rng = np.random.default_rng(7)
    B = rng.normal(size=(6, 6))
    K = B @ B.T + 6.0 * np.diag([2e4, 2e4, 5e4, 300.0, 300.0, 200.0]) / 1e2
    mass = 3.0
    bushing = forces.Bushing("mount", stiffness=K, damping=np.eye(6), body_j=0)
    mech = spatial.spatial_mechanism(
        [spatial.Body("block", mass, (0.02, 0.03, 0.04))], [], elements=[bushing]
    ).with_structure(spatial.pose((0.0, 0.0, 0.0), np.eye(3)))
    q = jaxmbs.equilibrium(mech, spatial.pose((0.0, 0.0, 0.0), np.eye(3)))
    load = np.array([0.0, 0.0, -9.81 * mass, 0.0, 0.0, 0.0])
    delta = np.asarray(bushing.deformation(mech.elements.kit, q, {}))
    np.testing.assert_allclose(delta, np.linalg.solve(K, load), rtol=1e-9, atol=1e-14)
    assert np.max(np.abs(delta[3:])) > 1e-6  # the couplings turn it: the moment rows are real
    recovered = np.asarray(jaxmbs.element_forces(mech, _rest(mech, q))["mount"])[0]
    np.testing.assert_allclose(recovered, load, rtol=1e-9, atol=1e-9)


def _rest(mech, q):
    """A one-output 'solution' at rest at q, for reading element forces back."""
    return jaxmbs.simulate(mech, q, np.zeros(mech.n), (0.0, 1e-3), saveat=jnp.array([0.0]))


def motor_disc(J: float, tau0: float, tau1: float) -> jaxmbs.Mechanism:
    """A disc of inertia J on a revolute, driven by a motor u(t) = τ₀ + τ₁ t, no spring."""
    motor = forces.RotationalSpringDamper(
        "motor", body_i=None, body_j=0, actuator=lambda t, q, qd, p: tau0 + tau1 * t
    )
    return planar.planar_mechanism(
        [planar.Body("disc", 1.0, J)], [planar.Revolute("axle", 0, (0.0, 0.0))], elements=[motor]
    ).with_structure(np.zeros(3))


#: The motor disc's inertia and its torque u(t) = τ₀ + τ₁ t.
MOTOR = (0.5, 2.0, -0.6)


@pytest.fixture(scope="module")
def motor_run():
    """The motor disc (`MOTOR`) from rest over 2 s at 21 outputs, built and run once."""
    mech = motor_disc(*MOTOR)
    ts = np.linspace(0.0, 2.0, 21)
    sol = jaxmbs.simulate(mech, np.zeros(3), np.zeros(3), (0.0, 2.0), saveat=ts, rtol=TOL, atol=TOL)
    return mech, ts, sol


def test_motor_torque_across_a_joint(motor_run):
    """A disc on a revolute with a motor u(t) = τ₀ + τ₁ t and no spring: J φ̈ = u, so
    φ(t) = (τ₀ t²/2 + τ₁ t³/6) / J, and the energy grows by the motor's work ∫ u φ̇ dt."""
    J, tau0, tau1 = MOTOR
    mech, ts, sol = motor_run
    np.testing.assert_allclose(sol.q[:, 2], (tau0 * ts**2 / 2 + tau1 * ts**3 / 6) / J, atol=1e-9)
    rate = (tau0 * ts + tau1 * ts**2 / 2) / J
    np.testing.assert_allclose(
        jaxmbs.element_power(mech, sol), (tau0 + tau1 * ts) * rate, atol=1e-8
    )
    np.testing.assert_allclose(sol.energy - sol.energy[0], 0.5 * J * rate**2, atol=1e-8)


def test_road_profile_as_a_driving_constraint():
    """A wheel on a vertical rail follows a sampled road z(x) passed at speed v: its height is
    the spline's value, C² between the samples, and the rail force is m (z̈ + g)."""
    x = np.linspace(0.0, 10.0, 41)
    z = 0.05 * np.sin(0.8 * x) + 0.02 * np.exp(-((x - 5.0) ** 2))
    road = jaxmbs.Profile(x, z)
    np.testing.assert_allclose(np.asarray(road(x)), z, atol=1e-15)
    curvature = jax.vmap(jax.grad(jax.grad(road)))
    knots = x[5:-5]
    np.testing.assert_allclose(curvature(knots - 1e-9), curvature(knots + 1e-9), atol=1e-6)
    assert abs(float(road(-3.0)) - z[0]) < 1e-15 and abs(float(road(13.0)) - z[-1]) < 1e-15

    speed, mass = 2.0, 4.0
    rail = planar.Translational("rail", None, (0.0, 0.0), (0.0, 1.0), 0)
    drive = planar.Driving("road", 1, road.along("v", start=1.0))
    mech = planar.planar_mechanism(
        [planar.Body("wheel", mass, 0.1)], [rail, drive], {"v": speed}
    ).with_structure(np.array([0.0, float(road(1.0)), 0.0]))
    q0 = np.array([0.0, float(road(1.0)), 0.0])
    qd0 = np.array([0.0, speed * float(jax.grad(road)(1.0)), 0.0])
    ts = np.linspace(0.0, 3.0, 61)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 3.0), saveat=ts, rtol=TOL, atol=TOL)
    s = 1.0 + speed * ts
    np.testing.assert_allclose(sol.q[:, 1], np.asarray(road(s)), atol=1e-12)
    zdd = speed**2 * np.asarray(curvature(s))
    np.testing.assert_allclose(sol.qdd[:, 1], zdd, atol=1e-9)
    assert np.max(np.abs(zdd)) > 0.1  # the road moves the wheel


def test_energy_balance_over_ten_seconds():
    """A rod on a torsional spring-damper under gravity, 10 s at tolerance 1e-10: kinetic +
    potential (gravity and spring) + dissipated work stays constant to 1e-8 of the energy."""
    from scipy.integrate import cumulative_simpson

    mech = rotational_pendulum(20.0, 0.15, 0.4)
    ts = np.linspace(0.0, 10.0, 8001)
    q0 = pendulum_state(1.2)
    sol = jaxmbs.simulate(
        mech, q0, np.zeros(3), (0.0, 10.0), saveat=ts, rtol=1e-10, atol=1e-10, max_steps=10**6
    )
    work = cumulative_simpson(np.asarray(jaxmbs.element_power(mech, sol)), x=ts, initial=0)
    energy = np.asarray(sol.energy)
    assert -work[-1] > 0.1 * abs(energy[0] - energy.min())  # the damper took a real share
    balance = np.max(np.abs(energy - energy[0] - work)) / abs(energy[0])
    assert balance < 1e-8, balance


def test_point_force_and_torque_of_time_on_a_free_planar_body():
    """A free disc (no joints, no gravity) pushed at its centre by F(t) = (F₀ sin ωt, 0) and
    twisted by τ(t) = τ₀ t: m ẍ = F₀ sin ωt, J φ̈ = τ₀ t from rest, so
    x = F₀ (t − sin(ωt)/ω) / (m ω), φ = τ₀ t³ / (6 J); the loads read back as given."""
    m, J, F0, w, tau0 = 2.0, 0.5, 3.0, 4.0, 0.7
    push = forces.PointForce(
        "push", 0, lambda t, q, qd, p: jnp.stack([F0 * jnp.sin(w * t), 0.0 * t])
    )
    twist = forces.BodyTorque("twist", 0, lambda t, q, qd, p: tau0 * t)
    mech = planar.planar_mechanism(
        [planar.Body("disc", m, J)], [], gravity=(0.0, 0.0), elements=[push, twist]
    ).with_structure(np.zeros(3))
    ts = np.linspace(0.0, 2.0, 21)
    sol = jaxmbs.simulate(mech, np.zeros(3), np.zeros(3), (0.0, 2.0), saveat=ts, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(sol.q[:, 0], F0 * (ts - np.sin(w * ts) / w) / (m * w), atol=1e-9)
    np.testing.assert_allclose(sol.q[:, 1], 0.0, atol=1e-12)
    np.testing.assert_allclose(sol.q[:, 2], tau0 * ts**3 / (6 * J), atol=1e-9)
    loads = jaxmbs.element_forces(mech, sol)
    np.testing.assert_allclose(loads["push"][:, 0], F0 * np.sin(w * ts), atol=1e-12)
    np.testing.assert_allclose(loads["twist"], tau0 * ts, atol=1e-12)


@pytest.mark.parametrize("local", [True, False])
def test_point_force_at_a_lever_on_a_pinned_body(local):
    """A disc pinned at its centre, pushed by F = (0, F) at the body point (ρ, 0), no gravity.
    In the body's frame (a follower force) the torque is ρF: φ = ρF t² / (2J). In the global
    frame it is ρF cos φ, a potential force: ½ J φ̇² = ρF sin φ (the work F Δy_P), and the
    load's power is F ẏ_P = ρF cos φ φ̇."""
    J, F, rho = 0.5, 2.0, 0.3
    push = forces.PointForce(
        "push", 0, lambda t, q, qd, p: jnp.array([0.0, F]), local=local, point=(rho, 0.0)
    )
    mech = planar.planar_mechanism(
        [planar.Body("disc", 1.0, J)], [planar.Revolute("pin", 0, (0.0, 0.0))],
        gravity=(0.0, 0.0), elements=[push],
    ).with_structure(np.zeros(3))  # fmt: skip
    ts = np.linspace(0.0, 1.5, 16)
    sol = jaxmbs.simulate(mech, np.zeros(3), np.zeros(3), (0.0, 1.5), saveat=ts, rtol=TOL, atol=TOL)
    phi, rate = np.asarray(sol.q[:, 2]), np.asarray(sol.qd[:, 2])
    if local:
        np.testing.assert_allclose(phi, rho * F * ts**2 / (2 * J), atol=1e-9)
        np.testing.assert_allclose(jaxmbs.element_power(mech, sol), rho * F * rate, atol=1e-9)
    else:
        assert phi[-1] > 0.5  # far from the small-angle range
        np.testing.assert_allclose(0.5 * J * rate**2, rho * F * np.sin(phi), atol=1e-9)
        power = rho * F * np.cos(phi) * rate
        np.testing.assert_allclose(jaxmbs.element_power(mech, sol), power, atol=1e-9)
    np.testing.assert_allclose(sol.energy - sol.energy[0], 0.5 * J * rate**2, atol=1e-9)


def test_spatial_point_force_and_body_torque():
    """A free Euler-parameter body (no gravity), tilted by 0.4 rad about x, lifted by a
    global force (0, 0, F) at its centre and spun by a body-frame torque (0, 0, τ) about its
    principal axis 3: z = F t² / (2m), and the orientation A(t) = A₀ R_z(τ t² / (2 J₃))
    (no precession about a principal axis)."""
    m, (J1, J2, J3), F, tau = 2.0, (0.2, 0.3, 0.4), 5.0, 0.8
    lift = forces.PointForce("lift", 0, lambda t, q, qd, p: jnp.array([0.0, 0.0, F]),
                             point=(0.0, 0.0, 0.0))  # fmt: skip
    spin = forces.BodyTorque("spin", 0, lambda t, q, qd, p: jnp.array([0.0, 0.0, tau]), local=True)
    mech = spatial.spatial_mechanism(
        [spatial.Body("box", m, (J1, J2, J3))], [], gravity=(0.0, 0.0, 0.0), elements=[lift, spin]
    ).with_structure(spatial.pose((0.0, 0.0, 0.0), np.eye(3)))

    def rot(axis, a):
        c, s = np.cos(a), np.sin(a)
        i, j = [(1, 2), (2, 0), (0, 1)][axis]
        R = np.eye(3)
        R[i, i], R[i, j], R[j, i], R[j, j] = c, -s, s, c
        return R

    A0 = rot(0, 0.4)
    ts = np.linspace(0.0, 1.0, 11)
    q0 = spatial.pose((0.0, 0.0, 0.0), A0)
    sol = jaxmbs.simulate(mech, q0, np.zeros(7), (0.0, 1.0), saveat=ts, rtol=TOL, atol=TOL)
    np.testing.assert_allclose(sol.q[:, 2], F * ts**2 / (2 * m), atol=1e-9)
    layout = spatial.Layout.from_mechanism(mech)
    for t, q in zip(ts, np.asarray(sol.q), strict=True):
        A = np.asarray(layout.rotations(q))[0]
        np.testing.assert_allclose(A, A0 @ rot(2, tau * t**2 / (2 * J3)), atol=1e-9)
    loads = jaxmbs.element_forces(mech, sol)
    np.testing.assert_allclose(loads["spin"][-1], A @ np.array([0.0, 0.0, tau]), atol=1e-12)


def split_oscillator(damping: float):
    """The slider of `slider` (m ẍ + c ẋ + k (x − 1) = 0, k = 50, m = 2), its spring and
    damper as two elements; c is the parameter "c"."""
    spring = forces.SpringDamper("spring", stiffness=50.0, free_length=1.0, body_j=0)
    damper = forces.SpringDamper("damper", damping="c", body_j=0)
    rail = planar.Translational("rail", None, (0.0, 0.0), (1.0, 0.0), 0)
    return planar.planar_mechanism(
        [planar.Body("mass", 2.0, 0.1)], [rail], {"c": damping}, gravity=(0.0, 0.0),
        elements=[spring, damper],
    ).with_structure(np.array([1.0, 0.0, 0.0]))  # fmt: skip


def oscillate(mech, per_period: int, periods: int = 3, params=None):
    ts = np.linspace(0.0, periods * 2 * np.pi / 5.0, periods * per_period + 1)
    x0 = np.array([1.3, 0.0, 0.0])
    sol = jaxmbs.simulate(
        mech, x0, np.zeros(3), (0.0, ts[-1]), saveat=ts, params=params, rtol=1e-12, atol=1e-12
    )
    assert sol.successful
    return sol


@pytest.fixture(scope="module")
def two_elements():
    """The damped oscillator (ζ = 0.04) with its spring and damper as two elements, built
    once: the undamped run passes c = 0 and reuses the compiled solve."""
    return split_oscillator(0.8)


@pytest.fixture(scope="module")
def damped(two_elements):
    """The damped oscillator (ζ = 0.04, spring and damper as two elements) at 20 and at 40
    outputs per period."""
    mech = two_elements
    return mech, {per_period: oscillate(mech, per_period) for per_period in (20, 40)}


def test_spring_work_is_minus_its_potential_change_and_the_kinetic_energy_gained(two_elements):
    """An undamped oscillator (c = 0, 20 outputs per period): the spring's work is
    −ΔV = −½k((x − 1)² − (x₀ − 1)²), and as the only force doing work it is the kinetic
    energy gained (work–energy theorem)."""
    mech, undamped = two_elements, {"c": 0.0}
    sol = oscillate(mech, per_period=20, params=undamped)
    work = jaxmbs.element_work(mech, sol, undamped)
    x, v = np.asarray(sol.q[:, 0]), np.asarray(sol.qd[:, 0])
    V = 0.5 * 50.0 * (x - 1.0) ** 2
    np.testing.assert_allclose(work["spring"], -(V - V[0]), rtol=0, atol=1e-12)
    np.testing.assert_allclose(work["spring"], 0.5 * 2.0 * (v**2 - v[0] ** 2), atol=1e-10)
    np.testing.assert_allclose(work["damper"], 0.0, atol=1e-15)  # c = 0: no work


def test_damper_work_closes_the_energy_balance_to_fourth_order(damped):
    """E(t) − E(0) = W_damper (ζ = 0.04). At 20 outputs per period the Hermite rule is within
    5e-5 of the energy, where the trapezoidal rule on the outputs' power is 1.2e-3 off; each
    halving of the spacing divides its error by ≈ 16 (fourth order)."""
    mech, runs = damped
    errors = []
    for per_period in (20, 40):
        sol = runs[per_period]
        energy = np.asarray(sol.energy)
        work = np.asarray(jaxmbs.element_work(mech, sol)["damper"])
        errors.append(np.max(np.abs(energy - energy[0] - work)) / energy[0])
        if per_period == 20:
            power, ts = np.asarray(jaxmbs.element_power(mech, sol)), np.asarray(sol.ts)
            trapezoid = np.concatenate([[0.0], np.cumsum(np.diff(ts) * (power[1:] + power[:-1]))])
            trapezoid_error = np.max(np.abs(energy - energy[0] - trapezoid / 2)) / energy[0]
            assert -work[-1] > 0.5 * energy[0]  # the damper took most of the energy
    assert errors[0] < 5e-5 < trapezoid_error, (errors[0], trapezoid_error)
    assert errors[0] / errors[1] > 12, errors


def test_energy_rate_is_the_damper_s_power(damped):
    """`jaxmbs.energy_rate` of the damped oscillator, m ẍ + c ẋ + k (x − 1) = 0, is
    d(½ m ẋ² + ½ k (x − 1)²)/dt = −c ẋ², with ẋ read from the solution, at every output
    (the spring's power k (x − 1) ẋ, exchanged with the kinetic energy, cancels)."""
    mech, runs = damped
    sol = runs[20]
    x, v = np.asarray(sol.q[:, 0]), np.asarray(sol.qd[:, 0])
    rate = np.asarray(jaxmbs.energy_rate(mech, sol))
    exchanged = 50.0 * np.abs((x - 1.0) * v)
    assert np.max(0.8 * v**2) > 1.0 and np.max(exchanged) > 10.0
    np.testing.assert_allclose(rate, -0.8 * v**2, rtol=0, atol=1e-13 * np.max(exchanged))


def test_nonconservative_work_of_one_spring_damper_element(damped, sliders):
    """One element with k and c: its total work is −ΔV plus its non-conservative work, and
    that part alone is the change of the total energy."""
    two, runs = damped
    parts = jaxmbs.element_work(two, runs[40])
    one, params = sliders[2], {"k": 50.0, "c": 0.8}
    sol = oscillate(one, per_period=40, params=params)
    total = jaxmbs.element_work(one, sol, params)["spring"]
    lost = jaxmbs.element_work(one, sol, params, nonconservative=True)["spring"]
    np.testing.assert_allclose(total, parts["spring"] + parts["damper"], atol=1e-9)
    np.testing.assert_allclose(lost, parts["damper"], atol=1e-9)
    energy = np.asarray(sol.energy)
    np.testing.assert_allclose(energy - energy[0], lost, atol=1e-6 * energy[0])


def test_motor_work_includes_its_explicit_time_dependence(motor_run):
    """The motor of `test_motor_torque_across_a_joint` (its run): its power u φ̇ is a cubic in
    t, so the Hermite rule on the 21 outputs is exact, W = ½ J φ̇² (the trapezoidal rule is
    8.4e-3 off; without u's explicit time dependence in Ṗ the rule would be 2.8e-3 off)."""
    J = MOTOR[0]
    mech, _, sol = motor_run
    work = jaxmbs.element_work(mech, sol)["motor"]
    np.testing.assert_allclose(work, 0.5 * J * np.asarray(sol.qd[:, 2]) ** 2, atol=1e-10)


class _Hardening(forces.AbstractForceElement):
    """A user's element: a hardening spring from the origin to the slider's body,
    V = ¼ k (x − 1)⁴ with x the body's distance from the origin, f = k (x − 1)³; with a
    damper c on ẋ as its non-conservative part."""

    name = "hardening"
    bodies = (0,)

    def check(self, params, dimension, n):
        if "k3" not in params:
            raise ValueError("hardening: 'k3' is missing")

    def _x(self, kit, q):
        return jnp.linalg.norm(kit.point(q, 0, jnp.zeros(2)))

    def force(self, kit, t, q, qd, p):
        return p["k3"] * (self._x(kit, q) - 1.0) ** 3

    def potential(self, kit, q, p):
        return 0.25 * p["k3"] * (self._x(kit, q) - 1.0) ** 4

    def nonconservative_force(self, kit, t, q, qd, p):
        x, pullback = jax.vjp(lambda q_: self._x(kit, q_), q)
        xdot = jax.jvp(lambda q_: self._x(kit, q_), (q,), (qd,))[1]
        return -pullback(p["c3"] * xdot)[0]

    def power(self, kit, t, q, qd, p):
        return -p["c3"] * jax.jvp(lambda q_: self._x(kit, q_), (q,), (qd,))[1] ** 2


def test_a_users_element_subclassing_the_abstract_base():
    """An element written by subclassing `forces.AbstractForceElement` enters the builder's
    sums: m ẍ = −k (x − 1)³ − c ẋ on the slider, its V in the energy, its power the
    damper's; its `check` runs before anything is traced; a subclass that leaves a method
    out cannot be made."""
    params = {"k3": 400.0, "c3": 0.3}
    joint = planar.Translational("rail", None, (0.0, 0.0), (1.0, 0.0), 0)
    mech = planar.planar_mechanism(
        [planar.Body("mass", 2.0, 0.1)], [joint], params, gravity=(0.0, 0.0),
        elements=[_Hardening()],
    ).with_structure(np.array([1.0, 0.0, 0.0]))  # fmt: skip
    q, qd = jnp.array([1.2, 0.0, 0.0]), jnp.array([0.5, 0.0, 0.0])
    qdd = np.asarray(jaxmbs.accelerations(mech, q, qd, 0.0))
    expected = (-400.0 * 0.2**3 - 0.3 * 0.5) / 2.0  # −3.275
    assert abs(qdd[0] - expected) < 1e-12 * abs(expected)
    energy = float(mech.energy(q, qd))
    assert abs(energy - (0.5 * 2.0 * 0.25 + 0.25 * 400.0 * 0.2**4)) < 1e-12
    with pytest.raises(ValueError, match="'k3' is missing"):
        planar.planar_mechanism(
            [planar.Body("mass", 2.0, 0.1)], [joint], {}, gravity=(0.0, 0.0),
            elements=[_Hardening()],
        )  # fmt: skip

    class Unfinished(forces.AbstractForceElement):
        name = "unfinished"
        bodies = (0,)

    with pytest.raises(TypeError, match="abstract"):
        Unfinished()


def test_generalized_force_in_one_pass_is_the_spring_gradient_plus_the_rest():
    """Each element's `generalized_force` (one linearisation of δ: −(∂δ/∂q)ᵀ f) against the
    two passes it replaces in the builders, −∂V/∂q + Q_nc, at a random state of two free
    Euler-parameter bodies: a spring-damper with an actuator, an axial and a torsional
    spring-damper, a bushing with coupled K and C, a one-sided law. Agreement to 1e-13 of
    the force's scale; the spring's share has the restoring sign (V falls along −Q)."""
    rng = np.random.default_rng(11)
    B = rng.normal(size=(6, 6))
    law = forces.one_sided(stiffness=1e3, clearance=0.01, damping=5.0, sharpness=1e-6)
    elements = [
        forces.SpringDamper(
            "strut", stiffness=40.0, damping=3.0, free_length=0.4, body_i=0,
            point_i=(0.1, 0.0, 0.2), body_j=1, point_j=(0.0, -0.1, 0.0),
            actuator=lambda t, q, qd, p: 2.0 * jnp.sin(t) + 0.1 * qd[0],
        ),
        forces.AxialSpringDamper(
            "axial", stiffness=25.0, damping=0.7, free_offset=0.05, body_i=None,
            axis_i=(0.0, 0.6, 0.8), body_j=1, point_j=(0.1, 0.1, 0.0),
        ),
        forces.RotationalSpringDamper(
            "torsion", stiffness=6.0, damping=0.4, free_angle=0.3, body_i=0, body_j=1,
            axis_i=(0.0, 0.0, 1.0),
        ),
        forces.Bushing("mount", stiffness=B @ B.T + 10 * np.eye(6), damping=np.eye(6) + 0.1 * B,
                       body_i=None, body_j=0, point_j=(0.0, 0.1, 0.0)),
        forces.SpringDamper(
            "stop", law=law, body_i=None, point_i=(0.0, 0.0, 0.0), body_j=1,
            point_j=(0.0, 0.0, 0.0), free_length=0.0,
        ),
    ]  # fmt: skip
    bodies = [spatial.Body("a", 1.0, (0.1, 0.2, 0.3)), spatial.Body("b", 2.0, (0.3, 0.2, 0.1))]
    mech = spatial.spatial_mechanism(bodies, [], elements=elements)
    kit = mech.elements.kit
    q = rng.normal(size=14)
    for start in (3, 10):  # unit Euler parameters
        q[start : start + 4] /= np.linalg.norm(q[start : start + 4])
    q, qd, t = jnp.asarray(q), jnp.asarray(rng.normal(size=14)), 0.7
    for e in elements:
        one_pass = np.asarray(jax.jit(e.generalized_force, static_argnums=0)(kit, t, q, qd, {}))
        spring = jax.grad(lambda q_, e=e: e.potential(kit, q_, {}))(q)
        two_passes = np.asarray(e.nonconservative_force(kit, t, q, qd, {}) - spring)
        scale = np.max(np.abs(two_passes))
        assert scale > 1e-2, e.name  # the element acts at this state
        assert np.max(np.abs(one_pass - two_passes)) <= 1e-13 * scale, e.name
    # the whole set, as the builder adds it to Q
    total = sum(np.asarray(e.generalized_force(kit, t, q, qd, {})) for e in elements)
    np.testing.assert_allclose(
        np.asarray(mech.elements.generalized_force(t, q, qd, {})), total, rtol=0, atol=1e-12
    )
    # a pure spring's Q points down its potential: V(q + s Q) < V(q) for a small step s
    spring = elements[2]
    Q = spring.generalized_force(kit, t, q, jnp.zeros_like(qd), {})
    assert float(spring.potential(kit, q + 1e-4 * Q, {})) < float(spring.potential(kit, q, {}))


class _Tether(forces.AbstractForceElement):
    """A user's element with the default carrier (g = q, c = its generalized force): a
    hardening tether from the origin to body 0's centre, V = ¼ k (|r₀| − ½)⁴, and a damper
    c on d|r₀|/dt."""

    name = "tether"
    bodies = (0,)

    def check(self, params, dimension, n):
        pass

    def _x(self, kit, q):
        return jnp.linalg.norm(kit.point(q, 0, jnp.zeros(3)))

    def force(self, kit, t, q, qd, p):
        return 30.0 * (self._x(kit, q) - 0.5) ** 3

    def potential(self, kit, q, p):
        return 7.5 * (self._x(kit, q) - 0.5) ** 4

    def nonconservative_force(self, kit, t, q, qd, p):
        xdot, pullback = jax.vjp(
            lambda qd_: jax.jvp(lambda q_: self._x(kit, q_), (q,), (qd_,))[1], qd
        )
        return -pullback(0.8 * xdot)[0]

    def power(self, kit, t, q, qd, p):
        return -0.8 * jax.jvp(lambda q_: self._x(kit, q_), (q,), (qd,))[1] ** 2


def test_the_set_pulls_every_carrier_back_at_once_as_each_element_alone():
    """`ElementSet.generalized_force` (every element's carrier g(q) linearised at once over
    frames evaluated once, Q = Σ (∂g/∂q)ᵀ c) against the sum of each element's own
    `generalized_force`, at a random state of an Euler-parameter and a ZXZ body: point
    forces and body torques in the global and the body frame (carriers: the point, the
    rotation matrix), a spring-damper, a torsional spring on the ground, and a user's
    element on the default carrier (g = q). Agreement to 1e-13 of the force's scale (the
    torques' cotangent (∂ω/∂Ȧ)ᵀ τ of the wrong sign: 11 of 106). In the plane the same
    for a point force and a torque (a 2 × 2 carrier, scalar ω). A kit bound to q
    (`BodyKinematics.at`) evaluates anew at another q."""
    rng = np.random.default_rng(5)
    elements = [
        forces.PointForce("push", 0, load=lambda t, q, qd, p: jnp.array([1.0, -2.0, 0.5]) * t,
                          point=(0.1, 0.2, -0.1)),
        forces.PointForce("thrust", 1, load=(0.0, 3.0, 1.0), point=(0.0, 0.0, 0.3), local=True),
        forces.BodyTorque("twist", 0, load=lambda t, q, qd, p: jnp.array([0.4, 0.1, -0.7]) + qd[3]),
        forces.BodyTorque("spin", 1, load=(0.2, -0.5, 0.9), local=True),
        forces.SpringDamper("strut", stiffness=40.0, damping=3.0, free_length=0.4, body_i=0,
                            point_i=(0.1, 0.0, 0.2), body_j=1, point_j=(0.0, -0.1, 0.0)),
        forces.RotationalSpringDamper("hinge", stiffness=6.0, damping=0.4, free_angle=0.3,
                                      body_i=None, body_j=1, axis_i=(0.0, 0.6, 0.8)),
        _Tether(),
    ]  # fmt: skip
    bodies = [
        spatial.Body("a", 1.0, (0.1, 0.2, 0.3)),
        spatial.Body("b", 2.0, (0.3, 0.2, 0.1), orientation="zxz"),
    ]
    mech = spatial.spatial_mechanism(bodies, [], elements=elements)
    kit = mech.elements.kit
    q = rng.normal(size=13)
    q[3:7] /= np.linalg.norm(q[3:7])
    q[11] = 1.0  # θ away from the gimbal lock
    q, qd, t = jnp.asarray(q), jnp.asarray(rng.normal(size=13)), 0.7
    each = [np.asarray(e.generalized_force(kit, t, q, qd, {})) for e in elements]
    for e, Q in zip(elements, each, strict=True):
        assert np.max(np.abs(Q)) > 1e-2, e.name  # every element acts at this state
    total = sum(each)
    at_once = np.asarray(jax.jit(mech.elements.generalized_force)(t, q, qd, {}))
    scale = np.max(np.abs(total))
    assert np.max(np.abs(at_once - total)) <= 1e-13 * scale
    # a kit bound to q reads its frames at q only
    other = q + 0.1
    bound = kit.at(q)
    for body in (0, 1):
        np.testing.assert_allclose(
            bound.point(q, body, jnp.ones(3)), kit.point(q, body, jnp.ones(3)), rtol=0, atol=1e-15
        )
        np.testing.assert_allclose(
            bound.rotation(other, body), kit.rotation(other, body), rtol=0, atol=1e-15
        )
    assert np.max(np.abs(kit.rotation(other, 1) - kit.rotation(q, 1))) > 1e-2
    # in the plane: a point force in the body frame and a torque (ω = W₂₁ of a 2 × 2 A)
    loads = [
        forces.PointForce("lever", 0, load=(2.0, -1.0), point=(0.3, 0.1), local=True),
        forces.BodyTorque("motor", 0, load=lambda t, q, qd, p: 1.5 - 0.2 * qd[2]),
    ]
    plane = planar.planar_mechanism([planar.Body("bar", 1.0, 0.1)], [], elements=loads)
    q, qd = jnp.array([0.2, -0.1, 0.8]), jnp.array([0.3, 0.5, -1.2])
    total = sum(np.asarray(e.generalized_force(plane.elements.kit, t, q, qd, {})) for e in loads)
    at_once = np.asarray(plane.elements.generalized_force(t, q, qd, {}))
    assert abs(total[2]) > 1.0
    np.testing.assert_allclose(at_once, total, rtol=0, atol=1e-13 * np.max(np.abs(total)))
