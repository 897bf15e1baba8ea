"""Spatial rigid bodies (ZXZ Euler angles and Euler parameters, Lagrangian form) and the
spatial joints.

Independent checks: conservation of energy and angular momentum of a torque-free tumbling
body (Euler's equations), the small-oscillation period of a spatial pendulum, the rotational
mass matrix against GᵀJG with G from finite differences of the rotation matrix, virtual
power of applied loads, and, for every joint, the dof it removes and its residual along a
motion.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import jaxmbs
from jaxmbs.model.joints import forces, spatial

SEED = 20261123  # every test draws from its own generator with this seed
#: Design orientation used below: local x, y, z along global y, z, x (θ = π/2).
FRAME = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def rot_x(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[1.0, 0.0, 0.0], [0.0, c, -s], [0.0, s, c]])


def rot_y(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]])


def euler_rates(angles, omega_body):
    """ė with body_angular_velocity(e, ė) = ω' (linear in ė: one solve)."""
    G = jax.jacfwd(spatial.body_angular_velocity, argnums=1)(angles, jnp.zeros(3))
    return np.linalg.solve(np.asarray(G), omega_body)


def test_euler_angles_round_trip_and_gimbal_lock():
    rng = np.random.default_rng(SEED)
    for _ in range(20):
        e = rng.uniform([-np.pi, 0.1, -np.pi], [np.pi, np.pi - 0.1, np.pi])
        assert_close(spatial.euler_angles(spatial.rotation(jnp.asarray(e))), e, 0, 1e-12, "ZXZ")
    with pytest.raises(ValueError, match="gimbal lock"):
        spatial.euler_angles(np.eye(3))
    with pytest.raises(ValueError, match="rotation matrix"):
        spatial.euler_angles(2 * np.eye(3))


def test_mass_matrix_against_finite_difference_angular_velocity():
    """M = diag(m I, GᵀJG) with G (ω' = G ė) from central differences of A(e): AᵀȦ = ω̃'."""
    rng = np.random.default_rng(SEED)
    J = np.array([[0.3, 0.02, -0.01], [0.02, 0.5, 0.03], [-0.01, 0.03, 0.7]])
    mech = spatial.spatial_mechanism(
        [spatial.Body("b", 2.5, J, spatial.ZXZ)],
        [],
        gravity=(0.0, 0.0, 0.0),
        reference_q=np.zeros(6) + 1.0,
    )
    h = 1e-6

    @jax.jit
    def mass_and_fd_G(q):
        e, A = q[3:], spatial.rotation(q[3:])
        columns = []
        for k in range(3):
            de = jnp.eye(3)[k] * h
            W = A.T @ (spatial.rotation(e + de) - spatial.rotation(e - de)) / (2 * h)
            columns.append(jnp.stack([W[2, 1], W[0, 2], W[1, 0]]))
        return mech.mass_matrix(q, mech.params), jnp.stack(columns, axis=1)

    for _ in range(10):
        e = rng.uniform([-np.pi, 0.2, -np.pi], [np.pi, np.pi - 0.2, np.pi])
        M, G = (np.asarray(x) for x in mass_and_fd_G(jnp.concatenate([rng.normal(size=3), e])))
        assert_close(M, M.T, 0, 1e-14, "symmetry")
        assert_close(M[:3, :3], 2.5 * np.eye(3), 0, 1e-14, "translation block")
        assert_close(M[:3, 3:], 0.0, 0, 1e-14, "no coupling")
        assert_close(M[3:, 3:], G.T @ J @ G, 0, 1e-8, "rotation block GᵀJG")
        # Positive definite away from the gimbal lock: λ_min ≥ J_min sin²θ / 2 here.
        assert np.linalg.eigvalsh(M)[0] > 0.5 * np.linalg.eigvalsh(J)[0] * np.sin(e[1]) ** 2
    # At the gimbal lock (θ = 0) φ and ψ turn about the same axis: M is singular.
    M0 = np.asarray(mass_and_fd_G(jnp.asarray([0.0, 0.0, 0.0, 0.3, 0.0, -0.4]))[0])
    assert np.linalg.eigvalsh(M0)[0] < 1e-14


