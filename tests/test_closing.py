"""Closing conditions from inverse kinematics (Blajer, Schiehlen, Schirm 1993, §2–4).

The four-bar in relative coordinates with the explicit closing conditions of eqs 17–18: the
autodiff A and ξ against the papers' hand-derived eqs 19–23, the minimal equations against
the QR null-space method, and integration with switching between cases a and b.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fourbar_cases import N_OUT, TOL, crank_at_o4, fig3, relative_energy_drift, wrapped
from helpers import assert_close

import jaxmbs
from jaxmbs.models import fourbar_relative as fr

CASE_A, CASE_B = fr.closing_variants()


def hand_derived_a(q, qd, p):
    """A and ξ of case a, α1 independent (1993 eqs 22a, 23a; 1994 eq 43)."""
    l0, l1, l2, l3 = p["l0"], p["l1"], p["l2"], p["l3"]
    a1, a2, a3 = q
    d1, d2, d3 = qd
    A = np.array([
        -(l0 * l1 * np.cos(a1) + l0 * l2 * np.cos(a1 + a2)) / (l2 * l3 * np.sin(a3)),
        l0 * l1 * np.cos(a1) / (l2 * l3 * np.sin(a3)),
    ])  # fmt: skip
    K1 = l0 * l1 * (d1 * np.sin(a1) * np.sin(a3) + d3 * np.cos(a1) * np.cos(a3))
    K2 = l0 * l2 * ((d1 + d2) * np.sin(a1 + a2) * np.sin(a3) + d3 * np.cos(a1 + a2) * np.cos(a3))
    L1 = l2 * l3 * np.sin(a3) ** 2
    return A, d1 * np.array([(K1 + K2) / L1, -K1 / L1])


def hand_derived_b(q, qd, p):
    """A and ξ of case b, α3 independent (1993 eqs 22b, 23b), dependent order [α1, α2]."""
    l0, l1, l2, l3 = p["l0"], p["l1"], p["l2"], p["l3"]
    a1, a2, a3 = q
    d1, d2, d3 = qd
    A = np.array([
        l2 * l3 * np.sin(a3) / (l0 * l1 * np.cos(a1)),
        -(l2 * np.cos(a1 + a2) / (l1 * np.cos(a1)) + 1),
    ])  # fmt: skip
    K3 = l2 * l3 * (d3 * np.cos(a3) * np.cos(a1) + d1 * np.sin(a3) * np.sin(a1))
    K4 = l0 * l2 * (d1 * np.sin(a2) + d2 * np.sin(a1 + a2) * np.cos(a1))
    L2 = l0 * l1 * np.cos(a1) ** 2
    return A, d3 * np.array([K3 / L2, K4 / L2])


@pytest.fixture(scope="module")
def random_states():
    """100 random states per case, away from the case's singularity, on both branches."""
    mech = fr.fourbar_relative()
    rng = np.random.default_rng(5)
    p = mech.params
    alpha1 = rng.uniform(0.0, 2 * np.pi, 100)
    # case b: α3 over its reachable range (both signs), α1 branch ±, |cos α1| bounded away
    lo, hi = (np.arccos((p["l0"] ** 2 + p["l1"] ** 2 - p["l2"] ** 2 - p["l3"] ** 2
                         - s * 2 * p["l0"] * p["l1"]) / (2 * p["l2"] * p["l3"]))
              for s in (-1, 1))  # fmt: skip
    alpha3 = rng.choice([-1, 1], 400) * rng.uniform(lo, hi, 400)
    branch_b = rng.choice([-1.0, 1.0], 400)
    cos1 = -branch_b * np.sin(np.arccos(
        (p["l0"] ** 2 + p["l1"] ** 2 - p["l2"] ** 2 - p["l3"] ** 2
         - 2 * p["l2"] * p["l3"] * np.cos(alpha3)) / (2 * p["l0"] * p["l1"])))  # fmt: skip
    keep = np.flatnonzero(np.abs(cos1) > 0.1)[:100]
    return {
        "mech": mech,
        "a": (alpha1, rng.choice([-1.0, 1.0], 100), rng.uniform(-5, 5, 100)),
        "b": (alpha3[keep], branch_b[keep], rng.uniform(-5, 5, 100)),
    }


