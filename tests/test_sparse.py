"""The fast paths give the same numbers as the dense ones: sparsity detection and compressed
Jacobians, the batch-friendly kernels, block-tridiagonal factorisation, the `banded`
formulation on long chains (its block path), vectorised joints, and forward-mode
gradients through the projection."""

import functools
import re

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORMULATION_RTOL, assert_close, relative_error

import jaxmbs
from jaxmbs._internal import linalg
from jaxmbs._internal.linalg import MAX_BLOCK
from jaxmbs.kinematics import CompressedJacobian, algebra, velocity_residual
from jaxmbs.kinematics.sparsity import greedy_colouring
from jaxmbs.model.joints import planar
from jaxmbs.models import chain, fourbar, mcpherson, mobile_robot

SEED = 7  # every test draws from its own generator with this seed


def compressed_jacobian(mech, t, q):
    sparsity = mech.structure.sparsity
    probes = sparsity.probes(lambda v: velocity_residual(mech, q, v, t, mech.params), 0 * q)
    return CompressedJacobian(probes, sparsity)


def dense_jacobian(mech, t, q):
    return jax.jacfwd(lambda v: velocity_residual(mech, q, v, t, mech.params))(jnp.zeros_like(q))


@pytest.mark.parametrize(
    "build, initial",
    [
        (fourbar.fourbar, fourbar.initial_state),
        (lambda: fourbar.fourbar(redundant=True), fourbar.initial_state),
        (lambda: chain.chain(30), chain.initial_state),
        (mobile_robot.mobile_robot, mobile_robot.initial_state),
    ],
    ids=["fourbar", "fourbar-redundant", "chain30", "mobile-robot"],
)
def test_compressed_jacobian_equals_dense(build, initial):
    rng = np.random.default_rng(SEED)
    mech = build()
    sparsity = mech.structure.sparsity
    pattern = sparsity.jacobian_pattern
    colours = np.asarray(sparsity.colours)
    for row in pattern:  # no two columns of one colour share a row
        assert len(set(colours[row])) == row.sum()
    assert sparsity.n_colours < mech.n
    q = jnp.asarray(initial(mech)[0]) + 0.05 * rng.normal(size=mech.n)
    k, n = pattern.shape
    # Entries read from the probes, with out-of-range (padding) indices on both axes.
    rows, columns = np.arange(-1, k + 1)[:, None], np.arange(-1, n + 1)[None, :]
    C, dense, entries = jax.jit(
        lambda q: (
            jaxmbs.constraint_jacobian(mech, q, 0.3, mech.params),  # compressed
            dense_jacobian(mech, 0.3, q),
            compressed_jacobian(mech, 0.3, q).take(rows, columns),
        )
    )(q)
    assert_close(C, dense, 0.0, 1e-14, "C")
    assert_close(entries[1:-1, 1:-1], dense, 0.0, 1e-14, "C from the probes")
    padding = 1e-14 * float(jnp.max(jnp.abs(dense)))  # the padding reads zero
    assert float(jnp.max(jnp.abs(entries[np.array([0, -1])]))) <= padding
    assert float(jnp.max(jnp.abs(entries[:, np.array([0, -1])]))) <= padding


def test_chain_needs_few_products_and_a_block_diagonal_mass():
    mech = chain.chain(30)
    sparsity = mech.structure.sparsity
    assert sparsity.n_colours <= 6  # planar revolute chain: independent of N
    assert all(len(row) == 1 for row in sparsity.mass)  # M is diagonal
    plan = mech.structure.algebra.plan(mech.structure.independent_rows)
    assert plan.rows.shape[0] > 1  # the block-tridiagonal path


