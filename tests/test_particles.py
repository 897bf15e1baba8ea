"""Equivalent particle systems (Attia 2005, §2–§5): exact mass properties, force and couple
distribution, the constant overlapping mass matrix, and clear errors for bad geometry."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

from jaxmbs.model.joints import particles as pt

SEED = 2005  # every test draws from its own generator with this seed
EXACT = 1e-12  # relative accuracy of the reproduced mass properties


def random_inertia_tensor(rng):
    """A physical centroidal inertia tensor (triangle inequality on principal moments)."""
    second = rng.uniform(0.1, 1.0, 3)  # principal second moments Σ m x², all positive
    R = np.linalg.qr(rng.normal(size=(3, 3)))[0]
    S = R @ np.diag(second) @ R.T
    return np.trace(S) * np.eye(3) - S


def random_planar_body(rng):
    local = rng.uniform(-1, 1, (3, 2))
    return pt.PlanarBody(
        "b",
        ("1", "2", "3"),
        local,
        rng.uniform(0.5, 5),
        rng.uniform(0.05, 1),
        rng.uniform(-0.3, 0.3, 2),
    )


def cross2(a, b):
    return a[..., 0] * b[..., 1] - a[..., 1] * b[..., 0]


def random_body(kind, rng):
    """A random body with its centroidal inertia (scalar in the plane, tensor in space)."""
    if kind == "planar":
        body = random_planar_body(rng)
        return body, float(body.inertia)
    if kind == "rod":
        length, J = rng.uniform(0.2, 3), rng.uniform(0.01, 1)
        return pt.Rod("r", ("1", "2"), length, rng.uniform(0.5, 5), J, rng.uniform(0, length)), J
    J = random_inertia_tensor(rng)
    local = rng.uniform(-1, 1, (4, 3))
    return pt.SpatialBody(
        "s", ("1", "2", "3", "4"), local, rng.uniform(0.5, 5), J, rng.uniform(-0.3, 0.3, 3)
    ), J


@pytest.mark.parametrize("kind", ["planar", "rod", "spatial"])
def test_particles_reproduce_mass_centre_and_inertia(kind):
    """m, r_G and J_G to 1e-12 (relative) for 25 random bodies with reasonably placed
    particles (no particle mass beyond ±10 m: nearly collinear or coplanar primaries make
    the system ill-conditioned — that case is `test_singular_particle_positions_are_rejected`)."""
    rng = np.random.default_rng(SEED)
    accepted = 0
    while accepted < 25:
        body, J = random_body(kind, rng)
        body.check(None)
        masses = body.masses(None)
        if np.max(np.abs(masses)) > 10 * body.mass:
            continue
        accepted += 1
        m, r_g, J_g = pt.rigid_body_properties(masses, body.local_positions(None))
        assert_close(m, body.mass, EXACT, what="m")
        assert_close(r_g, body.local_center_of_mass(None), 0, EXACT, what="r_G")
        assert_close(J_g, J, 0, EXACT * np.max(np.abs(J)), what="J_G")


def test_rod_masses_closed_form():
    """Uniform rod, centre at mid-length: m/6 at each end and 2m/3 at the mid-point."""
    rod = pt.Rod("r", ("1", "2"), 2.0, 1.2, 1.2 * 4 / 12)
    assert_close(rod.masses(None), [0.2, 0.2, 0.8], 1e-14)


def test_mass_matrix_of_one_body_is_eq_4_3():
    """M₁ = m₁ + m₄/4 and M₃ = m₃ + m₄/4 on the diagonal, m₄/4 coupling particles 1 and 3."""
    rng = np.random.default_rng(SEED)
    body = random_planar_body(rng)
    m1, m2, m3, m4 = np.asarray(body.masses(None))
    M = np.asarray(pt.ParticleSystem([body]).mass_matrix(None))
    expected = np.zeros((3, 3))
    expected[0, 0], expected[1, 1], expected[2, 2] = m1 + m4 / 4, m2, m3 + m4 / 4
    expected[0, 2] = expected[2, 0] = m4 / 4
    assert_close(M, np.kron(expected, np.eye(2)), 1e-14, 1e-14)


def test_kinetic_energy_of_rigid_motion():
    """½ṙᵀMṙ = ½ m |v_G|² + ½ J ω² for a rigid velocity field (planar and spatial)."""
    rng = np.random.default_rng(SEED)
    body = random_planar_body(rng)
    system = pt.ParticleSystem([body])
    v, omega = rng.normal(size=2), rng.normal()
    s = np.asarray(body.primary_local(None)) - np.asarray(body.local_center_of_mass(None))
    rd = (v + omega * np.stack([-s[:, 1], s[:, 0]], axis=1)).reshape(-1)
    T = 0.5 * rd @ np.asarray(system.mass_matrix(None)) @ rd
    assert_close(T, 0.5 * body.mass * v @ v + 0.5 * body.inertia * omega**2, 1e-12)

    J = random_inertia_tensor(rng)
    body = pt.SpatialBody(
        "s", ("1", "2", "3", "4"), rng.uniform(-1, 1, (4, 3)), 2.5, J, (0.1, 0, -0.2)
    )
    s = np.asarray(body.primary_local(None)) - np.array([0.1, 0, -0.2])
    v, w = rng.normal(size=3), rng.normal(size=3)
    rd = (v + np.cross(w, s)).reshape(-1)
    T = 0.5 * rd @ np.asarray(pt.ParticleSystem([body]).mass_matrix(None)) @ rd
    assert_close(T, 0.5 * 2.5 * v @ v + 0.5 * w @ J @ w, 1e-12)


def test_shared_particles_overlap_in_mass_matrix():
    """Two rods sharing particle B (a revolute joint, §5): B's mass is the sum of both rods'
    end masses plus a quarter of each mid-point mass, and no joint constraint is needed."""
    rod1 = pt.Rod("r1", ("A", "B"), 1.0, 1.0, 1 / 12)
    rod2 = pt.Rod("r2", ("B", "C"), 2.0, 3.0, 0.5, center=0.7)
    system = pt.ParticleSystem([rod1, rod2], ground={"A": (0.0, 0.0)})
    assert system.moving == ("B", "C")
    M = np.asarray(system.mass_matrix(None))
    a, b = np.asarray(rod1.masses(None)), np.asarray(rod2.masses(None))
    assert_close(M[0, 0], a[1] + a[2] / 4 + b[0] + b[2] / 4, 1e-14)
    assert_close(M[0, 2], b[2] / 4, 1e-14)
    assert_close(M[2, 2], b[1] + b[2] / 4, 1e-14)
    mech = system.mechanism(None, gravity=(0.0, -9.81), reference_q=np.array([1.0, 0, 3.0, 0]))
    assert mech.n_holonomic == 2  # one rigidity row per rod, nothing for the shared joint


def test_force_distribution_reproduces_resultant_and_moment():
    rng = np.random.default_rng(SEED)
    for _ in range(10):
        body = random_planar_body(rng)
        point, force = rng.uniform(-1, 1, 2), rng.normal(size=2)
        alpha = body.affine_weights(point, None)
        f = np.asarray(alpha)[:, None] * force  # eq 3.2
        s = np.asarray(body.primary_local(None))
        assert_close(f.sum(axis=0), force, 0, 1e-12, what="resultant")
        assert_close(cross2(s, f).sum(), cross2(point, force), 0, 1e-12, what="moment")

        spatial = pt.SpatialBody(
            "s", ("1", "2", "3", "4"), rng.uniform(-1, 1, (4, 3)), 1.0, np.eye(3), (0.0, 0.0, 0.0)
        )
        point, force = rng.uniform(-1, 1, 3), rng.normal(size=3)
        f = np.asarray(spatial.affine_weights(point, None))[:, None] * force
        s = np.asarray(spatial.primary_local(None))
        assert_close(f.sum(axis=0), force, 0, 1e-12)
        assert_close(np.cross(s, f).sum(axis=0), np.cross(point, force), 0, 1e-12)

    rod = pt.Rod("r", ("1", "2"), 2.0, 1.0, 0.3)
    alpha = np.asarray(rod.affine_weights(jnp.array([0.5, 0.0]), None))
    assert_close(alpha, [0.75, 0.25], 1e-15)
    with pytest.raises(ValueError, match="off the rod axis"):
        rod.affine_weights(jnp.array([0.5, 0.1]), None)


def test_couple_distribution_has_zero_resultant_and_the_couple_moment():
    rng = np.random.default_rng(SEED)
    r = jnp.asarray(rng.normal(size=(3, 2)))
    f = np.asarray(pt.couple_forces(r, 2.5))
    assert_close(f.sum(axis=0), [0, 0], 0, 1e-14)
    assert_close(cross2(np.asarray(r), f).sum(), 2.5, 1e-14)
    # A rod: ±m_c/d normal to the rod (§3).
    f = np.asarray(pt.couple_forces(jnp.array([[0.0, 0.0], [0.0, 2.0]]), 3.0))
    assert_close(f, [[1.5, 0.0], [-1.5, 0.0]], 1e-15)
    r = jnp.asarray(rng.normal(size=(4, 3)))
    torque = rng.normal(size=3)
    f = np.asarray(pt.couple_forces(r, jnp.asarray(torque)))
    assert_close(f.sum(axis=0), [0, 0, 0], 0, 1e-13)
    assert_close(np.cross(np.asarray(r), f).sum(axis=0), torque, 1e-12, 1e-13)


def test_load_forces_are_the_virtual_work_of_the_distributed_forces():
    """Q from a point force and a couple on a free body: the resultant and the moment about
    the centre of mass are those of the applied load."""
    rng = np.random.default_rng(SEED)
    body = random_planar_body(rng)
    system = pt.ParticleSystem([body])
    q = jnp.asarray(rng.normal(size=6))  # any placement (the load is linear in it)
    point, force, torque = rng.uniform(-1, 1, 2), rng.normal(size=2), 0.7
    Q = system.load_forces(q, [pt.PointForce("b", point, force), pt.Couple("b", torque)], None)
    f = np.asarray(Q).reshape(3, 2)
    r = np.asarray(q).reshape(3, 2)
    P = np.asarray(system.point(q, "b", point, None))
    assert_close(f.sum(axis=0), force, 0, 1e-12)
    assert_close(cross2(r, f).sum(), cross2(P, force) + torque, 0, 1e-12)


def test_gradient_of_particle_masses_by_finite_differences():
    """The masses are differentiable in the body's parameters (used for design gradients)."""
    rng = np.random.default_rng(SEED)
    body = pt.PlanarBody("b", ("1", "2", "3"), "local", "m", "J")
    p = {"local": jnp.asarray(rng.uniform(-1, 1, (3, 2))), "m": 2.0, "J": 0.4}
    grad = jax.jacfwd(lambda J: body.masses({**p, "J": J}))(0.4)
    h = 1e-6
    fd = (body.masses({**p, "J": 0.4 + h}) - body.masses({**p, "J": 0.4 - h})) / (2 * h)
    assert_close(grad, fd, 1e-7, 1e-9)


