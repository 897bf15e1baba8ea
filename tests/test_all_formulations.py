"""All formulations of Pękal–Frączek 2016 agree: q̈, generalized reactions Cᵀλ, derivatives
of q̈, short simulations, and trajectory gradients against central finite differences;
coordinate partitioning stops where its fixed partition degenerates."""

import functools
import re

import diffrax
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import pytest
from helpers import FORMULATION_RTOL, assert_close

import jaxmbs
from jaxmbs.formulations import get_formulation
from jaxmbs.models import chain, fourbar, slider_crank

SEED = 20261123  # every test draws from its own generator with this seed
STATES = 6  # random consistent states per mechanism

#: Every registered method, plus QR forced to pivot / not to pivot.
FORMULATIONS = {
    **{name: jaxmbs.formulations.get_formulation(name) for name in jaxmbs.METHODS},
    "qr-pivoting": jaxmbs.NullSpaceFormulation(jaxmbs.nullspace.QR(pivoting=True)),
    "qr-rows": jaxmbs.NullSpaceFormulation(jaxmbs.nullspace.QR(pivoting=False)),
}


def random_states(mech, q0, times, rng):
    """Consistent (t, q, q̇) near q0: Newton projection of a random perturbation of q0 at a
    random time, then the velocity projection of random velocities (drawn from `rng`)."""

    @jax.jit
    def project(t, q, qd):
        q = jaxmbs.project_positions(mech, q, t, mech.params, iterations=12)
        residual = jnp.max(jnp.abs(jaxmbs.position_residual(mech, q, t, mech.params)))
        return q, jaxmbs.project_velocities(mech, q, qd, t, mech.params), residual

    states = []
    while len(states) < STATES:
        t = rng.uniform(*times)
        q, qd, residual = project(t, q0 + 0.2 * rng.normal(size=mech.n), rng.normal(0, 3, mech.n))
        if float(residual) < 1e-13:  # else Newton did not converge from this guess: draw again
            states.append((t, q, qd))
    t, q, qd = zip(*states, strict=True)
    return jnp.asarray(t), jnp.stack(q), jnp.stack(qd)


CASES = {  # mechanism, a consistent q0, the range of times
    "fourbar": (fourbar.fourbar, fourbar.initial_state, (0, 0)),
    "fourbar-redundant": (lambda: fourbar.fourbar(redundant=True), fourbar.initial_state, (0, 0)),
    "slider-crank": (slider_crank.slider_crank, slider_crank.initial_state, (0, 0)),
    "slider-crank-driven": (  # the drive fixes the crank angle at time t
        lambda: slider_crank.slider_crank(driven=True),
        slider_crank.initial_state,
        (0, 0.05),
    ),
    "chain": (lambda: chain.chain(4), lambda m: chain.initial_state(m, 0.6), (0, 0)),
}


@functools.cache
def case(name):
    make, initial_state, times = CASES[name]
    mech = make()
    rng = np.random.default_rng(SEED)
    return mech, random_states(mech, initial_state(mech)[0], times, rng)


@jax.jit
def at_states(mech, t, q, qd):
    """Every formulation's q̈ and λ, and M, Q, C, Γ, at a batch of states."""

    def one(t, q, qd):
        p = mech.params
        out = {
            name: jaxmbs.accelerations_and_multipliers(mech, q, qd, t, method=f)
            for name, f in FORMULATIONS.items()
        }
        terms = (
            mech.mass_matrix(q, p),
            mech.forces(t, q, qd, p),
            jaxmbs.constraint_jacobian(mech, q, t, p),
            jaxmbs.acceleration_rhs(mech, q, qd, t, p),
            jnp.max(jnp.abs(jaxmbs.velocity_residual(mech, q, qd, t, p))),
        )
        return out, terms

    return jax.vmap(one)(t, q, qd)


