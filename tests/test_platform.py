"""The 3-DOF platform manipulator (Attia 2005, §7) in three coordinate choices: joint angles
(7 coordinates, 4 cut-joint rows), particles (16, 13) and absolute (21, 18) coordinates agree
over 5 s; the energy balance holds with the work of the 10 N force; the gradient of the final
platform position with respect to the platform mass matches central finite differences."""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import assert_close

import jaxmbs
from jaxmbs.models import MODELS
from jaxmbs.models import platform as pf

T = 5.0
TOL = 1e-12
TS = jnp.linspace(0.0, T, 51)
KINDS = ("joint", "particles", "absolute")


def simulate(mech, q0, qd0, t1=T, saveat=TS, **kwargs):
    # No stabilisation: the drift at this tolerance is far below the agreement checked, and
    # the compiled program is half the size.
    return jaxmbs.simulate(
        mech,
        q0,
        qd0,
        (0.0, t1),
        saveat=saveat,
        rtol=TOL,
        atol=TOL,
        solver=diffrax.Dopri8(),
        stabilization="none",
        **kwargs,
    )


@pytest.fixture(scope="module")
def mechanisms():
    return {kind: getattr(pf, kind)() for kind in KINDS}


@pytest.fixture(scope="module")
def solutions(mechanisms):
    out = {}
    for kind, mech in mechanisms.items():
        sol = simulate(mech, *pf.initial_state(mech))
        out[kind] = (mech, sol, np.asarray(pf.platform_pose(mech, sol.q)))
    return out


def test_coordinate_counts(mechanisms):
    """n, constraints and degrees of freedom of §7 (and its 16×16 particle mass matrix)."""
    expected = {"joint": (7, 4), "particles": (16, 13), "absolute": (21, 18)}
    for kind, (n, m) in expected.items():
        mech = mechanisms[kind]
        assert (mech.n, mech.n_holonomic) == (n, m)
        assert mech.structure.rank == m and mech.structure.dof == 3
    M = np.asarray(pf.SYSTEM.mass_matrix(pf.DEFAULTS))
    assert M.shape == (16, 16)
    # Sparse: the 8 particles' diagonal blocks and the 6 mid-points between moving particles
    # (rods 2, 4, 5, 6, 7 and the platform's C₁C₃) couple pairs, each a 2×2 diagonal block.
    scale = np.max(np.abs(M))
    assert np.count_nonzero(np.abs(M) > 1e-12 * scale) == 2 * (8 + 2 * 6)
    assert_close(M, M.T, 0, 1e-14 * scale, "symmetry")


def test_trajectories_agree(solutions):
    """Platform pose (x, y, φ) to 1e-8 over 5 s in the three coordinate choices."""
    reference = solutions["joint"][2]
    assert np.ptp(reference[:, 1]) > 0.3 and np.ptp(reference[:, 0]) > 0.1  # it moves
    for kind in ("particles", "absolute"):
        assert_close(solutions[kind][2], reference, 0, 1e-8, what=kind)
    for _, sol, _ in solutions.values():  # unstabilised: drift and dense-output error only
        assert float(jnp.max(sol.position_residual)) < 1e-9
        assert float(jnp.max(sol.velocity_residual)) < 1e-9


def test_energy_balance(solutions):
    """E(t) − E(0) = F (x_G(t) − x_G(0)): the work of the constant horizontal force."""
    for kind, (mech, sol, pose) in solutions.items():
        work = mech.params["F"] * (pose[:, 0] - pose[0, 0])
        energy = np.asarray(sol.energy)
        assert np.ptp(energy) > 1.0, kind  # energy is exchanged with the force's work
        # 1e-10 of the energy scale (total weight × 1 m ≈ 90 J; measured 1.1e-9 J).
        p = mech.params
        scale = p["g"] * (6 * p["m_rod"] + p["m_platform"]) * 1.0
        assert_close(energy - energy[0], work, 0, 1e-10 * scale, what=kind)


def test_gradient_wrt_platform_mass(mechanisms):
    """d(platform position at 1 s)/d(platform mass), forward mode vs central differences.

    In particle coordinates the mass enters through the particle masses of eq 2.1."""
    mech = mechanisms["particles"]
    q0, qd0 = pf.initial_state(mech)

    def final_position(mass):
        params = {**mech.params, "m_platform": mass}
        # Forward mode: one parameter (diffrax's ForwardMode cannot wrap the projection solver).
        sol = simulate(mech, q0, qd0, 1.0, None, params=params, adjoint=diffrax.ForwardMode())
        return pf.platform_pose(mech, sol.q[-1], params)[:2]

    # One compiled program: f at m − h, m, m + h and its forward-mode derivative at each.
    h = 1e-3
    masses = jnp.array([3.0 - h, 3.0, 3.0 + h])
    values, derivatives = jax.jit(
        jax.vmap(lambda m: jax.jvp(final_position, (m,), (jnp.ones_like(m),)))
    )(masses)
    fd = (values[2] - values[0]) / (2 * h)
    assert np.min(np.abs(np.asarray(fd))) > 1e-3  # a real dependence
    assert_close(derivatives[1], fd, 1e-6, 1e-9)


def test_registered_models(mechanisms):
    assert {"platform", "platform-particles", "platform-joint"} <= set(MODELS)
    mech, q0, qd0 = MODELS["platform-joint"]()
    assert mech.n == 7 and q0.shape == (7,) and float(jnp.max(jnp.abs(qd0))) < 1e-14  # at rest
    assert_close(q0, pf.initial_state(mechanisms["joint"])[0], 0, 1e-15)


def test_float32_joint_coordinates(solutions):
    """float32 runs (M_θ = JᵀMJ symmetric to round-off) and gives float32-accurate θ̈."""
    _, sol64, _ = solutions["joint"]
    q, qd, qdd = (np.asarray(a[20]) for a in (sol64.q, sol64.qd, sol64.qdd))
    jax.config.update("jax_enable_x64", False)
    try:
        mech = pf.joint()
        q32, qd32 = jnp.asarray(q, jnp.float32), jnp.asarray(qd, jnp.float32)
        qdd32 = jax.jit(lambda q_, qd_: jaxmbs.accelerations(mech, q_, qd_, 0.0))(q32, qd32)
        assert qdd32.dtype == jnp.float32
        assert_close(qdd32, qdd, 0, 1e-4 * np.max(np.abs(qdd)))
    finally:
        jax.config.update("jax_enable_x64", True)