def test_bodies_terms_in_closed_form_equal_lagrange_by_autodiff():
    """The builder's M, M v and Q (the bodies' kinetic terms in closed form) equal those that
    `Mechanism.from_lagrangian` derives by autodiff of T = Σ ½ m|ṙ|² + ½ ω'ᵀJω' (+ 2 J̄
    (eᵀė)²), written here from ω' = `body_angular_velocities`: Euler-parameter and ZXZ
    bodies mixed, a full inertia tensor, e off the normalisation, and an extra coordinate
    with an added kinetic energy, at random (q, q̇)."""
    rng = np.random.default_rng(SEED)
    root = rng.normal(size=(3, 3))
    bodies = (
        spatial.Body("a", 2.0, root @ root.T + 3 * np.eye(3), spatial.EULER_PARAMETERS),
        spatial.Body("b", 1.5, (1.0, 2.0, 3.0), spatial.ZXZ),
        spatial.Body("c", 0.7, 0.3, spatial.EULER_PARAMETERS),
    )
    layout = spatial.Layout.from_bodies(bodies)

    def added(q, qd, p):  # a rotor on the extra coordinate, coupled to body a's e₁ rate
        return 0.5 * 0.8 * (qd[-1] + jnp.cos(q[4]) * qd[4]) ** 2

    def kinetic_energy(q, qd, p):
        m = jnp.array([b.mass for b in bodies])
        J = jnp.stack([spatial.inertia_tensor(b.inertia, p) for b in bodies])
        omega = layout.body_angular_velocities(q, qd)
        T = 0.5 * jnp.sum(m * jnp.sum(layout.positions(qd) ** 2, axis=1))
        T = T + 0.5 * jnp.sum(omega * jnp.einsum("kij,kj->ki", J, omega))
        for k in layout.bodies_of(spatial.EULER_PARAMETERS):
            e, e_dot = q[layout.coordinates(k)][3:], qd[layout.coordinates(k)][3:]
            T = T + 2 * jnp.trace(J[k]) / 3 * jnp.dot(e, e_dot) ** 2
        return T + added(q, qd, p)

    mech = spatial.spatial_mechanism(
        bodies, [], gravity=(0.0, 0.0, 0.0), added_kinetic_energy=added, extra_coordinates=["s"]
    )
    reference = jaxmbs.Mechanism.from_lagrangian(kinetic_energy, n=layout.n + 1)
    for _ in range(3):
        q, qd, v = (rng.normal(size=layout.n + 1) for _ in range(3))
        M = np.asarray(reference.mass_matrix(q, None))
        Q = np.asarray(reference.forces(0.0, q, qd, None))
        scale = np.max(np.abs(M))
        assert_close(mech.mass_matrix(q, mech.params), M, 0, 1e-13 * scale, "M")
        assert_close(mech.mass_product(q, v, mech.params), M @ v, 0, 1e-13 * scale, "M v")
        assert_close(mech.forces(0.0, q, qd, mech.params), Q, 0, 1e-13 * np.max(np.abs(Q)), "Q")


