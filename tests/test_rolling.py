"""Rolling joints for spatial bodies (issue 42, item 1): a sphere on an inclined plane, a thin
disc rolling upright, the contact geometry of the disc and the torus, bad input.

Independent references:

- a solid sphere (J = 2/5 m r²) released on a plane inclined at α rolls with the constant
  acceleration a = g sin α / (1 + J/(m r²)) = 5/7 g sin α (energy: ½ m v² + ½ J ω² with
  ω = v / r);
- a disc (mass m, radius r, axial moment C, diametral moment A) rolling upright at spin Ω
  (speed v = Ω r) with lean θ and heading ψ, linearised: the yaw equation A ψ̈ = C Ω θ̇
  integrates to A ψ̇ = C Ω θ (started straight), and the lean equation
  (A + m r²) θ̈ = m g r θ − (C + m r²) Ω ψ̇ then reads

      θ̈ + ω_n² θ = 0,   ω_n² = [C (C + m r²) Ω² / A − m g r] / (A + m r²),

  so upright rolling is stable for Ω² > Ω_c² = m g r A / (C (C + m r²)) (Neimark and
  Fufaev, Dynamics of Nonholonomic Systems, 1972, ch. III §1; O'Reilly, Nonlinear Dynamics
  10, 1996, eq 37). For the thin uniform disc, C = m r²/2, A = m r²/4: Ω_c² = g / (3 r)
  (v² > g r / 3) and ω_n² = 4/5 (3 Ω² − g / r); for a hoop (A = m r²/2, C = m r²) the same
  formula gives the classic v² > g r / 4. Above Ω_c, θ(t) = θ̇₀ sin(ω_n t) / ω_n; below,
  θ(t) = θ̇₀ sinh(σ t) / σ with σ² = −ω_n².
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import jaxmbs
from jaxmbs.model.joints import orientation, rolling, spatial

G = 9.81
TOL = 1e-12


def rates(kind: str, q_orientation, omega_global, rotation) -> np.ndarray:
    """Orientation rates giving the global angular velocity ω: ė = ½ Gᵀ ω' (unit e) or the
    solve of ω'(θ, θ̇) = ω' for ZXZ angles, with ω' = Aᵀ ω."""
    omega_body = np.asarray(rotation).T @ omega_global
    angles = jnp.asarray(q_orientation)
    if kind == spatial.EULER_PARAMETERS:
        return 0.5 * np.asarray(orientation.body_rate_matrix(angles)).T @ omega_body
    jac = jax.jacfwd(spatial.body_angular_velocity, argnums=1)(angles, jnp.zeros(3))
    return np.linalg.solve(np.asarray(jac), omega_body)


def contact_slip(layout, joint_offset, qs, qds) -> np.ndarray:
    """max |v_c + ω × d| over the samples: the contact point's velocity, all three
    components, from ω = A ω' (`Layout.body_angular_velocities`), not from the joint's jvp."""
    worst = 0.0
    for q, qd in zip(np.asarray(qs), np.asarray(qds), strict=True):
        A = np.asarray(layout.rotations(jnp.asarray(q)))[0]
        omega = A @ np.asarray(layout.body_angular_velocities(jnp.asarray(q), jnp.asarray(qd)))[0]
        v = qd[:3] + np.cross(omega, joint_offset(q, A))
        worst = max(worst, float(np.max(np.abs(v))))
    return worst


# --- a solid sphere on an inclined plane ----------------------------------------------------

ALPHA, R_SPHERE, M_SPHERE = 0.3, 0.1, 2.0
NORMAL = np.array([np.sin(ALPHA), 0.0, np.cos(ALPHA)])
DOWNHILL = np.array([np.cos(ALPHA), 0.0, -np.sin(ALPHA)])  # in the plane, gᵀs = g sin α
SPHERE_TIMES = np.array([0.25, 0.5, 1.0])


@pytest.fixture(scope="module", params=[spatial.EULER_PARAMETERS, spatial.ZXZ])
def sphere(request):
    """The sphere released at rest on the plane through the origin, in one orientation kind
    (a ZXZ body's z axis along the rolling axis n × s = e_y, so θ stays at π/2)."""
    kind = request.param
    A0 = (
        np.eye(3)
        if kind == spatial.EULER_PARAMETERS
        else np.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]])
    )
    q0 = spatial.pose(R_SPHERE * NORMAL, A0, kind)
    joint = rolling.RollingSphere("ball", 0, radius="r", plane_normal=NORMAL)
    mech = spatial.spatial_mechanism(
        [spatial.Body("ball", M_SPHERE, 0.4 * M_SPHERE * R_SPHERE**2, kind)],
        [joint],
        {"r": jnp.asarray(R_SPHERE)},
        gravity=(0.0, 0.0, -G),
        reference_q=q0,
    )
    qd0 = np.zeros_like(q0)
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, 1.0), saveat=jnp.asarray(SPHERE_TIMES), rtol=TOL, atol=TOL
    )
    return mech, joint, sol