@pytest.mark.parametrize("name", list(CASES))
def test_same_accelerations_and_reactions(name):
    mech, (t, q, qd) = case(name)
    out, (M, Q, C, gamma, velocity_residual) = at_states(mech, t, q, qd)
    assert float(jnp.max(velocity_residual)) < 1e-12  # consistent states
    qdd_ref, lam_ref = out["kkt"]
    reaction_ref = jnp.einsum("bkn,bk->bn", C, lam_ref)
    for method, (qdd, lam) in out.items():
        for b in range(t.shape[0]):
            scale = float(jnp.max(jnp.abs(qdd_ref[b])))
            what = f"{name} {method} state {b}"
            reaction = C[b].T @ lam[b]
            r_scale = max(1.0, float(jnp.max(jnp.abs(reaction_ref[b]))))
            if method != "kkt":  # every other formulation against the reference
                assert_close(qdd[b], qdd_ref[b], 0, FORMULATION_RTOL * scale, f"q̈ {what}")
                assert_close(
                    reaction, reaction_ref[b], 0, FORMULATION_RTOL * r_scale, f"Cᵀλ {what}"
                )
            # The equations themselves, and λ of minimum norm: in the range of C.
            assert_close(M[b] @ qdd[b] + reaction, Q[b], 0, 1e-10 * r_scale, f"dynamics {what}")
            assert_close(C[b] @ qdd[b], gamma[b], 0, 1e-10 * scale, f"C q̈ = Γ {what}")
            if mech.structure.redundancy:
                left_null = jnp.linalg.svd(C[b].T)[2][mech.structure.rank :]
                assert float(jnp.max(jnp.abs(left_null @ lam[b]))) < 1e-10 * r_scale, what


@jax.jit
def jacobians(mech, t, q, qd):
    """∂q̈/∂(q, q̇, p) of every formulation, forward and reverse mode.

    The model terms T = (M, Q, C, Γ) and ∂T/∂(q, q̇, p) are computed once; each formulation's
    derivative (its implicit derivative: jvp and vjp of q̈(T)) is then chained with them,
    so the model's second derivatives are compiled once, not once per method and mode."""

    def terms(x):
        q, qd, p = x
        return (
            mech.mass_matrix(q, p),
            mech.forces(t, q, qd, p),
            jaxmbs.constraint_jacobian(mech, q, t, p),
            jaxmbs.acceleration_rhs(mech, q, qd, t, p),
        )

    x = (q, qd, mech.params)
    flat_x, unflatten = jax.flatten_util.ravel_pytree(x)
    T = terms(x)
    dT = jax.vmap(lambda v: jax.jvp(terms, (x,), (unflatten(v),))[1])(jnp.eye(flat_x.size))

    def qdd(f):
        return lambda T: f.accelerations(*T, mech)

    out = {}
    for name in jaxmbs.METHODS:
        f = qdd(jaxmbs.formulations.get_formulation(name))
        forward = jax.vmap(lambda dT_i, f=f: jax.jvp(f, (T,), (dT_i,))[1])(dT)  # (dim x, n)
        _, vjp = jax.vjp(f, T)
        cotangents = jax.vmap(vjp)(jnp.eye(mech.n))[0]  # ∂q̈_i/∂T, per output i
        reverse = sum(  # Σ_T ∂q̈/∂T · ∂T/∂x
            jnp.einsum("i...,j...->ij", c, d) for c, d in zip(cotangents, dT, strict=True)
        )
        out[name] = (forward.T, reverse)
    return out


@pytest.mark.parametrize("name", ["fourbar-redundant", "chain"])
def test_same_derivatives_of_accelerations(name):
    """The implicit derivative of every formulation equals the KKT system's forward-mode
    derivative in every direction (the KKT system's own reverse mode too) — including the
    chain's repeated zero singular values and eigenvalues and the redundant four-bar's
    rank-deficient C, where differentiating the SVD or the eigendecomposition itself
    fails."""
    mech, (t, q, qd) = case(name)
    out = jacobians(mech, t[0], q[0], qd[0])
    ref = out["kkt"][0]
    assert bool(jnp.all(jnp.isfinite(ref))) and float(jnp.max(jnp.abs(ref))) > 1.0
    for method, (forward, reverse) in out.items():
        scale = FORMULATION_RTOL * float(jnp.max(jnp.abs(ref)))
        if method != "kkt":  # the reference itself
            assert_close(forward, ref, 0, scale, f"{name} {method} forward mode")
        assert_close(reverse, ref, 0, scale, f"{name} {method} reverse mode")


def test_registry():
    assert jaxmbs.METHODS == (
        "kkt",
        "qr",
        "svd",
        "eigen",
        "putd-householder",
        "putd-gauss",
        "partitioning",
        "wang-huston",
        "banded",
    )
    for name in jaxmbs.METHODS:
        assert jaxmbs.formulations.get_formulation(name).name == name
    with pytest.raises(ValueError, match="unknown method 'lu'"):
        jaxmbs.formulations.get_formulation("lu")