@pytest.mark.parametrize("orientation", [spatial.ZXZ, spatial.EULER_PARAMETERS])
def test_load_virtual_power(orientation):
    """Qᵀq̇ of a point force equals F·ṙ_P, of a torque τ·ω (ṙ_P and ω by finite differences
    of the rotation matrices), for either orientation kind (a ZXZ body 0 and a body 1 of the
    kind under test)."""
    rng = np.random.default_rng(SEED)
    bodies = [spatial.Body("a", 1.0, 1.0, spatial.ZXZ), spatial.Body("b", 1.0, 1.0, orientation)]
    layout = spatial.Layout.from_bodies(bodies)
    frames = layout.frames
    point, force = np.array([0.1, -0.2, 0.3]), np.array([1.0, 2.0, -0.5])
    loads = (
        forces.PointForce("F", 1, lambda t, q, qd, p: jnp.asarray(force), point=point),
        forces.BodyTorque("T", 0, (0.3, -0.1, 0.2)),  # a constant: numbers as a spec
    )
    elements = spatial.spatial_mechanism(bodies, [], elements=loads).elements
    torque = np.array([0.3, -0.1, 0.2])
    h = 1e-6

    @jax.jit
    def powers(q, qd):
        ahead, behind = frames(q + h * qd), frames(q - h * qd)
        velocity = (ahead.point(1, point) - behind.point(1, point)) / (2 * h)
        W = (ahead.rotations[0] - behind.rotations[0]) / (2 * h)
        W = W @ frames(q).rotations[0].T  # ω̃ = Ȧ Aᵀ (global)
        omega = jnp.stack([W[2, 1], W[0, 2], W[1, 0]])
        Q_force = loads[0].nonconservative_force(elements.kit, 0.0, q, qd, None)
        Q_torque = loads[1].nonconservative_force(elements.kit, 0.0, q, qd, None)
        return (
            Q_force @ qd - force @ velocity,
            Q_torque @ qd - torque @ omega,
            elements.power(0.0, q, qd, None) - (Q_force + Q_torque) @ qd,
        )

    for _ in range(5):
        # Body 1's Euler parameters need not be unit: F·ṙ_P holds for any A(e).
        q, qd = rng.normal(size=(2, layout.n))
        errors = powers(jnp.asarray(q), jnp.asarray(qd))
        assert max(abs(float(e)) for e in errors[:2]) < 1e-8
        assert abs(float(errors[2])) < 1e-12


def test_free_body_conserves_energy_and_angular_momentum():
    """Torque-free asymmetric body spinning near its major axis: Euler's equations conserve
    T and the global angular momentum A J ω' while ω' itself nutates."""
    J = np.array([1.0, 2.0, 3.0])

    def body_and_global_momentum(q, qd):
        omega = spatial.body_angular_velocity(q[3:], qd[3:])
        return omega, spatial.rotation(q[3:]) @ (J * omega)

    mech = spatial.spatial_mechanism(
        [spatial.Body("b", 1.5, J, spatial.ZXZ)],
        [],
        gravity=(0.0, 0.0, 0.0),
        reference_q=spatial.pose(np.zeros(3), FRAME, spatial.ZXZ),
    )
    q0 = spatial.pose([0.1, 0.2, 0.3], FRAME, spatial.ZXZ)
    omega0 = np.array([0.6, 0.4, 2.0])
    qd0 = np.concatenate([[0.1, -0.2, 0.05], euler_rates(jnp.asarray(q0[3:]), omega0)])
    ts = jnp.linspace(0.0, 10.0, 201)
    # No constraints: the rank monitor has nothing to watch.
    sol = jaxmbs.simulate(
        mech,
        q0,
        qd0,
        (0.0, 10.0),
        saveat=ts,
        stabilization="none",
        rank_rtol=None,
        rtol=1e-11,
        atol=1e-11,
    )
    omega, L = jax.jit(jax.vmap(body_and_global_momentum))(sol.q, sol.qd)
    assert_close(omega[0], omega0, 0, 1e-12, "initial ω'")
    assert float(jnp.ptp(omega[:, 0])) > 0.3  # it really nutates
    assert_close(L, np.broadcast_to(L[0], L.shape), 0, 1e-9, "angular momentum")
    assert_close(sol.energy, sol.energy[0], 0, 1e-9 * float(sol.energy[0]), "energy")
    assert_close(sol.qd[:, :3], qd0[:3], 0, 1e-12, "linear momentum")
    assert float(jnp.min(jnp.sin(sol.q[:, 4]))) > 0.5  # far from the gimbal lock


@pytest.fixture(scope="module")
def pendulum():
    """Body (Euler parameters) hanging from a spherical joint at the origin, centre of mass ρ
    below it."""
    m, rho, g, J = 1.3, 0.4, 9.81, np.array([0.02, 0.05, 0.08])
    mech = spatial.spatial_mechanism(
        [spatial.Body("bob", m, J)],
        [spatial.Spherical("pivot", 0, FRAME.T @ np.array([0.0, 0.0, rho]), None, np.zeros(3))],
        gravity=(0.0, 0.0, -g),
        reference_q=spatial.pose([0.0, 0.0, -rho], FRAME),
    )
    layout = spatial.Layout.from_mechanism(mech)

    @jax.jit
    def run(q0, qd0, t1):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, t1), stabilization="none", rtol=1e-12, atol=1e-12
        )
        q, qd, qdd = sol.q[-1], sol.qd[-1], sol.qdd[-1]

        # ω and ω̇ = d/dt ω along (q̇, q̈), global components.
        def omega(q, qd):  # ω = A ω'
            return layout.rotations(q)[0] @ layout.body_angular_velocities(q, qd)[0]

        return jax.jvp(omega, (q, qd), (qd, qdd))

    return mech, run, m, rho, g, J


