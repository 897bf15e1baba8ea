"""KKT and QR null-space formulations agree with each other and with an independent
hand-derived NumPy implementation; redundancy is detected and harmless."""

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORMULATION_RTOL, assert_close

import jaxmbs
from jaxmbs.models import chain, fourbar, slider_crank

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "benchmarks"))
import numpy_baseline as reference  # noqa: E402

SEED = 20261122  # every test draws from its own generator with this seed


def random_states(mech, make_state, count, rng):
    """Consistent (t, q, q̇) at random crank angles, speeds and times (drawn from `rng`)."""
    states = []
    for _ in range(count):
        angle, speed, t = rng.uniform(0, 2 * np.pi), rng.uniform(-5, 5), rng.uniform(0, 3)
        states.append((t, *make_state(mech, angle, speed, t)))
    return states


@jax.jit
def both_formulations(mech, t, q, qd):
    return {
        m: jaxmbs.accelerations_and_multipliers(mech, q, qd, t, method=m) for m in ("kkt", "qr")
    }


def fourbar_state(mech, angle, speed, t):
    return fourbar.initial_state(mech, angle, speed)


def slider_state(mech, angle, speed, t):
    if mech.n_holonomic == 9:  # driven: the drive fixes angle and speed at time t
        return slider_crank.initial_state(mech, t0=t)
    return slider_crank.initial_state(mech, angle, speed)


CASES = {
    "fourbar": (fourbar.fourbar, fourbar_state),
    "fourbar-redundant": (lambda: fourbar.fourbar(redundant=True), fourbar_state),
    "slider-crank": (slider_crank.slider_crank, slider_state),
    "slider-crank-driven": (lambda: slider_crank.slider_crank(driven=True), slider_state),
}


@pytest.mark.parametrize("case", CASES)
def test_kkt_and_qr_agree(case):
    make, state = CASES[case]
    mech = make()
    for t, q, qd in random_states(mech, state, 8, np.random.default_rng(SEED)):
        out = both_formulations(mech, t, q, qd)
        (qdd_k, lam_k), (qdd_q, lam_q) = out["kkt"], out["qr"]
        scale = max(1.0, float(jnp.max(jnp.abs(qdd_k))))
        assert_close(qdd_q, qdd_k, 0, FORMULATION_RTOL * scale, "q̈ QR vs KKT")
        assert_close(
            lam_q, lam_k, 0, FORMULATION_RTOL * max(1.0, float(jnp.max(jnp.abs(lam_k)))), "λ"
        )
        # The equations themselves: M q̈ + Cᵀλ = Q and C q̈ = Γ.
        p = mech.params
        M, Q = mech.mass_matrix(q, p), mech.forces(t, q, qd, p)
        C = jaxmbs.constraint_jacobian(mech, q, t, p)
        gamma = jaxmbs.acceleration_rhs(mech, q, qd, t, p)
        assert_close(M @ qdd_q + C.T @ lam_q, Q, 0, 1e-10 * scale, "dynamic equilibrium")
        assert_close(C @ qdd_q, gamma, 0, 1e-10 * scale, "acceleration constraints")


def test_against_hand_derived_numpy_reference():
    """Independent check of signs: hand-written Φ_q and Γ, QR null space in NumPy."""
    mech = fourbar.fourbar()
    ref = reference.fourbar_model()
    rng = np.random.default_rng(SEED)
    for _, q, qd in random_states(mech, fourbar_state, 5, rng):
        qdd, lam = jaxmbs.accelerations_and_multipliers(mech, q, qd, 0.0)
        q_np, qd_np = np.asarray(q), np.asarray(qd)
        assert_close(qdd, reference.accelerations(ref, q_np, qd_np), 0, 1e-10, "q̈ vs reference")
        # Row signs of Φ differ between the two; the generalized reactions Cᵀλ do not.
        C_ref, _ = reference.jacobian_and_gamma(ref, q_np, qd_np)
        C = jaxmbs.constraint_jacobian(mech, q, 0.0, mech.params)
        assert_close(C.T @ lam, C_ref.T @ reference.multipliers(ref, q_np, qd_np), 0, 1e-10, "Cᵀλ")
    mech = chain.chain(4)
    ref = reference.chain_model(4)
    q, qd = chain.initial_state(mech, 0.7)
    qd = jaxmbs.project_velocities(mech, q, jnp.asarray(rng.normal(size=12)), 0.0, mech.params)
    qdd = jaxmbs.accelerations(mech, q, qd, 0.0)
    assert_close(
        qdd, reference.accelerations(ref, np.asarray(q), np.asarray(qd)), 0, 1e-10, "chain q̈"
    )


def test_redundant_fourbar_structure_and_reactions():
    plain, redundant = fourbar.fourbar(), fourbar.fourbar(redundant=True)
    assert (plain.structure.rank, plain.structure.redundancy, plain.structure.dof) == (8, 0, 1)
    s = redundant.structure
    assert (s.n_holonomic, s.rank, s.redundancy, s.dof) == (9, 8, 1, 1)
    q, qd = fourbar.initial_state(plain, 1.1, -3.0)
    qdd_p, lam_p = jaxmbs.accelerations_and_multipliers(plain, q, qd, 0.0)
    for method in ("kkt", "qr"):
        qdd_r, lam_r = jaxmbs.accelerations_and_multipliers(redundant, q, qd, 0.0, method=method)
        assert_close(qdd_r, qdd_p, 0, 1e-10, "redundant q̈")
        C_r = jaxmbs.constraint_jacobian(redundant, q, 0.0, redundant.params)
        C_p = jaxmbs.constraint_jacobian(plain, q, 0.0, plain.params)
        # Generalized reactions are unique; λ is the minimum-norm one, so it differs.
        assert_close(C_r.T @ lam_r, C_p.T @ lam_p, 0, 1e-9, "Cᵀλ")
        assert abs(float(lam_r[-1])) > 1e-3
        assert float(jnp.linalg.norm(lam_r)) < float(jnp.linalg.norm(lam_p))
        # Minimum norm: λ lies in the range of C (orthogonal to its null space).
        null = jnp.linalg.svd(C_r.T)[2][-1]  # left null vector of Cᵀ (redundancy 1)
        assert abs(float(null @ lam_r)) < 1e-9 * float(jnp.linalg.norm(lam_r))


def test_redundant_fourbar_same_motion():
    plain, redundant = fourbar.fourbar(), fourbar.fourbar(redundant=True)
    q0, qd0 = fourbar.initial_state(plain)
    ts = jnp.linspace(0, 2.0, 5)
    a = jaxmbs.simulate(plain, q0, qd0, (0.0, 2.0), saveat=ts, rtol=1e-10, atol=1e-10)
    b = jaxmbs.simulate(redundant, q0, qd0, (0.0, 2.0), saveat=ts, rtol=1e-10, atol=1e-10)
    assert_close(b.q, a.q, 0, 1e-9, "trajectory")
    assert float(jnp.max(b.position_residual)) < 1e-10
