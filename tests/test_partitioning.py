"""Projective criterion, choice of independent coordinates, and partitioned integration with
switching (Blajer, Schiehlen, Schirm 1994, §2–3 and §6).

The four-bar runs share their set-up with test_closing.py (`fourbar_cases`).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fourbar_cases import N_OUT, TOL, crank_at_o4, fig3, relative_energy_drift
from helpers import assert_close

import jaxmbs
from jaxmbs.models import fourbar_relative as fr
from jaxmbs.models import pendulum

# ------------------------------------------------------------------ projective criterion


def test_pendulum_criterion_is_eq_26():
    """cos²α of x, y, γ for the physical pendulum (eq 26), over γ ∈ [0, 2π) and several
    m, J, ρ; cos²β from eq 23b independently, so that cos²α + cos²β = 1 is a check. The SVD
    criterion is the same with M = I: it does not depend on m or J."""
    mech = pendulum.physical_pendulum()
    gamma = np.linspace(0.0, 2 * np.pi, 360, endpoint=False)
    cases = np.array([[1.0, 0.05, 0.5], [2.0, 0.07, 0.35], [0.3, 0.9, 1.7], [5.0, 1e-3, 0.2]])

    def one(g, m, J, rho):
        q = jnp.stack([rho * jnp.cos(g), rho * jnp.sin(g), g])
        p = {"m": m, "J": J, "rho": rho, "g": 9.81}
        alpha, beta = jaxmbs.projective_criterion(mech, q, params=p)
        return alpha, beta, jaxmbs.svd_criterion(mech, q, params=p)

    run = jax.jit(jax.vmap(jax.vmap(one, (0, None, None, None)), (None, 0, 0, 0)))
    alpha, beta, svd = run(jnp.asarray(gamma), *jnp.asarray(cases.T))
    for (m, J, rho), a, b, s in zip(cases, alpha, beta, svd, strict=True):
        share = m * rho**2 / (m * rho**2 + J)
        eq26 = np.stack([share * np.sin(gamma) ** 2, share * np.cos(gamma) ** 2,
                         np.full_like(gamma, J / (m * rho**2 + J))], axis=1)  # fmt: skip
        assert_close(a, eq26, 0.0, 1e-12, "cos²α vs eq 26")
        assert_close(a + b, np.ones_like(a), 0.0, 1e-12, "cos²α + cos²β")
        geometric = np.stack([rho**2 * np.sin(gamma) ** 2, rho**2 * np.cos(gamma) ** 2,
                              np.ones_like(gamma)], axis=1) / (1 + rho**2)  # fmt: skip
        assert_close(s, geometric, 0.0, 1e-12, "SVD criterion")


def test_pivoting_never_chooses_a_singular_set():
    """q1 = q2 = q3 and q4 = q5 (k = 2, M = I): cos²α = (1/3, 1/3, 1/3, 1/2, 1/2), so the two
    largest criteria pick q4 and q5, whose C_D is singular; pivoting takes q4 and then one of
    q1, q2, q3 (tied: round-off decides which)."""
    mech = jaxmbs.Mechanism(
        lambda q, p: jnp.eye(5, dtype=q.dtype),
        lambda t, q, qd, p: jnp.zeros_like(q),
        lambda t, q, p: jnp.stack([q[0] - q[1], q[1] - q[2], q[3] - q[4]]),
        reference_q=np.zeros(5),
    )
    q = jnp.zeros(5)
    alpha, _ = jaxmbs.projective_criterion(mech, q)
    assert_close(alpha, [1 / 3, 1 / 3, 1 / 3, 1 / 2, 1 / 2], 0.0, 1e-14, "cos²α")
    naive = np.sort(np.argsort(-np.asarray(alpha), kind="stable")[:2])
    assert naive.tolist() == [3, 4]
    assert float(jaxmbs.partition_criterion(mech, q, (3, 4))) < 1e-14  # singular C_D
    chosen = jaxmbs.independent_coordinates(mech, q)
    assert chosen[1] == 3 and chosen[0] in (0, 1, 2)
    C = np.asarray(jaxmbs.constraint_jacobian(mech, q, 0.0, None))
    assert abs(np.linalg.det(np.delete(C, chosen, axis=1))) > 0.5
    assert_close(jaxmbs.partition_criterion(mech, q, ("q0", "q3")), 1 / 3, 1e-12)


def test_fourbar_criterion_claims_of_fig_3():
    """α3 is the worst choice and singular at α1 = π/2, 3π/2; α1 and α2 take turns as the
    best; the projective criterion moves with the link masses, the SVD criterion does not."""
    mech = fr.fourbar_relative()
    alpha1 = np.linspace(0.0, 2 * np.pi, 73)
    qs = jnp.asarray(np.stack([fr.configuration(mech.params, a) for a in alpha1]))

    @jax.jit
    def criteria(qs, params):
        proj = jax.vmap(lambda q: jaxmbs.projective_criterion(mech, q, params=params))(qs)
        svd = jax.vmap(lambda q: jaxmbs.svd_criterion(mech, q, params=params))(qs)
        return proj, svd

    (alpha, beta), svd = criteria(qs, mech.params)
    assert_close(alpha + beta, np.ones_like(alpha), 0.0, 1e-12, "cos²α + cos²β")
    alpha = np.asarray(alpha)
    assert np.all(alpha[:, 2] <= alpha[:, :2].min(axis=1))
    for singular in (np.pi / 2, 3 * np.pi / 2):
        i = np.argmin(np.abs(alpha1 - singular))
        assert alpha[i, 2] < 1e-20 and alpha[i, :2].min() > 0.5
    best = np.argmax(alpha, axis=1)
    assert set(best) == {0, 1} and np.count_nonzero(np.diff(best)) >= 2
    heavy = {**mech.params, "m1": 8.0, "m3": 0.2}
    (alpha_heavy, _), svd_heavy = criteria(qs, heavy)
    assert np.max(np.abs(np.asarray(alpha_heavy) - alpha)) > 0.1
    assert_close(svd_heavy, svd, 0.0, 1e-14, "SVD criterion is blind to masses")


# ------------------------------------------------------------------ partitioned integration


def test_partitioned_matches_qr_over_10_s():
    mech, q0, qd0, ts, qr = fig3()
    sol = jaxmbs.simulate_partitioned(
        mech, q0, qd0, (0.0, 10.0), saveat=ts, rtol=TOL, atol=TOL, throw=False
    )
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    assert bool(qr.result == jaxmbs.RESULTS.successful)
    assert int(sol.stats["independent"][0, 0]) == 0  # α1: the best at the start (Fig. 3)
    assert np.max(np.abs(np.asarray(qr.q[:, 0]))) > 60  # ten turns of the crank
    assert_close(sol.q, qr.q, 0.0, 1e-7, "q")
    assert_close(sol.qd, qr.qd, 0.0, 5e-7, "q̇")
    assert np.max(sol.position_residual) < 1e-12
    assert np.max(sol.velocity_residual) < 1e-12  # q̇ = Dᵀv_I + η: consistent by construction


def test_switching_through_alpha1_singularities():
    """Partitioned run through four configurations singular for α1 (sin α3 = 0)."""
    mech, params, q0, unit_qd = crank_at_o4()
    ts = jnp.linspace(0.0, 1.3, N_OUT)

    def run(switching):
        return jaxmbs.simulate_partitioned(
            mech, q0, -4.0 * unit_qd, (0.0, 1.3), params=params, saveat=ts, rtol=TOL, atol=TOL,
            independent=("alpha1",), switching=switching, throw=False,
        )  # fmt: skip

    sol = run(True)
    q = np.asarray(sol.q)
    crossings = np.count_nonzero(np.diff(np.sign(np.sin(q[:, 2]))))
    assert crossings >= 4  # the motion passes sin α3 = 0 (singular for α1) four times
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    assert int(sol.stats["num_switches"]) >= 2 * crossings
    assert set(np.asarray(sol.stats["independent"][:, 0]).tolist()) >= {0, 1}
    assert np.max(sol.position_residual) < 1e-10
    assert relative_energy_drift(mech, sol, params) < 1e-8

    stuck = run(False)
    assert bool(stuck.result == jaxmbs.RESULTS.singular_configuration)
    finite = np.all(np.isfinite(np.asarray(stuck.q)), axis=1)
    first_singular = np.argmax(np.abs(np.diff(np.sign(np.sin(q[:, 2])))) > 0) + 1
    assert 0 < np.count_nonzero(finite) <= first_singular + 1  # stops there, no garbage after
    assert_close(stuck.q[finite], sol.q[finite], 0.0, 1e-7, "before the singularity")


def test_gradient_through_switches():
    """Reverse-mode gradient of the final rocker angle through four partition switches."""
    mech, params, q0, unit_qd = crank_at_o4()
    ts = jnp.linspace(0.0, 0.6, N_OUT)

    def final_angle(m2, speed):
        sol = jaxmbs.simulate_partitioned(
            mech, q0, speed * unit_qd, (0.0, 0.6), params={**params, "m2": m2}, saveat=ts,
            rtol=TOL, atol=TOL, independent=("alpha1",), throw=False,
        )  # fmt: skip
        return sol.q[-1, 0], sol.stats["num_switches"]

    grad = jax.jit(jax.grad(lambda m2, s: final_angle(m2, s)[0], argnums=(0, 1)))(1.0, -4.0)
    assert int(final_angle(1.0, -4.0)[1]) >= 4
    h = 1e-4
    fd = (
        (final_angle(1.0 + h, -4.0)[0] - final_angle(1.0 - h, -4.0)[0]) / (2 * h),
        (final_angle(1.0, -4.0 + h)[0] - final_angle(1.0, -4.0 - h)[0]) / (2 * h),
    )
    for g, d in zip(grad, fd, strict=True):
        assert abs(float(d)) > 1e-3
        assert abs(float(g - d)) < 1e-5 * abs(float(d)), (float(g), float(d))


def test_float32_batch_keeps_good_samples():
    """float32, vmapped over two initial speeds, one of them NaN: the good sample runs through
    switches with float32 residuals; the bad one reports its own code."""
    with jax.enable_x64(False):
        mech = fr.fourbar_relative(**fr.CRANK_AT_O4)
        q0, unit_qd = fr.initial_state(mech, 2.8, 1.0)
        assert q0.dtype == jnp.float32
        speeds = jnp.array([-4.0, jnp.nan], jnp.float32)
        sol = jax.vmap(
            lambda s: jaxmbs.simulate_partitioned(
                mech, q0, s * unit_qd, (0.0, 0.3), rtol=1e-5, atol=1e-5, throw=False
            )
        )(speeds)
    assert sol.q.dtype == jnp.float32
    assert jaxmbs.integrate.result_index(sol.result).tolist() == [
        jaxmbs.integrate.RESULT_NAMES.index("successful"),
        jaxmbs.integrate.RESULT_NAMES.index("inconsistent_initial_conditions"),
    ]
    assert int(sol.stats["num_switches"][0]) >= 2
    assert float(sol.position_residual[0, -1]) < 1e-5
    assert not np.any(np.isfinite(np.asarray(sol.q[1])))


def test_bad_partition_input():
    mech, q0, qd0, _, _ = fig3()
    with pytest.raises(ValueError, match="k = 1"):
        jaxmbs.simulate_partitioned(mech, q0, qd0, (0.0, 1.0), independent=("alpha1", "alpha2"))
    with pytest.raises(ValueError, match="unknown coordinate"):
        jaxmbs.simulate_partitioned(mech, q0, qd0, (0.0, 1.0), independent=("beta",))
    with pytest.raises(ValueError, match="ratio"):
        jaxmbs.Switching(ratio=0.5)
    with pytest.raises(ValueError, match="criterion"):
        jaxmbs.independent_coordinates(mech, q0, criterion="determinant")