def test_sphere_rolls_down_the_incline_at_five_sevenths_g_sin_alpha(sphere, record_property):
    """s(t) = ½ a t² along the slope with a = 5/7 g sin α to 1e-10; no lateral motion; the
    centre stays r above the plane; the contact point does not slip (ω from the body's
    rates); ω = n × ċ / r."""
    mech, joint, sol = sphere
    assert bool(sol.successful)
    a = 5 / 7 * G * np.sin(ALPHA)
    q, qd = np.asarray(sol.q), np.asarray(sol.qd)
    travelled = (q[:, :3] - R_SPHERE * NORMAL) @ DOWNHILL
    acceleration_error = float(np.max(np.abs(2 * travelled / SPHERE_TIMES**2 - a)))
    layout = spatial.Layout.from_mechanism(mech)
    slip = contact_slip(layout, lambda q, A: -R_SPHERE * NORMAL, q, qd)
    record_property("sphere_acceleration_error", acceleration_error)
    record_property("sphere_slip", slip)
    assert acceleration_error < 1e-10
    assert slip < 1e-10
    assert float(np.max(np.abs(q[:, 1]))) < 1e-12
    assert float(np.max(np.abs(q[:, :3] @ NORMAL - R_SPHERE))) < 1e-12
    for qi, qdi in zip(q, qd, strict=True):
        A = np.asarray(layout.rotations(jnp.asarray(qi)))[0]
        omega = A @ np.asarray(layout.body_angular_velocities(jnp.asarray(qi), jnp.asarray(qdi)))[0]
        assert_close(omega, np.cross(NORMAL, qdi[:3]) / R_SPHERE, 0, 1e-10, "ω = n × v / r")
    point = np.asarray(joint.contact_point(layout, jnp.asarray(q[-1]), mech.params))
    assert_close(point, q[-1, :3] - R_SPHERE * NORMAL, 0, 1e-15, "contact point")
    assert abs(float(point @ NORMAL)) < 1e-12
    # The groups' multipliers give the contact force: N = m g cos α from the plane, and the
    # friction m a_s − m g sin α = −2/7 m g sin α along the slope (it spins the sphere up).
    groups = dict(mech.constraint_groups)
    lam = np.asarray(sol.multipliers)
    force = joint.contact_force(mech.params, lam[:, groups["ball"]], lam[:, groups["ball.no_slip"]])
    assert_close(force["normal_force"], M_SPHERE * G * np.cos(ALPHA), 1e-12, 0, "normal force")
    friction = -2 / 7 * M_SPHERE * G * np.sin(ALPHA) * DOWNHILL
    assert_close(force["friction"], np.broadcast_to(friction, (3, 3)), 0, 1e-10, "friction")
    assert_close(force["force"] @ NORMAL, force["normal_force"], 0, 1e-12, "N along n")


# --- a thin disc rolling upright ------------------------------------------------------------

R_DISC, M_DISC = 0.2, 1.5
A_DISC, C_DISC = M_DISC * R_DISC**2 / 4, M_DISC * R_DISC**2 / 2
#: Upright: the wheel's axis (body z) along −e_y; spin Ω about it rolls the disc along +x.
UPRIGHT = np.array([[1.0, 0, 0], [0, 0, -1], [0, 1, 0]])
CRITICAL = np.sqrt(M_DISC * G * R_DISC * A_DISC / (C_DISC * (C_DISC + M_DISC * R_DISC**2)))
DISC_TOL = 1e-11


def lean_frequency_squared(spin: float) -> float:
    """ω_n² of the linearised lean (module docstring); negative below the critical speed."""
    inertia = A_DISC + M_DISC * R_DISC**2
    return (C_DISC * (C_DISC + M_DISC * R_DISC**2) * spin**2 / A_DISC - M_DISC * G * R_DISC) / (
        inertia
    )


