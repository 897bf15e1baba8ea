"""Spatial joint wrenches (issue 42, item 2): the force and moment each spatial joint transmits,
from its constraint group's multipliers (`jaxmbs.Reactions.joints`).

Independent references:

- a body on a vertical revolute joint in steady rotation, its wrench worked by hand
  (`test_revolute_in_steady_rotation_against_newton_euler`);
- the McPherson strut: every joint's wrench, on both of its bodies, turned back into
  generalized forces by virtual power through ω(q̇) (`Layout.velocities`, not the map the
  wrenches were computed with) and summed over the joints, against −Cᵀλ less the
  normalisations' share;
- the power of a wrench against the power of its generalized force, for Euler-parameter and
  ZXZ bodies, at velocities that do not keep eᵀe = 1;
- which components of a redundant joint's wrench are determined: a body on two coaxial
  bearings worked by hand (`test_coaxial_bearings_determined_components`), and on the
  McPherson strut every component flagged determined unchanged, and those flagged not
  changed, when λ moves along the left null space of C.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close, relative_error

import jaxmbs
from jaxmbs.model.joints import rolling, spatial
from jaxmbs.models import mcpherson

SEED = 20261125
G = 9.81
#: Design orientation: local x, y, z along global y, z, x (θ = π/2, away from the gimbal lock).
FRAME = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])

# --- a body on a vertical revolute joint, in steady rotation ---------------------------------

MASS, SPIN = 2.0, 3.0
#: Centroidal inertia in global axes at the instant (a product of inertia J_xz).
INERTIA = np.array([[0.3, 0.0, 0.05], [0.0, 0.4, 0.0], [0.05, 0.0, 0.2]])
OFFSET = np.array([0.3, 0.0, -0.2])  # the centre from the joint point: (a, 0, b)
PIVOTS = (np.array([0.0, 0.0, 1.0]), np.array([1.0, 0.0, 1.0]))


def spinning_bodies(kind: str):
    """Two like bodies on vertical revolute joints to the ground: `O0` with the body as
    body_j (the wrench reported on the body), `O1` with the body as body_i (on the ground);
    at the instant both spin at Ω about z with their centres at P + (a, 0, b)."""
    z = np.array([0.0, 0.0, 1.0])
    bodies = [spatial.Body(f"b{k}", MASS, FRAME.T @ INERTIA @ FRAME, kind) for k in range(2)]
    local_pivot, local_axis = FRAME.T @ -OFFSET, FRAME.T @ z
    joints = [
        spatial.Revolute("O0", None, PIVOTS[0], z, 0, local_pivot, local_axis),
        spatial.Revolute("O1", 1, local_pivot, local_axis, None, PIVOTS[1], z),
    ]
    q = np.concatenate([spatial.pose(p + OFFSET, FRAME, kind) for p in PIVOTS])
    mech = spatial.spatial_mechanism(bodies, joints, gravity=(0.0, 0.0, -G), reference_q=q)
    omega = np.array([0.0, 0.0, SPIN])
    velocities = np.stack([np.cross(omega, OFFSET)] * 2)
    qd = spatial.Layout.from_mechanism(mech).rates(q, velocities, np.stack([omega] * 2))
    return mech, jnp.asarray(q), qd


def hand_wrench() -> tuple[np.ndarray, np.ndarray]:
    """The wrench of the joint on the body, by Newton–Euler. The centre c = P + (a, 0, b)
    moves on a circle about the axis: a_c = −Ω² (a, 0, 0); nothing turns the body about the
    vertical axis (gravity is parallel to it, and (ω × Jω)_z = 0), so ω̇ = 0. Newton:
    F + m g = m a_c, F = (−m Ω² a, 0, m g). Euler about c: N_c = dH_c/dt = ω × J ω
    = Ω² (−J_yz, J_xz, 0). About P: N_P = N_c − (P − c) × F = (0, Ω² J_xz − m a (g + Ω² b), 0).
    With m = 2, Ω = 3, a = 0.3, b = −0.2, J_xz = 0.05: F = (−5.4, 0, 19.62),
    N_P = (0, −4.356, 0)."""
    a, b = OFFSET[0], OFFSET[2]
    force = np.array([-MASS * SPIN**2 * a, 0.0, MASS * G])
    moment = np.array([0.0, SPIN**2 * INERTIA[0, 2] - MASS * a * (G + SPIN**2 * b), 0.0])
    return force, moment


@pytest.mark.parametrize("kind", [spatial.EULER_PARAMETERS, spatial.ZXZ])
def test_revolute_in_steady_rotation_against_newton_euler(kind, record_property):
    """`O0`: the wrench on the body against `hand_wrench`, in global axes (= its joint frame,
    body_i being the ground); `O1`: the wrench on the ground, −F and −N_P, and in the body's
    frame Aᵀ(−F). Both determined; the steady motion is checked (ω̇ = 0)."""
    mech, q, qd = spinning_bodies(kind)
    qdd, lam = jaxmbs.accelerations_and_multipliers(mech, q, qd)
    layout = spatial.Layout.from_mechanism(mech)
    _, omega_dot = jax.jvp(lambda x: layout.velocities(q, x)[1], (qd,), (qdd,))
    assert float(jnp.max(jnp.abs(omega_dot))) < 1e-12  # ω̇ = 0 (ω(q̇) is linear in q̇)
    joints = jaxmbs.constraint_reactions(mech, q, lam).joints
    force, moment = hand_wrench()
    errors = [
        relative_error(joints["O0"]["force"], force),
        relative_error(joints["O0"]["moment"], moment),
        relative_error(joints["O0"]["force_local"], force),
        relative_error(joints["O1"]["force"], -force),
        relative_error(joints["O1"]["moment"], -moment),
        relative_error(joints["O1"]["force_local"], FRAME.T @ -force),
        relative_error(joints["O1"]["moment_local"], FRAME.T @ -moment),
    ]
    record_property("max_relative_error", max(errors))
    assert max(errors) < 1e-12, errors
    assert bool(joints["O0"]["determined"]) and bool(joints["O1"]["determined"])


def test_wrenches_along_a_solution_and_in_the_dataset():
    """`solution_reactions` and `to_xarray` carry the wrenches: over 0.5 s of the steady
    rotation (Euler parameters) the body turns by Ω t about z, and so does the hand wrench."""
    xr = pytest.importorskip("xarray")
    mech, q, qd = spinning_bodies(spatial.EULER_PARAMETERS)
    ts = np.linspace(0.0, 0.5, 3)
    sol = jaxmbs.simulate(mech, q, qd, (0.0, 0.5), saveat=ts, rtol=1e-11, atol=1e-11)
    ds = jaxmbs.to_xarray(mech, sol)
    assert isinstance(ds, xr.Dataset)
    assert ds["reaction.O0.force"].dims == ("time", "xyz")
    assert bool(np.all(ds["reaction.O0.determined"].values))
    force, moment = hand_wrench()
    turn = np.stack(
        [
            [[np.cos(a), -np.sin(a), 0.0], [np.sin(a), np.cos(a), 0.0], [0.0, 0.0, 1.0]]
            for a in SPIN * ts
        ]
    )
    assert_close(ds["reaction.O0.force"].values, turn @ force, 0, 1e-8 * MASS * G, "F(t)")
    assert_close(ds["reaction.O0.moment"].values, turn @ moment, 0, 1e-8 * MASS * G, "N(t)")
    joints = jaxmbs.solution_reactions(mech, sol).joints
    assert_close(joints["O1"]["moment"], -(turn @ moment), 0, 1e-8 * MASS * G, "O1 N(t)")


# --- the McPherson strut ----------------------------------------------------------------------


def generalized_force(layout, q, forces, moments):
    """The generalized force of wrenches (forces at the centres, moments about them, global
    axes) by virtual power: Fᵀṙ + Nᵀω = fᵀq̇ with (ṙ, ω) = V q̇ (`Layout.velocities`), so
    f = Vᵀ [F; N] (a vjp; V is linear in q̇)."""
    _, transpose = jax.vjp(lambda x: layout.velocities(q, x, "global"), jnp.zeros_like(q))
    return transpose((forces, moments))[0]


def sum_over_joints(mech, q, wrenches):
    """Σ over the joints of the generalized forces of their wrenches: (F, N about P_j) on
    body j as reported, (−F, −N) on body i, each moved to the body's centre,
    N_c = N + (P_j − r_c) × F."""
    layout = spatial.Layout.from_mechanism(mech)
    frames = layout.frames(q)
    forces, moments = jnp.zeros((5, 3)), jnp.zeros((5, 3))
    for joint in spatial.joints_of(mech):
        force, moment = wrenches[joint.name]
        point = frames.point(joint.body_j, spatial.value(joint.point_j, mech.params))
        for body, sign in ((joint.body_j, 1.0), (joint.body_i, -1.0)):
            if body is not None:
                arm = point - frames.positions[body]
                forces = forces.at[body].add(sign * force)
                moments = moments.at[body].add(sign * (moment + jnp.cross(arm, force)))
    return generalized_force(layout, q, forces, moments)


def test_mcpherson_wrenches_sum_to_the_generalized_reactions(record_property):
    """The redundant strut in Euler parameters (normalisations, redundancy 3) at three
    assembled states with random consistent velocities along its drive (arm turned by 0,
    0.3, −0.3 rad; rack moved by 0, 2, −3 cm). Each joint's wrench, turned into generalized
    forces on both of its bodies (`sum_over_joints`) and summed over the joints, reproduces
    −Cᵀλ without the normalisations' share C_eᵀλ_e to 1e-10 relative. The `determined`
    flags are `jaxmbs.analyze_solvability`'s verdicts (A_a, A_b, strut-rod and guide share a
    reaction that is not unique), and the ball joints carry no moment about their centres."""
    mech = mcpherson.mcpherson_redundant(spatial.EULER_PARAMETERS)
    rng = np.random.default_rng(SEED)
    drive = ((0.0, 0.0), (0.3, 0.02), (-0.3, -0.03))
    states = [
        jaxmbs.assemble(mech, mcpherson.initial_state(mech, a, r)[0], rng.normal(size=mech.n))
        for a, r in drive
    ]
    qs, qds = (jnp.stack(x) for x in zip(*states, strict=True))
    lams = jax.jit(jax.vmap(lambda q, qd: jaxmbs.accelerations_and_multipliers(mech, q, qd)[1]))(
        qs, qds
    )
    reactions = jaxmbs.constraint_reactions(mech, qs, lams)
    wrenches = {name: (w["force"], w["moment"]) for name, w in reactions.joints.items()}
    total = jax.jit(jax.vmap(lambda q, w: sum_over_joints(mech, q, w)))(qs, wrenches)
    expected = -reactions.generalized + reactions.groups["normalization"]
    error = relative_error(total, expected)
    verdict = jaxmbs.analyze_solvability(mech, qs[0]).solvable
    balls = [j.name for j in spatial.joints_of(mech) if isinstance(j, spatial.Spherical)]
    moment_ratio = max(
        float(
            jnp.max(
                jnp.linalg.norm(wrenches[b][1], axis=-1) / jnp.linalg.norm(wrenches[b][0], axis=-1)
            )
        )
        for b in balls
    )
    record_property("relative_error_of_the_sum", error)
    record_property("max_ball_joint_moment_over_force", moment_ratio)
    assert error < 1e-10
    assert moment_ratio < 1e-13  # m: |N| / |F| about the ball's centre
    for joint in spatial.joints_of(mech):
        determined = np.asarray(reactions.joints[joint.name]["determined"])
        assert determined.tolist() == [verdict[joint.name]] * len(drive), joint.name
    assert not all(verdict.values()) and any(verdict.values())


# --- power --------------------------------------------------------------------------------------


def test_wrench_power_equals_generalized_force_power(record_property):
    """For an Euler-parameter and a ZXZ body joined by a revolute and a universal joint, at a
    random configuration: each joint's force system f = C_Xᵀλ_X (random λ) has the power
    Σ F_k·ṙ_k + N_k·ω_k of its wrenches (`Layout.wrenches`) equal to fᵀq̇ for random q̇ —
    also rates with eᵀė ≠ 0, ω from `Layout.velocities` (a joint's f is orthogonal to e);
    for any f, at q̇ = `Layout.rates`(v, ω); and the normalisation's reaction 2λe has no
    wrench."""
    rng = np.random.default_rng(SEED)
    bodies = [
        spatial.Body("ep", 1.0, 0.1, spatial.EULER_PARAMETERS),
        spatial.Body("zxz", 1.0, 0.1, spatial.ZXZ),
    ]
    joints = [
        spatial.Revolute("R", 0, (0.1, 0.2, 0.0), (0.0, 0.0, 1.0), 1, (0.0, -0.3, 0.1), (1, 0, 0)),
        spatial.Universal("U", 1, (0.2, 0.0, 0.0), (0.0, 1.0, 0.0), None, (1, 1, 0), (0, 0, 1)),
    ]
    mech = spatial.spatial_mechanism(bodies, joints)
    layout = spatial.Layout.from_mechanism(mech)
    e = rng.normal(size=4)
    q = np.concatenate([rng.normal(size=3), e / np.linalg.norm(e), rng.normal(size=6)])
    q[11] = 1.2  # θ of the ZXZ body, away from the gimbal lock
    q = jnp.asarray(q)
    C = jax.jit(lambda q: jaxmbs.constraint_jacobian(mech, q))(q)
    wrenches = jax.jit(layout.wrenches)

    @jax.jit
    def power(f, qd):
        forces, moments = wrenches(q, f)
        v, omega = layout.velocities(q, qd)
        return jnp.sum(forces * v) + jnp.sum(moments * omega), f @ qd

    worst = 0.0
    for name in ("R", "U"):
        rows = np.asarray(mech.group_rows(name))
        for _ in range(3):
            f = C[rows].T @ rng.normal(size=rows.size)
            wrench_power, expected = power(f, jnp.asarray(rng.normal(size=mech.n)))
            worst = max(worst, float(abs(wrench_power - expected) / jnp.linalg.norm(f)))
    for _ in range(3):
        f = jnp.asarray(rng.normal(size=mech.n))
        qd = layout.rates(q, rng.normal(size=(2, 3)), rng.normal(size=(2, 3)))
        wrench_power, expected = power(f, qd)
        worst = max(worst, float(abs(wrench_power - expected) / jnp.linalg.norm(f)))
    normalisation = C[np.asarray(mech.group_rows("normalization"))].T @ jnp.ones(1)
    record_property("max_power_difference_per_unit_force", worst)
    assert worst < 1e-13
    assert float(jnp.max(jnp.abs(jnp.stack(wrenches(q, normalisation))))) < 1e-14
    assert float(jnp.max(jnp.abs(normalisation))) > 0.5  # 2e on the Euler parameters


# --- which components of a redundant joint's wrench are determined ------------------------------

MOUNT, SPAN, CENTRE = np.array([0.0, 0.0, 1.0]), 1.0, 0.3
#: Gravity with an axial (x) and two radial components, so that every hand value is non-zero.
TILTED_GRAVITY = np.array([-3.0, 2.0, -9.0])


def coaxial_bearings(kind: type):
    """A body (Euler parameters, frame `FRAME`: its local z is the global x) on two bearings
    of the global x axis, at P_A = `MOUNT` and P_B = P_A + L x̂, its centre at
    c = P_A + x_c x̂ on the axis, at rest: `A` with the ground as body_i (its wrench is on
    the body, global axes throughout), `B` with the body as body_i (its wrench is on the
    ground; local axes: the body's). `kind`: `spatial.Spherical` or `spatial.Revolute`."""
    x = np.array([1.0, 0.0, 0.0])
    centre, points = MOUNT + CENTRE * x, (MOUNT, MOUNT + SPAN * x)
    local = [FRAME.T @ (p - centre) for p in points]
    axis = FRAME.T @ x
    if kind is spatial.Spherical:
        joints = [
            spatial.Spherical("A", None, points[0], 0, local[0]),
            spatial.Spherical("B", 0, local[1], None, points[1]),
        ]
    else:
        joints = [
            spatial.Revolute("A", None, points[0], x, 0, local[0], axis),
            spatial.Revolute("B", 0, local[1], axis, None, points[1], x),
        ]
    body = spatial.Body("shaft", MASS, FRAME.T @ INERTIA @ FRAME, spatial.EULER_PARAMETERS)
    q = spatial.pose(centre, FRAME)
    mech = spatial.spatial_mechanism([body], joints, gravity=tuple(TILTED_GRAVITY), reference_q=q)
    return mech, jnp.asarray(q)


def left_null_shift(mech, q, lam, rng) -> jax.Array:
    """A random μ in the left null space of C (Cᵀμ = 0, from the SVD of C), |μ| = |λ|."""
    C = np.asarray(jax.jit(lambda q: jaxmbs.constraint_jacobian(mech, q))(q))
    U, s, _ = np.linalg.svd(C)
    rank = int(np.sum(s > 1e-8 * s[0]))
    mu = U[:, rank:] @ rng.normal(size=C.shape[0] - rank)
    assert np.max(np.abs(C.T @ mu)) < 1e-13 * np.linalg.norm(mu)
    return jnp.asarray(mu * np.linalg.norm(lam) / np.linalg.norm(mu))


VECTORS = ("force", "moment", "force_local", "moment_local")


def flags(joint: dict) -> dict[str, list[bool]]:
    return {v: np.asarray(joint[f"{v}_determined"]).tolist() for v in VECTORS}


#: By hand (docstring of the test): per joint, the flags of force, moment, force_local and
#: moment_local (A: local = global; B: local z = global x).
HAND_FLAGS = {
    spatial.Spherical: {
        "A": ([False, True, True], [True] * 3, [False, True, True], [True] * 3),
        "B": ([False, True, True], [True] * 3, [True, True, False], [True] * 3),
    },
    spatial.Revolute: {
        "A": ([False] * 3, [True, False, False], [False] * 3, [True, False, False]),
        "B": ([False] * 3, [True, False, False], [False] * 3, [False, False, True]),
    },
}


@pytest.mark.parametrize("kind", [spatial.Spherical, spatial.Revolute])
def test_coaxial_bearings_determined_components(kind, record_property):
    """A body on two coaxial bearings, at rest (its centre on the axis: gravity has no moment
    about it, q̈ = 0), worked by hand. Body: mass m, gravity g, bearing forces F_A, F_B and
    moments N_A, N_B about P_A, P_B on it.

    Two ball joints (7 rows, rank 6, redundancy 1): equilibrium F_A + F_B = −m g and, about
    P_A, x̂ × (L F_B + x_c m g) = 0 (no moments about the balls' centres). The radial
    components are determined, F_B⊥ = −(x_c/L) m g⊥ and F_A⊥ = −(1 − x_c/L) m g⊥; only the
    sum of the axial ones is, F_Ax + F_Bx = −m g_x: the self-equilibrated pair F_A = −F_B = s x̂
    is the left null space. Reported: A on the body, (F_A, 0) global; B on the ground,
    (−F_B, 0), in the body's frame x̂ is local z. So force flags (x, y, z) = (no, yes, yes)
    for A and B in global axes, (yes, yes, no) for B's local; moments all determined (zero).

    Two revolute joints (11 rows, rank 6, redundancy 5): each bearing also carries a moment
    perpendicular to the axis, so any pair F_A = −F_B = s with N_A = −N_B − (P_A − P_B) × s
    (perpendicular to x̂) is self-equilibrated, for every s ∈ R³ and N_A ⊥ x̂: 5 directions.
    No force component is determined — a radial pair's couple is taken by the bearing
    moments — only the moments about the axis, N_Ax = N_Bx = 0: moment flags (yes, no, no)
    in global axes, (no, no, yes) for B's local. The sums stay determined: F_A + F_B = −m g.

    Checked: the flags equal the hand ones, `determined` is False for both (and is
    `jaxmbs.analyze_solvability`'s verdict); every determined component equals its hand value
    to 1e-10 relative and is unchanged (1e-10) when λ moves by a random μ with Cᵀμ = 0, |μ| = |λ|;
    every undetermined one changes by more than 1e-3 m g (m g L for moments)."""
    mech, q = coaxial_bearings(kind)
    qdd, lam = jax.jit(lambda q: jaxmbs.accelerations_and_multipliers(mech, q, jnp.zeros(7)))(q)
    assert float(jnp.max(jnp.abs(qdd))) < 1e-12
    joints = jaxmbs.constraint_reactions(mech, q, lam).joints
    mu = left_null_shift(mech, q, lam, np.random.default_rng(SEED))
    shifted = jaxmbs.constraint_reactions(mech, q, lam + mu).joints
    weight = MASS * TILTED_GRAVITY
    radial = np.array([0.0, 1.0, 1.0])
    f_a, f_b = -(1 - CENTRE / SPAN) * weight * radial, -(CENTRE / SPAN) * weight * radial
    if kind is spatial.Spherical:  # the determined components' hand values (others: 0 here)
        hand = {"A": (f_a, 0, f_a, 0), "B": (-f_b, 0, FRAME.T @ -f_b, 0)}
    else:
        hand = {"A": (0, 0, 0, 0), "B": (0, 0, 0, 0)}
    verdict = jaxmbs.analyze_solvability(mech, q).solvable
    scale = {"force": MASS * G, "moment": MASS * G * SPAN}
    worst_hand, worst_shift, least_change = 0.0, 0.0, np.inf
    for name, expected_flags in HAND_FLAGS[kind].items():
        assert flags(joints[name]) == dict(zip(VECTORS, expected_flags, strict=True)), name
        assert not bool(joints[name]["determined"]) and not verdict[name]
        for vector, mask, value in zip(VECTORS, expected_flags, hand[name], strict=True):
            unit = scale[vector.split("_")[0]]
            mask = np.asarray(mask)
            got, moved = np.asarray(joints[name][vector]), np.asarray(shifted[name][vector])
            expected = np.broadcast_to(value, (3,))
            worst_hand = max(worst_hand, np.max(np.abs(got - expected)[mask], initial=0) / unit)
            change = np.abs(moved - got) / unit
            worst_shift = max(worst_shift, np.max(change[mask], initial=0.0))
            least_change = min(least_change, np.min(change[~mask], initial=np.inf))
    total = joints["A"]["force"] - joints["B"]["force"]  # F_A + F_B on the body
    record_property("determined_vs_hand", worst_hand)
    record_property("determined_change_under_null_shift", worst_shift)
    record_property("least_undetermined_change", least_change)
    assert worst_hand < 1e-10 and worst_shift < 1e-10
    assert least_change > 1e-3
    assert relative_error(total, -weight) < 1e-10


def test_mcpherson_determined_components_under_null_shifts(record_property):
    """The redundant strut (Euler parameters) at an assembled state along its drive (arm
    0.3 rad, rack 2 cm, random consistent velocities). The joints `jaxmbs.analyze_solvability` finds
    unique have every component determined; for every joint `determined` is "all
    components determined". λ moved by three random μ with Cᵀμ = 0, |μ| = |λ|: each
    component flagged determined is unchanged to 1e-10 relative (to the largest force, or
    moment, of all joints), and every component flagged undetermined changes (more than
    1e-4 of it) under at least one of them; every non-unique joint has such a component."""
    mech = mcpherson.mcpherson_redundant(spatial.EULER_PARAMETERS)
    generator = np.random.default_rng(SEED)
    q0, _ = mcpherson.initial_state(mech, 0.3, 0.02)
    q, qd = jaxmbs.assemble(mech, q0, generator.normal(size=mech.n))
    _, lam = jax.jit(lambda q, qd: jaxmbs.accelerations_and_multipliers(mech, q, qd))(q, qd)
    joints = jaxmbs.constraint_reactions(mech, q, lam).joints
    shifts = [
        jaxmbs.constraint_reactions(mech, q, lam + left_null_shift(mech, q, lam, generator)).joints
        for _ in range(3)
    ]
    verdict = jaxmbs.analyze_solvability(mech, q).solvable
    names = [j.name for j in spatial.joints_of(mech)]
    scale = {
        kind: max(float(jnp.linalg.norm(joints[n][kind])) for n in names)
        for kind in ("force", "moment")
    }
    worst_shift, least_change = 0.0, np.inf
    for name in names:
        joint, per_vector = joints[name], flags(joints[name])
        all_determined = all(all(f) for f in per_vector.values())
        assert bool(joint["determined"]) == verdict[name] == all_determined, name
        for vector, mask in per_vector.items():
            mask = np.asarray(mask)
            unit = scale[vector.split("_")[0]]
            change = np.max(
                [np.abs(np.asarray(s[name][vector]) - np.asarray(joint[vector])) for s in shifts],
                axis=0,
            )
            worst_shift = max(worst_shift, np.max(change[mask], initial=0.0) / unit)
            least_change = min(least_change, np.min(change[~mask], initial=np.inf) / unit)
    record_property("determined_change_under_null_shift", worst_shift)
    record_property("least_undetermined_change", least_change)
    assert worst_shift < 1e-10
    assert least_change > 1e-4
    assert not all(verdict.values()) and any(verdict.values())


# --- rolling contact ------------------------------------------------------------------------------


def test_rolling_disc_reaction_is_a_force_at_the_contact_point(record_property):
    """A tilted disc on an inclined plane, random multipliers: the wrench of both groups'
    force system (`Layout.wrenches`) is the force `Reactions.joints` reports, −λ_Φ n − λ₁ t₁
    − λ₂ t₂, acting at the contact point: no moment about it (the envelope property of the
    lowest rim point, `rolling`)."""
    rng = np.random.default_rng(SEED)
    normal = np.array([np.sin(0.2), 0.0, np.cos(0.2)])
    disc = rolling.RollingDisc("disc", 0, radius=0.3, plane_normal=normal, axis=(0, 0, 1))
    body = spatial.Body("disc", 1.0, (0.02, 0.02, 0.04), spatial.EULER_PARAMETERS)
    mech = spatial.spatial_mechanism([body], [disc])
    layout = spatial.Layout.from_mechanism(mech)
    e = rng.normal(size=4)
    q = jnp.asarray(np.concatenate([rng.normal(size=3), e / np.linalg.norm(e)]))
    lam = jnp.asarray(rng.normal(size=mech.n_holonomic + mech.n_pfaffian))
    C = jax.jit(lambda q: jaxmbs.constraint_jacobian(mech, q))(q)
    rows = np.asarray(mech.group_rows("disc") + mech.group_rows("disc.no_slip"))
    forces, moments = jax.jit(layout.wrenches)(q, -(C[rows].T @ lam[rows]))
    reaction = jaxmbs.constraint_reactions(mech, q, lam).joints["disc"]
    arm = reaction["contact_point"] - q[:3]
    moment_about_contact = moments[0] - jnp.cross(arm, forces[0])
    record_property("force_relative_error", relative_error(forces[0], reaction["force"]))
    assert relative_error(forces[0], reaction["force"]) < 1e-13
    assert float(jnp.max(jnp.abs(moment_about_contact))) < 1e-13 * float(jnp.linalg.norm(forces[0]))
    assert abs(float(reaction["normal_force"] + lam[mech.group_rows("disc")[0]])) < 1e-15
    assert bool(reaction["determined"])