@pytest.mark.parametrize("axis", ["x", "y"])
def test_spatial_pendulum_small_oscillation_period(pendulum, axis):
    """T = 2π √((J_a + mρ²)/(m g ρ)), J_a the moment about the swing axis (global x is the
    body's z axis, global y its x axis). Started at rest, ω returns to zero after one period:
    one Newton step on ω(t) = 0 from the predicted period reads it off the solution."""
    mech, run, m, rho, g, J = pendulum
    k, J_a = (0, J[2]) if axis == "x" else (1, J[0])
    turn = rot_x(1e-3) if axis == "x" else rot_y(1e-3)
    q_guess = spatial.pose(turn @ np.array([0.0, 0.0, -rho]), turn @ FRAME)
    q0, qd0 = jaxmbs.assemble(mech, q_guess)
    predicted = 2 * np.pi * np.sqrt((J_a + m * rho**2) / (m * g * rho))
    omega, omega_dot = run(q0, qd0, predicted)
    period = predicted - float(omega[k] / omega_dot[k])
    assert abs(period - predicted) / predicted < 1e-6
    assert abs(float(omega_dot[k])) > 1e-3  # it swung about the expected axis


def chain_of_joints():
    """Seven bodies in a tree, one joint of each kind (ground → spherical → revolute →
    universal → cylindrical → translational → distance → point-on-line), designed in global
    coordinates and given generic orientations so that no row vanishes by symmetry. The bodies
    alternate between Euler parameters (even) and ZXZ angles (odd): every joint joins the two
    kinds."""
    n = 7
    turns = [rot_x(0.3 * i) @ rot_y(-0.2 * i + 0.1) for i in range(n)]
    frames = [t @ FRAME for t in turns]
    centres = [np.array([0.5 * i, 0.1 * np.sin(i), -0.2 * i]) for i in range(n)]

    def loc(i, x):
        return frames[i].T @ (np.asarray(x) - centres[i])

    def ax(i, a):
        a = np.asarray(a, float) / np.linalg.norm(a)
        return frames[i].T @ a

    def mid(i, j):
        return (centres[i] + centres[j]) / 2

    a1, a2, a3 = np.array([0.2, 1.0, 0.1]), np.array([1.0, 0.3, 0.2]), np.array([0.1, 0.2, 1.0])
    cross = np.cross(a2, [0.0, 0.0, 1.0])
    slide, normal = centres[4] - centres[3], np.cross(centres[4] - centres[3], [0.0, 1.0, 0.0])
    line = centres[6] - centres[5]
    joints = [
        spatial.Spherical("spherical", 0, loc(0, [-0.3, 0.0, 0.1]), None, [-0.3, 0.0, 0.1]),
        spatial.Revolute(
            "revolute", 0, loc(0, mid(0, 1)), ax(0, a1), 1, loc(1, mid(0, 1)), ax(1, a1)
        ),
        spatial.Universal(
            "universal", 1, loc(1, mid(1, 2)), ax(1, a2), 2, loc(2, mid(1, 2)), ax(2, cross)
        ),
        spatial.Cylindrical(
            "cylindrical",
            2,
            loc(2, mid(2, 3)),
            ax(2, a3),
            3,
            loc(3, mid(2, 3) + 0.05 * a3),
            ax(3, a3),
        ),
        spatial.Translational(
            "translational",
            3,
            loc(3, centres[3]),
            ax(3, slide),
            ax(3, normal),
            4,
            loc(4, centres[4]),
            ax(4, slide),
            ax(4, normal),
        ),
        spatial.Distance(
            "distance",
            4,
            loc(4, centres[4] + [0.0, 0.1, 0.0]),
            5,
            loc(5, centres[5]),
            np.linalg.norm(centres[5] - centres[4] - [0.0, 0.1, 0.0]),
        ),
        spatial.PointOnLine(
            "point-on-line", 5, loc(5, centres[5]), ax(5, line), 6, loc(6, centres[6])
        ),
    ]
    kinds = [spatial.ZXZ if i % 2 else spatial.EULER_PARAMETERS for i in range(n)]
    bodies = [spatial.Body(f"b{i}", 1.0 + 0.1 * i, (0.05, 0.07, 0.09), kinds[i]) for i in range(n)]
    q_design = np.concatenate(
        [spatial.pose(c, f, k) for c, f, k in zip(centres, frames, kinds, strict=True)]
    )
    mech = spatial.spatial_mechanism(bodies, joints, reference_q=q_design)
    return mech, joints, q_design