@pytest.fixture(scope="module")
def disc():
    """The disc, Euler parameters, on the horizontal plane z = 0; `run(Ω, θ̇₀, T)` simulates
    it from upright rolling at spin Ω with a lean rate θ̇₀ (one compilation for every run),
    and returns the times, the lean θ = asin(−nᵀa) (the axis a = −e_y turned about e_x)
    and the solution."""
    q0 = spatial.pose([0.0, 0.0, R_DISC], UPRIGHT)
    joint = rolling.RollingDisc("wheel", 0, radius="r", axis=(0.0, 0.0, 1.0))
    mech = spatial.spatial_mechanism(
        [spatial.Body("disc", M_DISC, (A_DISC, A_DISC, C_DISC))],
        [joint],
        {"r": jnp.asarray(R_DISC)},
        gravity=(0.0, 0.0, -G),
        reference_q=q0,
    )
    layout = spatial.Layout.from_mechanism(mech)

    def run(spin: float, lean_rate: float, t_end: float):
        # ω = Ω (−a) + θ̇₀ e_x; no slip at the contact below the centre: v = ω × (r e_z).
        omega = -spin * (UPRIGHT @ [0.0, 0.0, 1.0]) + lean_rate * np.array([1.0, 0.0, 0.0])
        v = np.cross(omega, [0.0, 0.0, R_DISC])
        qd0 = np.concatenate([v, rates(spatial.EULER_PARAMETERS, q0[3:], omega, UPRIGHT)])
        ts = jnp.linspace(0.0, t_end, 301)
        sol = jaxmbs.simulate(mech, q0, qd0, (0.0, t_end), saveat=ts, rtol=DISC_TOL, atol=DISC_TOL)
        assert bool(sol.successful)
        axes = jax.vmap(layout.rotations)(sol.q)[:, 0, :, 2]
        return np.asarray(ts), np.arcsin(-np.asarray(axes[:, 2])), sol

    return mech, joint, layout, run


def energy_drift(sol) -> float:
    energy = np.asarray(sol.energy)
    return float(np.max(np.abs(energy - energy[0])) / abs(energy[0]))


def test_upright_disc_above_the_critical_speed(disc, record_property):
    """At Ω = 2 Ω_c: energy conserved to 1e-9 over 3 s, no slip, and the lean follows the
    linearised θ̇₀ sin(ω_n t)/ω_n to 1e-6 of its amplitude (the rest is of order θ²)."""
    mech, _, layout, run = disc
    spin, lean_rate = 2 * CRITICAL, 1e-4
    ts, lean, sol = run(spin, lean_rate, 3.0)
    frequency = np.sqrt(lean_frequency_squared(spin))
    amplitude = lean_rate / frequency
    deviation = float(np.max(np.abs(lean - amplitude * np.sin(frequency * ts)))) / amplitude
    drift = energy_drift(sol)

    def offset(q, A):  # the lowest rim point below the centre, from the axis a = A e_z
        a = A[:, 2]
        u = np.array([0.0, 0.0, 1.0]) - a[2] * a
        return -R_DISC * u / np.linalg.norm(u)

    slip = contact_slip(layout, offset, sol.q[::30], sol.qd[::30])
    record_property("disc_energy_drift", drift)
    record_property("disc_lean_deviation_from_linear", deviation)
    record_property("disc_slip", slip)
    assert drift < 1e-9
    assert deviation < 1e-6
    assert slip < 1e-10
    # It rolled forward at v = Ω r.
    assert_close(sol.q[-1, 0], spin * R_DISC * ts[-1], 1e-3, 0, "distance rolled")


def test_upright_disc_critical_speed_brackets(disc, record_property):
    """Ω_c² = g / (3 r) for the thin disc. At 1.1 Ω_c the lean oscillates at ω_n (bounded,
    |θ| ≤ θ̇₀/ω_n); at 0.9 Ω_c it grows as θ̇₀ sinh(σ t)/σ (to 1e-4 while |θ| < 5e-3); at
    0.5 Ω_c the disc falls over (beyond 1 rad from θ̇₀ = 1e-3). Energy is conserved to 1e-9
    in every run."""
    assert_close(CRITICAL**2, G / (3 * R_DISC), 1e-15, 0, "Ω_c² of the thin disc")
    _, _, _, run = disc
    lean_rate = 1e-4
    ts, lean, sol = run(1.1 * CRITICAL, lean_rate, 3.0)
    frequency = np.sqrt(lean_frequency_squared(1.1 * CRITICAL))
    predicted = lean_rate / frequency * np.sin(frequency * ts)
    stable_deviation = float(np.max(np.abs(lean - predicted))) / float(np.max(np.abs(predicted)))
    drifts = [energy_drift(sol)]

    ts, lean, sol = run(0.9 * CRITICAL, lean_rate, 3.0)
    growth = np.sqrt(-lean_frequency_squared(0.9 * CRITICAL))
    predicted = lean_rate / growth * np.sinh(growth * ts)
    linear = np.abs(predicted) < 5e-3
    unstable_deviation = float(np.max(np.abs(lean[linear] - predicted[linear])))
    unstable_deviation /= float(np.max(np.abs(predicted[linear])))
    drifts.append(energy_drift(sol))
    assert float(np.max(np.abs(lean))) > 0.05  # 500 × the stable run's amplitude

    _, lean, sol = run(0.5 * CRITICAL, 1e-3, 2.0)
    fallen = float(np.max(np.abs(lean)))
    drifts.append(energy_drift(sol))
    for name, x in (
        ("disc_stable_lean_deviation", stable_deviation),
        ("disc_unstable_lean_deviation", unstable_deviation),
        ("disc_fallen_lean", fallen),
        ("disc_energy_drift_max", max(drifts)),
    ):
        record_property(name, x)
    assert stable_deviation < 1e-6
    assert unstable_deviation < 1e-4
    assert fallen > 1.0
    assert max(drifts) < 1e-9


