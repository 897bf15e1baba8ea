"""The rank test of the singularity event: Gram pivots against the QR they stand for, and the
screened test against the plain QR test on the same rows."""

import jax
import numpy as np
import pytest

import jaxmbs
from jaxmbs._internal.linalg import MAX_BLOCK
from jaxmbs.kinematics import banded, stored_constraint_jacobian
from jaxmbs.kinematics.algebra import GRAM_SCREEN
from jaxmbs.kinematics.compressed import DenseJacobian
from jaxmbs.models import chain, fourbar


def qr_pivots(C: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """|R_kk| of the QR of C[rows]ᵀ (NumPy, Householder)."""
    return np.abs(np.diag(np.linalg.qr(np.asarray(C)[rows].T, mode="r")))


def band_plan(structure):
    return structure.algebra.plan(structure.independent_rows)


def screened_by_gram(structure) -> bool:
    """Whether the banded algebra's rank test screens by Gram pivots (module notes of
    `jaxmbs.kinematics.algebra`)."""
    return structure.rank > MAX_BLOCK and structure.redundancy == 0


def elimination_rows(structure):
    order = banded.elimination_order(band_plan(structure))
    return order[order < structure.n_constraints]


@pytest.fixture(scope="module")
def chain_states():
    mech = chain.chain(16)  # 32 independent rows: the block-tridiagonal plan
    q0, _ = chain.initial_state(mech, 0.6)
    rng = np.random.default_rng(3)
    return mech, [q0 + 0.3 * rng.normal(size=mech.n) for _ in range(3)]


def test_elimination_order_is_a_permutation_of_the_rows(chain_states):
    mech, _ = chain_states
    plan = band_plan(mech.structure)
    assert plan.rows.shape[0] > 2  # several levels of cyclic reduction
    rows = elimination_rows(mech.structure)
    assert sorted(rows.tolist()) == list(mech.structure.independent_rows)
    assert rows.tolist() != sorted(rows.tolist())  # odd blocks first: not the natural order


@pytest.mark.parametrize("case", ["chain16", "fourbar"])
def test_gram_pivots_are_the_qr_pivots_in_elimination_order(case, chain_states):
    if case == "chain16":
        mech, states = chain_states
        q = states[0]
    else:
        mech = fourbar.fourbar()  # one dense block
        q = fourbar.initial_state(mech)[0]
    plan = band_plan(mech.structure)
    order = banded.elimination_order(plan)
    real = order < mech.structure.n_constraints

    @jax.jit
    def pivots(q):
        C = stored_constraint_jacobian(mech, q, 0.0, mech.params)
        dense = jaxmbs.constraint_jacobian(mech, q, 0.0, mech.params)
        return banded.gram_pivots(plan, C), banded.gram_pivots(plan, DenseJacobian(dense)), dense

    p, p_dense, C = pivots(q)
    d = qr_pivots(C, order[real])
    scale = np.max(d)
    assert np.max(np.abs(np.asarray(p)[real] - d)) < 1e-12 * scale
    assert np.max(np.abs(np.asarray(p_dense)[real] - d)) < 1e-12 * scale
    np.testing.assert_allclose(np.asarray(p)[~real], 1.0, rtol=1e-12)  # padding rows


def test_screened_rank_test_is_the_qr_test(chain_states):
    """At rtol far below the pivots' spread the Gram pivots clear the state; near it the QR
    decides: either way the result is the QR test's, on both sides of its threshold."""
    mech, states = chain_states
    assert screened_by_gram(mech.structure)
    rows = elimination_rows(mech.structure)
    C = [np.asarray(jaxmbs.constraint_jacobian(mech, q, 0.0, mech.params)) for q in states]
    d = [qr_pivots(C_, rows) for C_ in C]
    ratio = [np.min(d_) / max(np.max(d_), 1.0) for d_ in d]
    assert min(ratio) > 10 * GRAM_SCREEN  # so that rtol = 1e-8 takes the screened branch
    for rtol in (1e-8, 0.9 * ratio[0], 1.1 * ratio[0], 0.5):
        test = jax.jit(mech.structure.algebra.rank_test(rtol))
        for q, d_ in zip(states, d, strict=True):
            lost = bool(test(stored_constraint_jacobian(mech, q, 0.0, mech.params)))
            assert lost == bool(np.min(d_) < rtol * max(np.max(d_), 1.0)), (rtol, ratio)


def test_screened_event_stops_a_long_chain():
    mech = chain.chain(5)  # 10 independent rows: one dense block, screened
    assert screened_by_gram(mech.structure)
    q0, qd0 = chain.initial_state(mech, 0.6)
    kwargs = dict(method="banded", rtol=1e-8, atol=1e-8, throw=False)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.5), **kwargs)
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    # Pivots of a chain's joint rows are within a factor of a few of each other: a rank
    # tolerance of 0.99 of the largest counts the configuration as singular at once.
    stopped = jaxmbs.simulate(mech, q0, qd0, (0.0, 0.5), rank_rtol=0.99, **kwargs)
    assert bool(stopped.result == jaxmbs.RESULTS.singular_configuration)
    assert float(stopped.ts[-1]) < 0.1