@pytest.mark.parametrize("case", ["a", "b"])
def test_autodiff_terms_equal_hand_derived(random_states, case):
    """A and ξ by autodiff equal eqs 19–23 (1e-10), and A equals −C_D⁻¹C_I of the cut-joint
    constraints; the minimal equations give the QR method's accelerations."""
    mech = random_states["mech"]
    variant = CASE_A if case == "a" else CASE_B
    q_I, branch, v_I = (jnp.asarray(x) for x in random_states[case])

    @jax.jit
    @jax.vmap
    def evaluate(qi, b, v):
        terms = jaxmbs.closing_terms(mech, variant, qi[None], v[None], 0.0, branch=b[None])
        M_d, h_d = jaxmbs.minimal_equations(mech, variant, qi[None], v[None], 0.0, branch=b[None])
        qdd_qr = jaxmbs.accelerations(mech, terms.q, terms.qd, 0.0)
        C = jaxmbs.constraint_jacobian(mech, terms.q, 0.0, mech.params)
        ind = 0 if case == "a" else 2
        dep = [1, 2] if case == "a" else [0, 1]
        A_constraints = -jnp.linalg.solve(C[:, dep], C[:, ind : ind + 1])
        return terms, jnp.linalg.solve(M_d, h_d), qdd_qr, A_constraints

    terms, vdd, qdd_qr, A_constraints = evaluate(q_I, branch, v_I)
    hand = hand_derived_a if case == "a" else hand_derived_b
    for i in range(len(q_I)):
        A, xi = hand(np.asarray(terms.q[i]), np.asarray(terms.qd[i]), mech.params)
        assert_close(terms.A[i, :, 0], A, 1e-10, 1e-10, f"A, state {i}")
        assert_close(terms.xi[i], xi, 1e-10, 1e-10, f"ξ, state {i}")
    assert_close(terms.A, A_constraints, 1e-10, 1e-12, "A = −C_D⁻¹C_I")
    assert_close(terms.eta, np.zeros_like(terms.eta), 0.0, 1e-12, "η (scleronomic)")
    assert np.max(np.abs(jax.vmap(lambda q: jaxmbs.position_residual(mech, q, 0.0, mech.params))(
        terms.q))) < 1e-14  # fmt: skip
    qdd_ind = qdd_qr[:, 0 if case == "a" else 2]
    assert_close(vdd[:, 0], qdd_ind, 1e-10, 1e-10, "minimal equations vs QR")


def closing_run(mech, q0, qd0, t1, **kwargs):
    """simulate_closing with cases a and b; one compilation serves every call here."""
    ts = jnp.linspace(0.0, t1, N_OUT)
    kwargs = {"rtol": TOL, "atol": TOL, "throw": False, **kwargs}
    return jaxmbs.simulate_closing(mech, (CASE_A, CASE_B), q0, qd0, (0.0, t1), saveat=ts, **kwargs)


def test_minimal_equations_match_qr_over_10_s():
    mech, q0, qd0, _, qr = fig3()
    sol = closing_run(mech, q0, qd0, 10.0)
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    assert np.all(np.asarray(sol.stats["variant"]) == 0)  # α1 stays the better choice
    assert_close(wrapped(sol.q - qr.q), np.zeros(qr.q.shape), 0.0, 1e-7, "q (mod 2π)")
    assert_close(sol.qd, qr.qd, 0.0, 5e-7, "q̇")
    assert_close(sol.qdd, qr.qdd, 0.0, 5e-6, "q̈")
    assert np.max(sol.position_residual) < 1e-14  # closing conditions: exact by construction
    assert_close(sol.multipliers, qr.multipliers, 1e-6, 1e-6, "λ")


def test_switching_between_cases_a_and_b():
    """Through sin α3 = 0 (singular for case a) by switching to case b and back."""
    mech, params, q0, unit_qd = crank_at_o4()
    sol = closing_run(mech, q0, -4.0 * unit_qd, 1.3, params=params)
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    variant = np.asarray(sol.stats["variant"])
    crossings = np.count_nonzero(np.diff(np.sign(np.sin(np.asarray(sol.q)[:, 2]))))
    assert crossings >= 4
    assert int(sol.stats["num_switches"]) >= 2 * crossings and set(variant.tolist()) == {0, 1}
    assert np.max(sol.position_residual) < 1e-13
    assert relative_energy_drift(mech, sol, params) < 1e-8
    reference = jaxmbs.simulate_partitioned(
        mech, q0, -4.0 * unit_qd, (0.0, 1.3), params=params, saveat=jnp.linspace(0, 1.3, N_OUT),
        rtol=TOL, atol=TOL, independent=("alpha1",), throw=False,
    )  # fmt: skip
    assert_close(wrapped(sol.q - reference.q), np.zeros(sol.q.shape), 0.0, 1e-7, "q (mod 2π)")

    stuck = closing_run(mech, q0, -4.0 * unit_qd, 1.3, params=params, variant=0, switching=False)
    assert bool(stuck.result == jaxmbs.RESULTS.singular_configuration)
    finite = np.all(np.isfinite(np.asarray(stuck.q)), axis=1)
    assert 0 < np.count_nonzero(finite) < N_OUT // 4
    assert_close(wrapped(stuck.q[finite] - sol.q[finite]), 0.0 * sol.q[finite], 0.0, 1e-7, "q")


def test_singular_variant_raises_with_throw():
    mech, params, q0, unit_qd = crank_at_o4()
    with pytest.raises(Exception, match="singular configuration"):
        closing_run(
            mech, q0, -4.0 * unit_qd, 1.3, params=params, variant=0, switching=False, throw=True
        ).q.block_until_ready()


def test_bad_closing_input():
    mech, q0, qd0, _, _ = fig3()
    wrong_shape = jaxmbs.ClosingVariant(("alpha1",), lambda t, q, p, b: q)
    with pytest.raises(ValueError, match="shape"):
        jaxmbs.simulate_closing(mech, wrong_shape, q0, qd0, (0.0, 1.0))
    two = jaxmbs.ClosingVariant(("alpha1", "alpha2"), lambda t, q, p, b: q[:1])
    with pytest.raises(ValueError, match="same number"):
        jaxmbs.simulate_closing(mech, (CASE_A, two), q0, qd0, (0.0, 1.0))
    with pytest.raises(ValueError, match="inconsistent"):
        jaxmbs.simulate_closing(mech, CASE_A, q0 + 0.1, qd0, (0.0, 1.0))