def test_torus_in_zxz_angles_rolls_down_the_incline(record_property):
    """A tyre (torus: crown radius R, cross-section ρ; axial moment C) in ZXZ angles, upright
    across the slope (axis along e_y, so θ stays π/2), rolls straight down with the
    acceleration of a wheel of radius R + ρ: a = g sin α m (R + ρ)² / (m (R + ρ)² + C),
    to 1e-10, without slipping, its contact point on the plane."""
    R, rho, m, A, C = 0.25, 0.04, 1.2, 0.02, 0.035
    kind = spatial.ZXZ
    q0 = spatial.pose((R + rho) * NORMAL, UPRIGHT, kind)
    joint = rolling.RollingTorus(
        "tyre", 0, radius="R", crown_radius="rho", plane_normal=NORMAL, axis=(0.0, 0.0, 1.0)
    )
    mech = spatial.spatial_mechanism(
        [spatial.Body("wheel", m, (A, A, C), kind)],
        [joint],
        {"R": jnp.asarray(R), "rho": jnp.asarray(rho)},
        gravity=(0.0, 0.0, -G),
        reference_q=q0,
    )
    sol = jaxmbs.simulate(
        mech, q0, np.zeros(6), (0.0, 1.0), saveat=jnp.asarray(SPHERE_TIMES), rtol=TOL, atol=TOL
    )
    assert bool(sol.successful)
    a = G * np.sin(ALPHA) * m * (R + rho) ** 2 / (m * (R + rho) ** 2 + C)
    q, qd = np.asarray(sol.q), np.asarray(sol.qd)
    travelled = (q[:, :3] - (R + rho) * NORMAL) @ DOWNHILL
    acceleration_error = float(np.max(np.abs(2 * travelled / SPHERE_TIMES**2 - a)))
    layout = spatial.Layout.from_mechanism(mech)
    slip = contact_slip(layout, lambda q, A: -(R + rho) * NORMAL, q, qd)
    record_property("torus_acceleration_error", acceleration_error)
    record_property("torus_slip", slip)
    assert acceleration_error < 1e-10
    assert slip < 1e-10
    assert float(np.max(np.abs(q[:, 4] - np.pi / 2))) < 1e-10  # upright: θ = π/2
    point = np.asarray(joint.contact_point(layout, jnp.asarray(q[-1]), mech.params))
    assert abs(float(point @ NORMAL)) < 1e-12


# --- contact geometry, parameters, bad input --------------------------------------------------


def leaned_pose(lean: float, kind: str = spatial.EULER_PARAMETERS) -> tuple[np.ndarray, np.ndarray]:
    """A wheel (axis body z) turned about x from `UPRIGHT` by the lean, centre at (0.1, 0.2,
    0.3), with a spin about its axis; returns (q, A)."""
    c, s = np.cos(lean), np.sin(lean)
    turn = np.array([[1.0, 0, 0], [0, c, -s], [0, s, c]])
    spin = np.array([[np.cos(0.7), -np.sin(0.7), 0], [np.sin(0.7), np.cos(0.7), 0], [0, 0, 1]])
    A = turn @ UPRIGHT @ spin
    return spatial.pose([0.1, 0.2, 0.3], A, kind), A


