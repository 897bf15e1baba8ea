"""Bodies made of equivalent particles move exactly like the same bodies in (x, y, φ).

Free rigid body (gravity, an off-centre force, a couple), physical pendulum (rod with an
off-centre centre of mass) and the four-bar, each simulated 10 s in particle coordinates and
in absolute coordinates; the particle positions implied by the absolute solution must match
the particle solution to integration accuracy. The pendulum is also mapped to its angle
(open chain, Attia 2005 eq 6.4: no constraint left).
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.model.joints import particles as pt
from jaxmbs.model.joints import planar
from jaxmbs.models import fourbar, pendulum

T = 10.0
TOL = 1e-11
TS = jnp.linspace(0.0, T, 101)
#: Agreement of two formulations integrated at TOL over 10 s, relative to the motion's size.
AGREE = 1e-8


def run(mech, q0, qd0):
    return jaxmbs.simulate(
        mech, q0, qd0, (0.0, T), saveat=TS, rtol=TOL, atol=TOL, solver=diffrax.Dopri8()
    )


def relative_deviation(a, b) -> float:
    a, b = np.asarray(a), np.asarray(b)
    return float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))


# --- free rigid body ---------------------------------------------------------------------------

LOCAL = np.array([[0.4, 0.1], [-0.3, 0.35], [-0.2, -0.4]])  # primaries, body frame
R_G = np.array([0.02, -0.03])
MASS, INERTIA = 2.0, 0.17
P_LOCAL = np.array([0.3, 0.2])  # where the force acts
FORCE, TORQUE = np.array([0.5, 18.0]), 0.05


def test_free_body_matches_absolute_coordinates():
    body = pt.PlanarBody("body", ("P1", "P2", "P3"), LOCAL, MASS, INERTIA, R_G)
    assert np.all(np.asarray(body.masses(None)) > 0)
    system = pt.ParticleSystem([body])
    q_start = np.array([0.0, 0.0, 0.3])
    qd_start = np.array([1.0, 2.0, 3.0])

    def primaries(q):  # particle coordinates of the body at absolute pose q
        return jnp.concatenate([planar.point(q, 0, jnp.asarray(s - R_G)) for s in LOCAL])

    x0, xd0 = jax.jvp(primaries, (jnp.asarray(q_start),), (jnp.asarray(qd_start),))
    particle_mech = system.mechanism(
        None,
        gravity=(0.0, -9.81),
        loads=[pt.PointForce("body", P_LOCAL, FORCE), pt.Couple("body", TORQUE)],
        reference_q=x0,
    )

    def load(t, q, qd, p):  # virtual work of the force at P, plus the couple on φ
        work = jax.grad(lambda q_: jnp.asarray(FORCE) @ planar.point(q_, 0, P_LOCAL - R_G))(q)
        return work + jnp.array([0.0, 0.0, TORQUE])

    absolute = planar.planar_mechanism(
        [planar.Body("body", MASS, INERTIA)], [], applied_forces=load, reference_q=q_start
    )
    sol_p = run(particle_mech, x0, xd0)
    sol_a = run(absolute, q_start, qd_start)
    assert np.ptp(np.asarray(sol_a.q[:, 2])) > 1.0  # it swings about the force's line
    implied = jax.vmap(primaries)(sol_a.q)
    assert relative_deviation(sol_p.q, implied) < AGREE
    assert float(jnp.max(sol_p.position_residual)) < 1e-10


# --- physical pendulum -------------------------------------------------------------------------

M_ROD, J_ROD, LENGTH, RHO = 1.5, 0.11, 1.2, 0.45  # centre of mass at RHO from the pivot
AMPLITUDE = 2.0  # rad from the hanging position


@pytest.fixture(scope="module")
def pendulum_reference():
    mech = pendulum.physical_pendulum(m=M_ROD, J=J_ROD, rho=RHO)
    q0, qd0 = pendulum.initial_state(mech, AMPLITUDE)
    sol = run(mech, q0, qd0)
    gamma = sol.q[:, 2]
    tip = LENGTH * jnp.stack([jnp.cos(gamma), jnp.sin(gamma)], axis=1)  # particle P
    return tip, float(gamma[0])


def pendulum_particles():
    rod = pt.Rod("rod", ("O", "P"), LENGTH, M_ROD, J_ROD, center=RHO)
    return pt.ParticleSystem([rod], ground={"O": (0.0, 0.0)})


def test_pendulum_matches_absolute_coordinates(pendulum_reference):
    tip, gamma0 = pendulum_reference
    x0 = LENGTH * np.array([np.cos(gamma0), np.sin(gamma0)])
    mech = pendulum_particles().mechanism(None, gravity=(0.0, -9.81), reference_q=x0)
    assert mech.n == 2 and mech.n_holonomic == 1  # the pivot is the ground particle O
    sol = run(mech, x0, np.zeros(2))
    assert relative_deviation(sol.q, tip) < AGREE


def test_pendulum_in_joint_angle_is_an_open_chain(pendulum_reference):
    """Rod particles mapped to the rod angle: eq 6.4, no constraint left (rigidity holds by
    construction and is not kept)."""
    tip, gamma0 = pendulum_reference
    particle_mech = pendulum_particles().mechanism(
        None, gravity=(0.0, -9.81), reference_q=LENGTH * np.array([1.0, 0.0])
    )
    angle_mech = jaxmbs.map_coordinates(
        particle_mech,
        lambda th, p: LENGTH * jnp.stack([jnp.cos(th[0]), jnp.sin(th[0])]),
        np.array([gamma0]),
        keep=(),
        coordinate_names=("theta",),
    )
    assert angle_mech.n == 1 and angle_mech.constraints is None
    inertia = angle_mech.mass_matrix(jnp.array([0.3]), None)[0, 0]
    assert abs(float(inertia) - (J_ROD + M_ROD * RHO**2)) < 1e-12  # Jᵀ M J = J_O
    sol = run(angle_mech, np.array([gamma0]), np.zeros(1))
    implied = LENGTH * jnp.stack([jnp.cos(sol.q[:, 0]), jnp.sin(sol.q[:, 0])], axis=1)
    assert relative_deviation(implied, tip) < AGREE


# --- four-bar ----------------------------------------------------------------------------------


def test_fourbar_matches_absolute_coordinates():
    mech = fourbar.fourbar()
    p = {k: float(v) for k, v in mech.params.items()}
    q0, qd0 = fourbar.initial_state(mech)
    sol_a = run(mech, q0, qd0)

    def joints_bc(q):  # B at the crank's end, C at the coupler's end
        return jnp.concatenate(
            [
                planar.point(q, 0, jnp.array([p["l1"] / 2, 0.0])),
                planar.point(q, 1, jnp.array([p["l2"] / 2, 0.0])),
            ]
        )

    def rod(name, ends, length, mass):
        return pt.Rod(name, ends, length, mass, mass * length**2 / 12)

    system = pt.ParticleSystem(
        [
            rod("crank", ("O2", "B"), p["l1"], p["m1"]),
            rod("coupler", ("B", "C"), p["l2"], p["m2"]),
            rod("rocker", ("C", "O4"), p["l3"], p["m3"]),
        ],
        ground={"O2": (0.0, 0.0), "O4": (p["l0"], 0.0)},
    )
    x0, xd0 = jax.jvp(joints_bc, (q0,), (qd0,))
    particle_mech = system.mechanism(None, gravity=(0.0, -p["g"]), reference_q=x0)
    assert (particle_mech.n, particle_mech.n_holonomic) == (4, 3)
    sol_p = run(particle_mech, x0, xd0)
    assert relative_deviation(sol_p.q, jax.vmap(joints_bc)(sol_a.q)) < AGREE
    # Same energy (the particle masses reproduce m, r_G and J of every link).
    assert relative_deviation(sol_p.energy, sol_a.energy) < AGREE