def test_singular_particle_positions_are_rejected():
    collinear = pt.PlanarBody("flat", ("1", "2", "3"), [[0, 0], [1, 1], [3, 3]], 1.0, 0.2)
    with pytest.raises(ValueError, match="flat.*singular.*collinear"):
        collinear.check(None)
    with pytest.raises(ValueError, match="singular"):
        pt.ParticleSystem([collinear]).mechanism(None)
    coplanar = pt.SpatialBody(
        "plate", ("1", "2", "3", "4"), [[0, 0, 0], [1, 0, 0], [0, 1, 0], [1, 1, 0]], 1.0, np.eye(3)
    )
    with pytest.raises(ValueError, match="plate.*singular.*coplanar"):
        coplanar.check(None)
    with pytest.raises(ValueError, match="singular.*length"):
        pt.Rod("r", ("1", "2"), 0.0, 1.0, 0.1).check(None)


def test_indefinite_mass_matrix_is_rejected():
    """A wide body with little inertia needs negative particle masses: M is indefinite."""
    wide = pt.PlanarBody("wide", ("1", "2", "3"), [[-2, -1], [2, -1], [0, 2]], 1.0, 0.01)
    with pytest.raises(ValueError, match="not positive definite.*wide/"):
        pt.ParticleSystem([wide]).mechanism(None)


def test_topology_errors():
    rod = pt.Rod("r", ("A", "B"), 1.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="distinct particle names"):
        pt.Rod("r", ("A", "A"), 1.0, 1.0, 0.1)
    with pytest.raises(ValueError, match="unique"):
        pt.ParticleSystem([rod, rod])
    with pytest.raises(ValueError, match="belong to no body"):
        pt.ParticleSystem([rod], ground={"Z": (0.0, 0.0)})
    with pytest.raises(ValueError, match="unknown particle"):
        pt.ParticleSystem([rod]).mechanism(None, joints=[pt.Pin("pin", "Z", (0.0, 0.0))])
    with pytest.raises(ValueError, match="no body"):
        pt.ParticleSystem([rod]).mechanism(None, loads=[pt.Couple("nobody", 1.0)])