#: The relative degrees of freedom each joint leaves between its two bodies.
RELATIVE_DOF = {
    "spherical": 3,
    "revolute": 1,
    "universal": 2,
    "cylindrical": 2,
    "translational": 1,
    "distance": 5,
    "point-on-line": 4,
}


@pytest.fixture(scope="module")
def chain():
    return chain_of_joints()


def test_each_joint_removes_its_degrees_of_freedom(chain):
    mech, joints, q = chain
    assert float(jnp.max(jnp.abs(mech.constraints(0.0, jnp.asarray(q), mech.params)))) < 1e-14
    s = mech.structure
    # 4 bodies in Euler parameters: 4 more coordinates and 4 normalisation rows.
    assert (s.n, s.rank, s.redundancy) == (46, 28, 0)
    assert s.dof == 42 - sum(6 - d for d in RELATIVE_DOF.values())
    assert mech.group_rows("normalization") == (0, 1, 2, 3)
    layout = spatial.Layout.from_mechanism(mech)
    C = np.asarray(jaxmbs.constraint_jacobian(mech, jnp.asarray(q), 0.0, mech.params))
    for joint in joints:
        rows = list(mech.group_rows(joint.name))
        assert len(rows) == 6 - RELATIVE_DOF[joint.name]
        # With body i held, the rows constrain body j's velocities: their rank is the
        # number of freedoms the joint takes away.
        moving = joint.body_i if joint.body_j is None else joint.body_j
        cols = layout.coordinates(moving)
        assert np.linalg.matrix_rank(C[rows, cols], tol=1e-9) == len(rows), joint.name
        # The joint alone on the frames of q gives the builder's rows.
        q_moved = jnp.asarray(q) + 0.01 * jnp.sin(jnp.arange(46.0))
        own = joint.residual(layout.frames(q_moved), mech.params)
        builder = mech.constraints(0.0, q_moved, mech.params)[np.asarray(rows)]
        assert_close(own, builder, 0, 1e-15, joint.name)
        assert float(jnp.max(jnp.abs(own))) > 1e-4  # moved off the joint


def test_joints_hold_along_a_motion(chain):
    rng = np.random.default_rng(SEED)
    mech, joints, q_design = chain
    q0, qd0 = jaxmbs.assemble(mech, q_design, rng.normal(size=46))
    ts = jnp.linspace(0.0, 1.0, 21)
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, 1.0), saveat=ts, stabilization="none", rtol=1e-10, atol=1e-10
    )
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    residual = jax.jit(jax.vmap(lambda q: mech.constraints(0.0, q, mech.params)))(sol.q)
    for joint in joints:
        rows = list(mech.group_rows(joint.name))
        assert float(jnp.max(jnp.abs(residual[:, rows]))) < 1e-8, joint.name
    assert float(jnp.max(sol.velocity_residual)) < 1e-8
    assert_close(sol.energy, sol.energy[0], 0, 1e-8 * float(jnp.max(jnp.abs(sol.energy))), "E")
    # Every body moved, so every joint was exercised; the Euler parameters stayed unit.
    layout = spatial.Layout.from_mechanism(mech)
    travel = jnp.ptp(sol.q, axis=0)
    assert min(float(jnp.max(travel[layout.coordinates(k)])) for k in range(7)) > 1e-2
    norms = jnp.linalg.norm(layout.euler_parameters(sol.q)[:, ::2], axis=-1)
    assert float(jnp.max(jnp.abs(norms - 1))) < 1e-8