@pytest.mark.parametrize("case", ["fourbar", "chain"])
def test_putd_gauss_factorises_a_square_matrix(case):
    """PUTD-G factorises [C_Iᵀ 0] (square: on a GPU a vmapped LU of square matrices is one
    batched call, of rectangular ones a call per sample) and gets the P and S Γ of the LU of
    C_Iᵀ itself: the zero columns change neither the first r columns nor the pivots."""
    make, initial_state, _ = CASES[case]
    mech = make()
    q0 = initial_state(mech)[0]
    C = jaxmbs.constraint_jacobian(mech, q0, 0.0, mech.params)
    structure = mech.structure
    putd = jaxmbs.nullspace.PUTDGauss()
    gamma = jnp.asarray(np.random.default_rng(SEED).normal(size=C.shape[0]))

    lu_shapes = [
        eqn.invars[0].aval.shape
        for eqn in jax.make_jaxpr(lambda C: putd.complement(C, mech))(C).eqns
        if eqn.primitive is jax.lax.linalg.lu_p
    ]
    assert lu_shapes == [(mech.n, mech.n)]

    r = structure.rank
    lu, _, perm = jax.lax.linalg.lu(structure.independent_part(C).T)
    L11 = jnp.tril(lu[:r], -1) + jnp.eye(r)
    U = jnp.triu(lu[:r])
    coupling = jax.scipy.linalg.solve_triangular(
        L11, lu[r:].T, trans="T", lower=True, unit_diagonal=True
    )
    P_rect = (
        jnp.zeros((mech.n, structure.dof))
        .at[perm]
        .set(jnp.concatenate([-coupling, jnp.eye(structure.dof)]))
    )
    y = jax.scipy.linalg.solve_triangular(U.T, structure.independent_part(gamma), lower=True)
    u = jax.scipy.linalg.solve_triangular(L11, y, trans="T", lower=True, unit_diagonal=True)
    particular_rect = jnp.zeros(mech.n).at[perm[:r]].set(u)

    P, factors = putd.complement(C, mech)
    assert float(jnp.max(jnp.abs(P - P_rect))) < 1e-13
    assert float(jnp.max(jnp.abs(C @ P))) < 1e-12
    particular = putd.particular(factors, gamma, mech)
    assert float(jnp.max(jnp.abs(particular - particular_rect))) < 1e-12


def test_pivoted_qr_off_cpu_is_householder(monkeypatch):
    """Off CPU, `qr` on redundant constraints takes column-pivoted Householder reflections
    (vectorised across a batch) instead of geqp3, which jaxlib runs on the host on a GPU.
    Same pivots and |R_kk| as LAPACK, the same null space, and q̈ to 1e-10; the program
    lowered for CUDA holds no geqp3, the CPU one does."""
    mech, (t, q, qd) = case("fourbar-redundant")
    r, n = mech.structure.rank, mech.n
    A = jaxmbs.constraint_jacobian(mech, q[0], t[0], mech.params).T
    Q, R, perm = jax.scipy.linalg.qr(A, pivoting=True)
    H, Z, perm_h = jaxmbs.nullspace.householder_triangularize(A, r, pivoting=True)
    # Column pivoting takes at step k the column of largest remaining norm |R[k:, j]|: both
    # factorisations do, and the runner-up trails by more than round-off at every step, so
    # that the pivot order is determined (at a near-tie either choice would be right).
    for T in (np.asarray(R), np.asarray(Z)):
        runner_up = [np.max(np.linalg.norm(T[k:, k + 1 :], axis=0)) for k in range(r)]
        assert np.min(np.abs(np.diag(T)[:r]) - runner_up) > 1e-8 * abs(T[0, 0])
    assert np.asarray(perm_h[:r]).tolist() == np.asarray(perm[:r]).tolist()
    assert_close(jnp.abs(jnp.diag(Z[:r, :r])), jnp.abs(jnp.diag(R[:r, :r])), 0, 1e-12, "|R_kk|")
    assert_close(H.T @ H, jnp.eye(n), 0, 1e-14, "HᵀH")
    assert_close(H @ Z, A[:, perm_h], 0, 1e-13, "H Z = A E")
    assert float(jnp.max(jnp.abs(Z[r:]))) < 1e-13  # the redundant column is dependent
    assert_close(H[:, r:] @ H[:, r:].T, Q[:, r:] @ Q[:, r:].T, 0, 1e-13, "null-space projector")

    def batch(q, qd):
        return jax.vmap(lambda q, qd: jaxmbs.accelerations(mech, q, qd, 0.0, method="qr"))(q, qd)

    lapack = jax.jit(batch)(q, qd)
    monkeypatch.setattr(
        jaxmbs.nullspace,
        "pivoted_qr",
        lambda A, steps: jaxmbs.nullspace.householder_triangularize(A, steps, pivoting=True),
    )
    householder = jax.jit(lambda q, qd: batch(q, qd))(q, qd)  # a new function: traced anew
    assert_close(householder, lapack, 0, 1e-10 * float(jnp.max(jnp.abs(lapack))), "q̈")
    monkeypatch.undo()

    program = jax.jit(batch)
    assert "geqp3" in program.lower(q, qd).as_text()
    assert "geqp3" not in jax.export.export(program, platforms=["cuda"])(q, qd).mlir_module()