def test_spatial_mass_matrix_from_three_products():
    """M of spatial bodies in Euler angles (diagonal translational part, a 3×3 rotational
    block per body) from 3 Hessian-vector products of T along the colour groups of its
    pattern, equal to the dense Hessian; also its parameter derivative and under vmap. The
    band plan packs each body's {x}, {y}, {z} into one block of 3, so no block is padded."""
    rng = np.random.default_rng(SEED)
    mech = mcpherson.mcpherson_simplified()
    sparsity = mech.structure.sparsity
    assert sparsity.n_mass_colours == 3
    plan = mech.structure.algebra.plan(mech.structure.independent_rows)
    assert plan.mass_blocks.shape == (10, 3)
    assert np.array_equal(np.sort(plan.mass_blocks.reshape(-1)), np.arange(mech.n))
    q0 = jnp.asarray(mcpherson.initial_state(mech, 0.05)[0])
    qs = q0 + 0.1 * jnp.asarray(rng.normal(size=(4, mech.n)))
    weights = jnp.asarray(rng.normal(size=(mech.n, mech.n)))

    def both(q, m1):
        p = {**mech.params, "m1": m1, "J2": mech.params["J2"] * m1}
        return algebra.mass_matrix(mech, q, p), mech.mass_matrix(q, p)

    M, dense = jax.jit(jax.vmap(both, in_axes=(0, None)))(qs, mech.params["m1"])
    assert float(jnp.max(jnp.abs(M - dense))) <= 1e-13 * float(jnp.max(jnp.abs(dense)))
    assert sparsity.mass_pattern[3:6, 3:6].sum() > 3  # the angles are coupled
    d_M, d_dense = (
        jax.jit(jax.grad(lambda m1, i=i: jnp.sum(weights * both(qs[0], m1)[i])))(mech.params["m1"])
        for i in (0, 1)
    )
    assert float(jnp.abs(d_dense)) > 0.0
    assert_close(d_M, d_dense, 1e-13, 0.0, "dM/dm1")


def test_greedy_colouring_is_valid_on_random_patterns():
    rng = np.random.default_rng(SEED)
    for _ in range(20):
        pattern = rng.random((12, 15)) < 0.2
        colours = greedy_colouring(pattern)
        for row in pattern:
            assert len(set(colours[row])) == row.sum()


def test_zero_only_at_nominal_parameters_is_still_structural():
    # A joint at body 1's centre of mass: Φ_φ1 vanishes for the nominal offset 0, but not
    # for other offsets; detection perturbs the parameters, so the column is kept.
    bodies = [planar.Body("a", 1.0, 0.1), planar.Body("b", 1.0, 0.1)]
    joints = [
        planar.Revolute("J0", None, (0.0, 0.0), 0, (-0.5, 0.0)),
        planar.Revolute("J1", 0, (0.5, 0.0), 1, lambda p: (p["s"], 0.0)),
    ]
    mech = planar.planar_mechanism(bodies, joints, {"s": 0.0})
    mech = mech.with_structure(np.array([0.5, 0.0, 0.0, 1.0, 0.0, 0.0]))
    assert 5 in mech.structure.sparsity.jacobian[2]  # ∂Φ_J1,x/∂φ_b (= −s sin φ_b)


def test_kernels_match_lapack():
    rng = np.random.default_rng(SEED)
    A = rng.normal(size=(4, 7, 7))
    A = A @ np.swapaxes(A, 1, 2) + 7 * np.eye(7)
    B = rng.normal(size=(4, 7, 3))
    L = linalg.cholesky(jnp.asarray(A))
    assert_close(L, np.linalg.cholesky(A), 0.0, 1e-12, "cholesky")
    assert_close(linalg.solve_lower(L, B), np.linalg.solve(L, B), 0.0, 1e-12, "L⁻¹B")
    expected = np.linalg.solve(np.swapaxes(L, 1, 2), B)
    assert_close(linalg.solve_lower_transpose(L, B), expected, 0.0, 1e-12, "L⁻ᵀB")