@pytest.mark.parametrize("crown", [0.0, 0.03])
def test_wheel_contact_geometry(crown):
    """Leaned by θ, a wheel of radius R and crown radius ρ touches the plane z = 0 at
    c − R (sin θ e_y·…) − ρ e_z: height Φ = z_c − R cos θ − ρ, and ∂Φ/∂R = −cos θ (a
    parameter by name). The normal velocity of the material contact point equals Φ̇ (why the
    two tangential rows suffice), checked by a jvp at a random rate."""
    lean = 0.4
    q, A = leaned_pose(lean)
    layout = spatial.Layout(("wheel",), (spatial.EULER_PARAMETERS,))
    params = {"R": jnp.asarray(0.25), "rho": jnp.asarray(crown)}
    if crown:
        joint = rolling.RollingTorus("tyre", 0, radius="R", crown_radius="rho")
    else:
        joint = rolling.RollingDisc("tyre", 0, radius="R")
    frames = layout.frames(jnp.asarray(q))
    assert_close(joint.clearance(frames, params), 0.3 - 0.25 * np.cos(lean) - crown, 0, 1e-15)
    dR = jax.grad(lambda p: joint.clearance(frames, p))(params)["R"]
    assert_close(dR, -np.cos(lean), 0, 1e-15, "∂Φ/∂R")
    # Independently: the rim point lowest in z, by sampling the rim circle finely.
    angles = np.linspace(0, 2 * np.pi, 200001)
    rim = q[:3] + 0.25 * (np.outer(np.cos(angles), A[:, 0]) + np.outer(np.sin(angles), A[:, 1]))
    lowest = rim[np.argmin(rim[:, 2])] - [0.0, 0.0, crown]
    point = np.asarray(joint.contact_point(layout, jnp.asarray(q), params))
    # The samples lie 0.25 · 2π / 200000 = 7.9e-6 apart along the rim; their lowest is within
    # half that of the true lowest point, and within R (Δangle)² / 8 = 1.2e-10 of its height.
    assert_close(point, lowest, 0, 4e-6, "lowest rim point")
    assert abs(point[2] - lowest[2]) < 2e-10

    rng = np.random.default_rng(42)
    qd = rng.normal(size=7)
    qd[3:] -= (qd[3:] @ q[3:]) * q[3:]  # eᵀė = 0
    rate = jax.jvp(lambda q_: joint.clearance(layout.frames(q_), params), (q,), (qd,))[1]
    offset = point - q[:3]
    omega = A @ np.asarray(spatial.parameter_angular_velocity(q[3:], qd[3:]))
    assert_close(rate, (qd[:3] + np.cross(omega, offset))[2], 0, 1e-13, "Φ̇ = nᵀ v_P")


def test_bad_input_before_anything_compiles():
    """Non-positive radius (number or parameter), zero normal, zero axis, negative crown,
    a wheel lying flat or a sphere off the plane at reference_q: ValueErrors naming the
    joint from the builder. A q0 off the plane is refused by `simulate` (inconsistent
    initial conditions)."""
    ball = [spatial.Body("ball", 1.0, 0.004)]
    q_ball = spatial.pose([0.0, 0.0, 0.1], np.eye(3))
    build = spatial.spatial_mechanism
    cases = [
        (rolling.RollingSphere("b1", 0, radius=-0.1), {}, None, "'b1'.*radius must be positive"),
        (rolling.RollingSphere("b2", 0, radius="r"), {"r": 0.0}, None, "'b2'.*radius"),
        (
            rolling.RollingSphere("b3", 0, radius=0.1, plane_normal=(0.0, 0.0, 0.0)),
            {},
            None,
            "'b3'.*plane normal",
        ),
        (rolling.RollingSphere("b4", 0, radius=0.12), {}, q_ball, "'b4'.*off the plane"),
        (rolling.RollingDisc("w1", 0, radius=0.1, axis=(0.0, 0.0, 0.0)), {}, None, "'w1'.*axis"),
        (
            rolling.RollingTorus("w2", 0, radius=0.1, crown_radius=-0.01),
            {},
            None,
            "'w2'.*crown radius",
        ),
        (rolling.RollingDisc("w3", 0, radius=0.1), {}, q_ball, "'w3'.*parallel"),
    ]
    for joint, params, q_ref, message in cases:
        with pytest.raises(ValueError, match=message):
            build(ball, [joint], params, reference_q=q_ref)
    mech = build(ball, [rolling.RollingSphere("ball", 0, radius=0.1)], reference_q=q_ball)
    q_off = spatial.pose([0.0, 0.0, 0.15], np.eye(3))
    with pytest.raises(ValueError, match="inconsistent initial conditions"):
        jaxmbs.simulate(mech, q_off, np.zeros(7), (0.0, 1.0))
