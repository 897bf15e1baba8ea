"""Coordinate maps x = f(θ) (Attia 2005 §6): M_θ = JᵀMJ, Q_θ = Jᵀ(Q − M J̇θ̇), pulled-back
constraints; checked analytically, against the mechanism in x, and for two different x."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORMULATION_RTOL, assert_close

import jaxmbs
from jaxmbs.model.joints import planar
from jaxmbs.models import pendulum
from jaxmbs.models import platform as pf

SEED = 61  # every test draws from its own generator with this seed


def angle_map(th, p):
    return p["rho"] * jnp.stack([jnp.cos(th[0]), jnp.sin(th[0])])


@pytest.mark.parametrize("keep", [(), None])
def test_pendulum_angle_analytic(keep):
    """A particle on a rod mapped to its angle: θ̈ = −(g/ρ) cos θ for any θ̇ (the centripetal
    part of ẍ is J̇θ̇). Keeping the rod constraint (identically satisfied, a zero row) does not
    change the motion: it is a redundant row."""
    mech = pendulum.mathematical_pendulum(m=1.3, rho=0.8)
    theta_mech = jaxmbs.map_coordinates(mech, angle_map, np.array([-1.0]), keep=keep)
    assert theta_mech.n_holonomic == (0 if keep == () else 1)
    assert theta_mech.structure.rank == 0 and theta_mech.structure.dof == 1
    for th, thd in np.random.default_rng(SEED).uniform(-3, 3, (5, 2)):
        q, qd = jnp.array([th]), jnp.array([thd])
        M = theta_mech.mass_matrix(q, theta_mech.params)
        assert_close(M, [[1.3 * 0.8**2]], 1e-14)
        for method in ("qr", "kkt"):
            qdd = jaxmbs.accelerations(theta_mech, q, qd, 0.0, method=method)
            assert_close(qdd, [-9.81 / 0.8 * np.cos(th)], 1e-12, 1e-12)
        E = theta_mech.energy(q, qd)
        assert_close(E, 0.5 * 1.3 * 0.64 * thd**2 + 1.3 * 9.81 * 0.8 * np.sin(th), 1e-13)


def test_constraints_written_in_new_coordinates():
    """A rod constraint given in θ (`constraints=`) instead of pulled back: same motion."""
    mech = pendulum.mathematical_pendulum(m=1.3, rho=0.8)

    def shifted(th, p):  # x = θ + (0.1, −0.2): a translated frame
        return th + jnp.array([0.1, -0.2])

    def rod(t, th, p):
        return jnp.atleast_1d(jnp.sum(shifted(th, p) ** 2) - p["rho"] ** 2)

    x0 = np.array([0.8 * np.cos(-1.0), 0.8 * np.sin(-1.0)])
    theta0 = x0 - np.array([0.1, -0.2])
    moved = jaxmbs.map_coordinates(
        mech, shifted, theta0, keep=(), constraints=rod, constraints_name="rod"
    )
    assert moved.constraint_groups == (("rod", (0,)),)
    theta0, qd = jaxmbs.assemble(moved, theta0, np.array([0.3, 0.5]))
    mapped, original = _both(moved, theta0, qd), _both(mech, shifted(theta0, None), qd)
    assert_close(mapped[0], original[0], 1e-13, 1e-13, what="accelerations")
    assert_close(mapped[1], original[1], 1e-13, 1e-13, what="multiplier")


@pytest.fixture(scope="module")
def platform_models():
    particles = pf.particles()
    absolute = pf.absolute()
    joint = pf.joint()
    via_absolute = jaxmbs.map_coordinates(
        absolute, pf.chain_absolute, pf.home_joint_angles(joint.params), keep=("A2", "A3")
    )
    return particles, absolute, joint, via_absolute


def random_joint_states(joint, count, rng):
    """Consistent (θ, θ̇): the three leg-1 angles perturbed, the loops closed by Newton."""
    home = pf.home_joint_angles(joint.params)
    states = []
    for _ in range(count):
        guess = home.copy()
        guess[:3] += rng.uniform(-0.15, 0.15, 3)
        states.append(jaxmbs.assemble(joint, guess, rng.normal(size=7), fixed=(0, 1, 2)))
    return states


def along_path(f, theta, theta_dot, theta_ddot):
    """ẍ = d²/dt² f(θ + t θ̇ + t²/2 θ̈) at t = 0: an independent route to Jθ̈ + J̇θ̇."""
    return jax.jacfwd(jax.jacfwd(lambda t: f(theta + t * theta_dot + t**2 / 2 * theta_ddot)))(0.0)


@jax.jit
def _both(mech, q, qd):
    return jaxmbs.accelerations_and_multipliers(mech, q, qd, 0.0)


def test_joint_coordinates_reproduce_the_particle_and_absolute_mechanisms(platform_models):
    """At random consistent states: (1) ẍ = Jθ̈ + J̇θ̇ equals the particle mechanism's own
    accelerations; (2) θ̈ is the same whether θ is mapped from particles or from absolute
    coordinates (the map is generic); (3) the cut-joint multipliers ν of eq 6.8 equal the
    reactions of the same joints in both mechanisms in x."""
    particles, absolute, joint, via_absolute = platform_models
    chain = jax.jit(lambda th: pf.particle_map(th, joint.params))
    cut_x = [r for g in ("A2", "A3") for r in particles.group_rows(g)]
    cut_abs = [r for g in ("A2", "A3") for r in absolute.group_rows(g)]
    for th, thd in random_joint_states(joint, 2, np.random.default_rng(SEED)):
        thdd, nu = _both(joint, th, thd)
        x, xd = jax.jvp(chain, (th,), (thd,))
        xdd = along_path(chain, th, thd, thdd)
        xdd_direct, lam = _both(particles, x, xd)
        scale = float(jnp.max(jnp.abs(xdd_direct)))
        assert_close(xdd, xdd_direct, 0, FORMULATION_RTOL * scale, what="particle q̈")
        assert_close(nu, lam[jnp.asarray(cut_x)], 0, 1e-9 * scale, what="cut reactions")

        thdd_abs, nu_abs = _both(via_absolute, th, thd)
        assert_close(thdd_abs, thdd, 0, FORMULATION_RTOL * float(jnp.max(jnp.abs(thdd))))
        assert_close(nu_abs, nu, 0, 1e-9 * scale, what="cut reactions via absolute")
        q_abs, qd_abs = jax.jvp(lambda t: pf.chain_absolute(t, joint.params), (th,), (thd,))
        _, lam_abs = _both(absolute, q_abs, qd_abs)
        assert_close(lam_abs[jnp.asarray(cut_abs)], nu, 0, 1e-9 * scale, what="absolute λ")


def test_pfaffian_constraints_pull_back():
    """A sled with a knife edge (ψ linear in q̇) in nonlinear coordinates x = θ₀ + θ₁²/2,
    y = θ₁, φ = θ₂: the mapped mechanism reproduces the sled's accelerations and multiplier."""

    def push(t, q, qd, p):
        return jnp.array([1.0, 0.5, 0.2]) - 0.1 * qd

    sled = planar.planar_mechanism(
        [planar.Body("sled", 2.0, 0.3)],
        [planar.KnifeEdge("blade", 0, (0.1, 0.0))],
        gravity=(0.0, 0.0),
        applied_forces=push,
        reference_q=np.array([0.0, 0.0, 0.3]),
    )

    def f(th, p):
        return jnp.stack([th[0] + th[1] ** 2 / 2, th[1], th[2]])

    mapped = jaxmbs.map_coordinates(sled, f, np.array([0.0, 0.0, 0.3]))
    assert (mapped.n_holonomic, mapped.n_pfaffian) == (0, 1)
    assert mapped.constraint_groups == (("blade", (0,)),)
    rng = np.random.default_rng(SEED)
    for _ in range(3):
        th, thd = jaxmbs.assemble(mapped, rng.normal(size=3), rng.normal(size=3))
        thdd, nu = _both(mapped, th, thd)
        x, xd = jax.jvp(lambda t: f(t, None), (th,), (thd,))
        xdd, lam = _both(sled, x, xd)
        assert_close(along_path(lambda t: f(t, None), th, thd, thdd), xdd, 1e-12, 1e-13)
        assert_close(nu, lam, 1e-12, 1e-13)


def test_map_errors(platform_models):
    particles = platform_models[0]
    home = pf.home_joint_angles(particles.params)
    with pytest.raises(ValueError, match="unknown constraint groups.*nope"):
        jaxmbs.map_coordinates(particles, lambda th, p: jnp.zeros(16), home, keep=("nope",))
    with pytest.raises(ValueError, match=r"must return shape \(16,\)"):
        jaxmbs.map_coordinates(particles, lambda th, p: th, home)

    def redundant(th, p):  # θ₁ and θ₂,₁ enter only as their sum: not independent
        return pf.particle_map(th.at[0].add(th[1]).at[1].set(0.0), p)

    with pytest.raises(ValueError, match="rank-deficient"):
        jaxmbs.map_coordinates(particles, redundant, home, keep=("A2", "A3"))
    with pytest.raises(ValueError, match="needs n"):
        jaxmbs.map_coordinates(particles, redundant)