def test_cross_matches_numpy_with_broadcasting():
    """The cyclic-shift cross product: each component's sign and place (a swapped shift
    gives −a × b, a missing final shift the components in the wrong order)."""
    rng = np.random.default_rng(SEED)
    a, b = rng.normal(size=(5, 3)), rng.normal(size=3)
    assert_close(linalg.cross(a, b), np.cross(a, b), 0.0, 1e-15, "a × b")
    assert_close(linalg.cross(b, a), np.cross(b, a), 0.0, 1e-15, "b × a")
    e = np.eye(3)
    assert_close(linalg.cross(e[0], e[1]), e[2], 0.0, 1e-15, "x × y = z")


@pytest.mark.parametrize("mode", ["single", "vmap", "vmap_rhs", "vmap_matrix", "vmap_shift"])
@pytest.mark.parametrize("w", [8, 12], ids=["unrolled", "lapack"])
def test_spd_solve_matches_numpy(w, mode):
    """`spd_solve` for A = G Gᵀ + diag(shift) on one system (LAPACK with the stored factor),
    a vmapped batch of systems (unrolled kernels on the batch-last layout for w ≤ MAX_BLOCK,
    no LAPACK call), a batch of right-hand sides for one factorised matrix, one right-hand
    side for a batch of matrices, and a batch of shifts for one G: all solve A x = b to
    round-off."""
    rng = np.random.default_rng(SEED)
    G = rng.normal(size=(5, w, w + 1))
    shift = 0.1 + rng.uniform(size=(5, w))  # condition number ~1e3
    b = rng.normal(size=(5, w))

    def solve(G, shift, b):
        return linalg.spd_solve(linalg.spd_factor(G, shift), b)

    args = jnp.asarray(G), jnp.asarray(shift), jnp.asarray(b)
    if mode == "single":
        x = np.stack([solve(*one) for one in zip(*args, strict=True)])
    elif mode == "vmap":
        batched = jax.jit(jax.vmap(solve))
        x = batched(*args)
        hlo = batched.lower(*args).compile().as_text()
        assert ("lapack" in hlo) == (w > MAX_BLOCK)
    elif mode == "vmap_rhs":
        G, shift = np.broadcast_to(G[0], G.shape), np.broadcast_to(shift[0], shift.shape)
        factor = linalg.spd_factor(args[0][0], args[1][0])
        x = jax.jit(jax.vmap(lambda v: linalg.spd_solve(factor, v)))(args[2])
    elif mode == "vmap_matrix":
        b = np.broadcast_to(b[0], b.shape)
        x = jax.jit(jax.vmap(solve, in_axes=(0, 0, None)))(*args[:2], args[2][0])
    else:
        G = np.broadcast_to(G[0], G.shape)
        x = jax.jit(jax.vmap(solve, in_axes=(None, 0, 0)))(args[0][0], *args[1:])
    A = G @ np.swapaxes(G, 1, 2) + shift[:, :, None] * np.eye(w)
    expected = np.linalg.solve(A, b[..., None])[..., 0]
    assert_close(x, expected, 0.0, 1e-11 * np.abs(expected).max(), "A⁻¹b")


def test_vmapped_spd_solve_reads_gram_factor_batch_last():
    """Under vmap, G is stored once with the batch axis last (one concatenation of w·m·B
    entries), so that the unrolled kernels read it with unit stride. Without it XLA lays G
    out batch-first, and every kernel reading an entry of A runs as scalar code."""
    B, w, m = 64, 8, 9
    G, shift, b = jnp.ones((B, w, m)), jnp.ones((B, w)), jnp.ones((B, w))
    batched = jax.jit(jax.vmap(lambda *a: linalg.spd_solve(linalg.spd_factor(*a[:2]), a[2])))
    hlo = batched.lower(G, shift, b).compile().as_text()
    stored = re.findall(rf"= f(?:32|64)\[{w * m * B}\]\{{0\}} (?:concatenate|fusion)\(", hlo)
    assert stored, "G is not stored batch-last"