def test_gpu_batches_call_no_host_or_per_sample_kernel():
    """Every formulation's vmapped q̈, as exported for CUDA (redundant four-bar, so that `qr`
    pivots): no hybrid (host-side) kernel — `jax.export` refuses one, and the assertion
    names it — and every LU of square matrices, which jaxlib runs as one batched cuBLAS call
    (a batch of rectangular ones is a loop over samples)."""
    mech = fourbar.fourbar(redundant=True)
    q, qd = fourbar.initial_state(mech, 1.0, 1.5)
    q, qd = jnp.stack([q] * 4), jnp.stack([qd] * 4)
    for method in jaxmbs.METHODS:

        def batch(q, qd, method=method):
            return jaxmbs.accelerations(mech, q, qd, 0.0, method=method)

        program = jax.export.export(jax.jit(jax.vmap(batch)), platforms=["cuda"])(q, qd)
        calls = re.findall(
            r"custom_call @(\w+)\([^)]*\)[^\n]*?: \(tensor<([0-9x]+)x", program.mlir_module()
        )
        assert not [name for name, _ in calls if "hybrid" in name], method
        for name, shape in calls:
            if "getrf" in name:
                *_, rows, cols = shape.split("x")
                assert rows == cols, (method, name, shape)


def test_bad_partition_is_refused():
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    for dependent in [(0, 1, 2), (0, 1, 2, 3, 4, 5, 6, 6), (0, 1, 2, 3, 4, 5, 6, 9)]:
        method = jaxmbs.CoordinatePartitioning(dependent=dependent)
        with pytest.raises(ValueError, match="8 distinct dependent coordinates out of 9"):
            jaxmbs.accelerations(mech, q0, qd0, 0.0, method=method)


@pytest.fixture
def float32():
    jax.config.update("jax_enable_x64", False)
    try:
        yield
    finally:
        jax.config.update("jax_enable_x64", True)


def test_float32_every_method(float32):
    mech = fourbar.fourbar(redundant=True)
    q, qd = fourbar.initial_state(mech, 1.0, 3.0)
    assert q.dtype == jnp.float32
    out = jax.jit(
        lambda q, qd: {
            name: jaxmbs.accelerations_and_multipliers(mech, q, qd, 0.0, method=name)
            for name in jaxmbs.METHODS
        }
    )(q, qd)
    qdd_ref, lam_ref = out["kkt"]
    for name, (qdd, lam) in out.items():
        assert qdd.dtype == lam.dtype == jnp.float32, name
        if name == "kkt":  # the reference itself
            continue
        assert_close(qdd, qdd_ref, 0, 1e-4 * float(jnp.max(jnp.abs(qdd_ref))), f"{name} q̈")
        assert_close(lam, lam_ref, 0, 1e-4 * float(jnp.max(jnp.abs(lam_ref))), f"{name} λ")


TS = jnp.linspace(0.0, 2.0, 401)


@pytest.fixture(scope="module")
def runs():
    """2 s of the redundant four-bar by every method, no stabilisation, rtol = atol = 1e-12.

    Methods that read all rows through a pseudoinverse (svd, eigen, wang-huston) see the
    drift as a slightly full-rank C and take a different step sequence than those on
    independent rows, so they agree at the level of the global integration error (3e-8 at
    tolerance 1e-10, 3e-10 at 1e-12), not of round-off; hence the tight tolerance.
    """
    mech = fourbar.fourbar(redundant=True)
    q0, qd0 = fourbar.initial_state(mech, np.pi / 3, 4.0)

    def run(method, **kwargs):
        return jaxmbs.simulate(
            mech, q0, qd0, (0.0, 2.0), saveat=TS, method=method, stabilization="none", **kwargs
        )

    # No rank check here (it is compiled into every solve); the partitioning test needs it.
    # Each formulation in all coordinates (`method="partitioned"` is the partition-switching
    # state space, tested in test_partitioning_switching.py).
    sols = {
        name: run(get_formulation(name), rtol=1e-12, atol=1e-12, rank_rtol=None)
        for name in jaxmbs.METHODS
    }
    return mech, run, sols