@pytest.mark.parametrize("mode", ["stack", "vmap", "single"])
@pytest.mark.parametrize("r, n", [(8, 9), (6, 6), (20, 24)], ids=["8x9", "square", "lapack"])
def test_orthonormal_rows_match_householder_qr(r, n, mode):
    """Gram–Schmidt on a stack or a vmapped batch, LAPACK on one matrix (or r > MAX_BLOCK):
    the same pivots and span."""
    rng = np.random.default_rng(SEED)
    A = rng.normal(size=(3, r, n))
    A[:, -1] = A[:, 0] - 2.0 * A[:, 1]  # the last row is dependent: its pivot vanishes
    rows = functools.partial(linalg.orthonormal_rows, passes=2)
    if mode == "stack":
        Q, pivots = rows(jnp.asarray(A))
    elif mode == "vmap":
        Q, pivots = jax.jit(jax.vmap(rows))(jnp.asarray(A))
    else:
        Q, pivots = (np.stack(x) for x in zip(*(rows(jnp.asarray(a)) for a in A), strict=True))
    R = np.linalg.qr(np.swapaxes(A, 1, 2))[1]
    expected = np.abs(np.diagonal(R, axis1=1, axis2=2))
    assert_close(pivots[:, :-1], expected[:, :-1], 0.0, 1e-12, "|R_kk|")
    assert np.all(pivots[:, -1] < 1e-13 * pivots[:, 0])
    gram = np.einsum("bin,bjn->bij", Q[:, :-1], Q[:, :-1])
    assert_close(gram, np.broadcast_to(np.eye(r - 1), gram.shape), 0.0, 1e-13, "QQᵀ")
    span = np.einsum("bin,bjn,bjm->bim", A, Q, Q)  # rows of A projected on span(Q)
    assert_close(span, A, 0.0, 1e-12, "A Qᵀ Q")


@pytest.mark.parametrize("redundant, method", [(False, "banded"), (False, "qr"), (True, "banded")])
def test_lapack_free_runs_call_no_lapack(redundant, method):
    """`jaxmbs.lapack_free` tells which runs call no batched LAPACK kernel under vmap (they
    serialise and can deadlock on a small thread pool): the vmapped run's program agrees."""
    mech = fourbar.fourbar(redundant=redundant)
    q0, unit = fourbar.initial_state(mech, np.pi / 3, 1.0)

    def run(speed):
        return jaxmbs.simulate(mech, q0, speed * unit, (0.0, 1.0), method=method, throw=False)

    hlo = jax.jit(jax.vmap(run)).lower(jnp.linspace(1.0, 2.0, 4)).as_text()
    assert jaxmbs.lapack_free(mech, method=method) == ("lapack" not in hlo)
    assert jaxmbs.lapack_free(mech, method=method) == (method == "banded" and not redundant)