def test_short_simulation_agrees(runs):
    _, _, sols = runs
    ref = sols["kkt"]
    assert float(jnp.max(jnp.abs(ref.q[:, 2] - ref.q[0, 2]))) > 2.0  # the crank turns
    qdd_scale = float(jnp.max(jnp.abs(ref.qdd)))
    for name, sol in sols.items():
        assert bool(sol.result == jaxmbs.RESULTS.successful), name
        assert float(jnp.max(sol.position_residual)) < 1e-11, name
        if name == "kkt":  # the reference itself
            continue
        assert_close(sol.q, ref.q, 0, 1e-9, f"{name} q")
        assert_close(sol.qd, ref.qd, 0, 1e-8, f"{name} q̇")
        assert_close(sol.qdd, ref.qdd, 0, 1e-8 * qdd_scale, f"{name} q̈")


def test_partitioning_stops_where_its_partition_degenerates(runs):
    """With the rocker angle as the only independent coordinate, Φ_u is singular at the
    rocker's extreme positions: the simulation must stop there with
    `singular_configuration`, agreeing with the KKT solution up to that point."""
    mech, run, sols = runs
    ref = sols["kkt"]
    method = jaxmbs.CoordinatePartitioning(dependent=tuple(range(8)))  # v = rocker.phi
    sol = run(method, throw=False)
    assert bool(sol.result == jaxmbs.RESULTS.singular_configuration)
    C = jax.jit(jax.vmap(lambda q: jaxmbs.constraint_jacobian(mech, q, 0.0, mech.params)))(ref.q)
    indicator = jax.jit(jax.vmap(lambda c: method.pivot_condition(c, mech)[0]))(C)
    crossing = int(jnp.argmax(jnp.sign(indicator) != jnp.sign(indicator[0])))
    assert crossing > 0  # the rocker does reach an extreme position
    done = np.asarray(jnp.isfinite(sol.q[:, 0]))
    stop = int(np.argmin(done))  # the first output time after the stop
    assert crossing - 2 <= stop <= crossing + 2, (stop, crossing)
    assert_close(sol.q[: stop - 1], ref.q[: stop - 1], 0, 1e-6, "q before the stop")


TOL = 1e-12  # integration tolerance: finite differences need a smooth, accurate solve


@pytest.fixture(scope="module")
def final_angle():
    """Crank angle after 0.5 s of the redundant four-bar as a function of the coupler mass,
    and its central finite-difference derivative."""
    mech = fourbar.fourbar(redundant=True)
    q0, qd0 = fourbar.initial_state(mech, np.pi / 3, 3.0)

    def f(m2, method="qr", adjoint=None):
        sol = jaxmbs.simulate(
            mech,
            q0,
            qd0,
            (0.0, 0.5),
            params={**mech.params, "m2": m2},
            method=method,
            stabilization="none",
            rtol=TOL,
            atol=TOL,
            adjoint=adjoint,
        )
        return sol.q[-1, 2]

    m2, h = 2.0, 1e-4
    f_plus, f_minus = jax.jit(jax.vmap(f))(jnp.array([m2 + h, m2 - h]))
    fd = float(f_plus - f_minus) / (2 * h)
    assert abs(fd) > 1e-2  # a real dependence
    return f, m2, fd


@pytest.mark.parametrize(
    "method, mode", [("qr", "reverse"), ("svd", "forward"), ("partitioned", "forward")]
)
def test_gradient_matches_central_differences(final_angle, method, mode):
    """d(final crank angle)/d(coupler mass) through 0.5 s of motion. QR in reverse mode
    (`jax.grad`, what users call); SVD and partitioning in forward mode, cheaper to compile
    (reverse mode through every formulation is checked at single states above)."""
    f, m2, fd = final_angle
    if mode == "reverse":
        grad = jax.jit(jax.grad(lambda m: f(m, method)))(m2)
    else:
        grad = jax.jit(jax.jacfwd(lambda m: f(m, method, diffrax.ForwardMode())))(m2)
    assert abs(float(grad) - fd) < 1e-6 * abs(fd), (float(grad), fd)