@pytest.mark.parametrize("blocks", [1, 2, 5, 8])
def test_block_tridiagonal_solve_matches_dense(blocks):
    rng = np.random.default_rng(SEED)
    w = 3
    size = blocks * w
    band = np.abs(np.subtract.outer(np.arange(size) // w, np.arange(size) // w)) <= 1
    X = rng.normal(size=(size, size)) * band
    A = X @ X.T * band + size * np.eye(size)  # symmetric, positive definite, block tridiagonal
    D = np.stack([A[k * w : (k + 1) * w, k * w : (k + 1) * w] for k in range(blocks)])
    E = np.zeros((blocks, w, w))
    for k in range(blocks - 1):
        E[k] = A[(k + 1) * w : (k + 2) * w, k * w : (k + 1) * w]
    b = rng.normal(size=size)
    factor = linalg.block_tridiagonal_factor(jnp.asarray(D), jnp.asarray(E))
    x = linalg.block_tridiagonal_solve(factor, jnp.asarray(b.reshape(blocks, w)))
    assert_close(np.asarray(x).reshape(-1), np.linalg.solve(A, b), 0.0, 1e-12, "x")


@pytest.fixture(scope="module")
def long_chain():
    mech = chain.chain(16)  # 32 rows: block-tridiagonal
    q0, _ = chain.initial_state(mech, 0.6)
    rng = np.random.default_rng(0)  # its own generator: the states do not depend on test order

    @jax.jit
    def consistent(q, qd):
        q = jaxmbs.project_positions(mech, q, 0.0, mech.params, 12)
        return q, jaxmbs.project_velocities(mech, q, qd, 0.0, mech.params)

    states = [
        consistent(q0 + 0.3 * rng.normal(size=mech.n), rng.normal(0, 2, mech.n)) for _ in range(4)
    ]
    return mech, states


def test_banded_block_path_agrees_with_qr(long_chain):
    mech, states = long_chain

    @jax.jit
    def both(q, qd):
        out = {}
        for method in ("qr", "banded"):
            out[method] = jaxmbs.accelerations_and_multipliers(mech, q, qd, 0.0, method=method)
        return out

    for q, qd in states:
        out = both(q, qd)
        assert_close(out["banded"][0], out["qr"][0], FORMULATION_RTOL, 1e-12, "q̈")
        assert_close(out["banded"][1], out["qr"][1], FORMULATION_RTOL, 1e-11, "λ")


def test_banded_derivative_of_accelerations(long_chain):
    mech, states = long_chain
    q, qd = states[0]
    direction = jnp.asarray(np.random.default_rng(1).normal(size=mech.n))

    @functools.partial(jax.jit, static_argnums=0)
    def qdd(method, m):
        params = {**mech.params, "m": m}
        return jaxmbs.accelerations(mech, q, qd + m * direction, 0.0, params, method=method)

    d_banded = jax.jacfwd(lambda m: qdd("banded", m))(1.3)
    d_qr = jax.jacfwd(lambda m: qdd("qr", m))(1.3)
    assert_close(d_banded, d_qr, 1e-9, 1e-10, "dq̈/dm")
    # Reverse mode (the transpose of the implicit derivative) against the exact chain rule
    # through the independent `qr` tangent, and against central differences, whose own
    # truncation and round-off error at h = 1e-6 is up to ~3e-7 relative here.
    g = jax.grad(lambda m: jnp.sum(qdd("banded", m) ** 2))(1.3)
    assert relative_error(g, 2.0 * jnp.dot(qdd("qr", 1.3), d_qr)) < 1e-10
    h = 1e-6
    fd = (jnp.sum(qdd("banded", 1.3 + h) ** 2) - jnp.sum(qdd("banded", 1.3 - h) ** 2)) / (2 * h)
    assert relative_error(g, fd) < 3e-7  # measured 6.3e-8


def test_vectorised_joints_equal_joint_by_joint():
    rng = np.random.default_rng(SEED)
    mech = chain.chain(6)
    joints = planar.joints_of(mech)
    q = jnp.asarray(rng.normal(size=mech.n))
    stacked = mech.constraints(0.0, q, mech.params)
    one_by_one = jnp.concatenate([j(0.0, q, mech.params) for j in joints])
    assert_close(stacked, one_by_one, 0.0, 1e-15, "Φ")


def test_forward_mode_through_projection_matches_reverse_mode():
    mech = fourbar.fourbar()
    q0, unit = fourbar.initial_state(mech, np.pi / 3, 1.0)

    def angle(speed, adjoint):
        sol = jaxmbs.simulate(
            mech, q0, speed * unit, (0.0, 0.5), rtol=1e-10, atol=1e-10, adjoint=adjoint,
            rank_rtol=None,  # the projection's derivatives are under test, not the event
        )  # fmt: skip
        return sol.q[-1, 2]

    forward = jax.jit(jax.jacfwd(lambda s: angle(s, diffrax.ForwardMode())))(2.0)
    reverse = jax.jit(jax.grad(lambda s: angle(s, None)))(2.0)
    h = 1e-5
    plain = jax.jit(lambda s: angle(s, None))
    central = (plain(2.0 + h) - plain(2.0 - h)) / (2 * h)
    assert relative_error(forward, reverse) < 1e-10
    assert relative_error(forward, central) < 1e-6
