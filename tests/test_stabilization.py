"""Long runs: projection keeps Φ at round-off and conserves energy; drift is reported
without stabilisation and bounded with Baumgarte. The projection's sparse (banded) and dense
corrections agree."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.models import fourbar, mobile_robot, slider_crank

CASES = {
    "fourbar": lambda: (lambda m: (m, *fourbar.initial_state(m)))(fourbar.fourbar()),
    "slider-crank": lambda: (lambda m: (m, *slider_crank.initial_state(m)))(
        slider_crank.slider_crank()
    ),
}
TS = jnp.linspace(0.0, 10.0, 201)
#: Projections of a holonomic mechanism and of one with Pfaffian rows.
HOLONOMIC_AND_PFAFFIAN = pytest.mark.parametrize(
    "model",
    [
        (fourbar.fourbar, fourbar.initial_state),
        (mobile_robot.mobile_robot, mobile_robot.initial_state),
    ],
    ids=["fourbar", "mobile-robot"],
)


def run(case, stabilization, tol):
    mech, q0, qd0 = CASES[case]()
    return jaxmbs.simulate(
        mech, q0, qd0, (0.0, 10.0), saveat=TS, stabilization=stabilization, rtol=tol, atol=tol
    )


def energy_drift(sol):
    return float(jnp.max(jnp.abs(sol.energy - sol.energy[0])) / jnp.abs(sol.energy[0]))


@pytest.mark.parametrize("case", CASES)
def test_projection_keeps_constraints_and_energy(case):
    sol = run(case, "projection", 1e-10)
    assert bool(sol.result == jaxmbs.RESULTS.successful)
    assert float(jnp.max(sol.position_residual)) < 1e-10
    assert float(jnp.max(sol.velocity_residual)) < 1e-10
    assert energy_drift(sol) < 1e-8
    # It really moved: the crank turned through a wide range.
    assert float(jnp.ptp(sol.q[:, 2])) > 1.0


@pytest.mark.parametrize("case", CASES)
def test_drift_without_and_with_baumgarte(case):
    free = run(case, "none", 1e-6)
    baumgarte = run(case, jaxmbs.Baumgarte(alpha=10.0, beta=10.0), 1e-6)
    projected = run(case, "projection", 1e-6)
    drift_free = float(jnp.max(free.position_residual))
    # Unstabilised drift grows and is reported; Baumgarte bounds it; projection removes it.
    assert drift_free > 1e-8
    assert float(free.position_residual[-1]) > float(free.position_residual[20])
    assert float(jnp.max(baumgarte.position_residual)) < 0.1 * drift_free
    assert float(jnp.max(projected.position_residual)) < 1e-12
    assert np.all(np.isfinite(np.asarray(baumgarte.q)))


def test_projection_with_a_tolerance_projects_only_beyond_it():
    """Newton–Raphson only where max |Φ| > tolerance: the residual stays below the tolerance
    but is no longer driven to round-off after every step; steps are unchanged."""
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    ts = np.linspace(0.0, 5.0, 201)

    def residual(stabilization):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 5.0), saveat=ts, stabilization=stabilization, rtol=1e-7, atol=1e-7
        )
        return float(jnp.max(sol.position_residual)), int(sol.stats["num_steps"])

    always, steps_always = residual(jaxmbs.Projection())
    lazy, steps_lazy = residual(jaxmbs.Projection(tolerance=1e-8))
    assert always < 1e-13
    assert 1e-12 < lazy <= 1e-8
    assert steps_lazy == pytest.approx(steps_always, rel=0.05)


@HOLONOMIC_AND_PFAFFIAN
def test_sparse_and_dense_projections_agree(model):
    """The projection's M-weighted corrections by the banded range-space solve (sparsity
    known) and by dense Cholesky/LU (no sparsity) give the same state, on the constraint
    manifolds to round-off; the mobile robot adds Pfaffian rows to the velocity projection."""
    build, initial_state = model
    mech = build()
    q0, qd0 = initial_state(mech)
    rng = np.random.default_rng(8)
    q = q0 + 1e-3 * rng.normal(size=q0.shape)
    qd = qd0 + rng.normal(size=qd0.shape)
    dense = jaxmbs.analyze_structure(mech, q0, sparsity=False)
    assert mech.structure.sparsity is not None and dense.sparsity is None

    def project(mech, q, qd):
        q = jaxmbs.project_positions(mech, q, 0.0, mech.params, 3)
        return q, jaxmbs.project_velocities(mech, q, qd, 0.0, mech.params)

    q_sparse, qd_sparse = jax.jit(functools.partial(project, mech))(q, qd)
    q_dense, qd_dense = jax.jit(functools.partial(project, mech.replace_structure(dense)))(q, qd)
    phi = jaxmbs.position_residual(mech, q_sparse, 0.0, mech.params)
    c = jaxmbs.velocity_residual(mech, q_sparse, qd_sparse, 0.0, mech.params)
    assert float(jnp.max(jnp.abs(q_sparse - q))) > 1e-4  # a real correction
    assert float(jnp.max(jnp.abs(q_sparse - q_dense))) < 1e-13
    assert float(jnp.max(jnp.abs(qd_sparse - qd_dense))) < 1e-12 * float(jnp.max(jnp.abs(qd)))
    assert float(jnp.max(jnp.abs(phi))) < 1e-13
    assert float(jnp.max(jnp.abs(c))) < 1e-12 * float(jnp.max(jnp.abs(qd)))


def drifted_state(model, drift: float, seed: int):
    """The model's initial state with random errors of size `drift` (a step's drift), and
    the random generator."""
    build, initial_state = model
    mech = build()
    q0, qd0 = initial_state(mech)
    rng = np.random.default_rng(seed)
    q = q0 + drift * rng.normal(size=q0.shape)
    return mech, q, qd0 + drift * rng.normal(size=qd0.shape), rng


@HOLONOMIC_AND_PFAFFIAN
def test_step_projection_with_one_factorisation(model):
    """The step projector (chord Newton, Φ_q and M factorised once at the step's end state
    and, without Pfaffian rows, reused for the velocities) lands on both manifolds from a
    step's drift ε and agrees with the Newton projections to O(ε²)."""
    mech, q, qd, _ = drifted_state(model, 1e-6, seed=9)

    @jax.jit
    def both(q, qd):
        step = jaxmbs.integrate.project_state(mech, (q, qd), 0.0, mech.params, 2)
        q_n = jaxmbs.project_positions(mech, q, 0.0, mech.params, 2)
        return step, (q_n, jaxmbs.project_velocities(mech, q_n, qd, 0.0, mech.params))

    (q_s, qd_s), (q_n, qd_n) = both(q, qd)
    phi = jaxmbs.position_residual(mech, q_s, 0.0, mech.params)
    c = jaxmbs.velocity_residual(mech, q_s, qd_s, 0.0, mech.params)
    assert float(jnp.max(jnp.abs(q_s - q))) > 1e-7  # a real correction
    assert float(jnp.max(jnp.abs(phi))) < 1e-14
    # The velocity correction uses C factorised before the position correction Δq = O(ε):
    # it leaves c = O(ε · |Δq̇|) = O(ε²) (ε = 1e-6 here; measured 3e-13), not round-off.
    assert float(jnp.max(jnp.abs(c))) < 1e-11
    assert float(jnp.max(jnp.abs(q_s - q_n))) < 1e-14
    assert float(jnp.max(jnp.abs(qd_s - qd_n))) < 1e-11 * float(jnp.max(jnp.abs(qd)))


@HOLONOMIC_AND_PFAFFIAN
def test_step_projection_derivative(model):
    """The step projector's custom derivative (that of the converged projection) agrees with
    central differences of the projector in t, q, q̇ and the parameters to O(ε) (ε = 1e-7
    the drift; a dropped or flipped correction is off by O(1)), and reverse mode is its
    transpose: ⟨w, J v⟩ = ⟨Jᵀw, v⟩."""
    mech, q, qd, rng = drifted_state(model, 1e-7, seed=10)
    x = (jnp.asarray(0.3), q, qd, {k: jnp.asarray(v) for k, v in mech.params.items()})
    v = jax.tree.map(lambda leaf: jnp.asarray(rng.normal(size=np.shape(leaf))), x)

    def project(t, q, qd, params):
        return jaxmbs.integrate.project_state(mech, (q, qd), t, params, 2)

    def along(h):
        return jnp.concatenate(project(*jax.tree.map(lambda a, b: a + h * b, x, v)))

    tangent = jnp.concatenate(jax.jit(lambda x, v: jax.jvp(project, x, v)[1])(x, v))
    h = 1e-5
    central = (jax.jit(along)(h) - jax.jit(along)(-h)) / (2 * h)
    assert float(jnp.max(jnp.abs(tangent))) > 0.1
    assert float(jnp.max(jnp.abs(tangent - central))) < 1e-5 * float(jnp.max(jnp.abs(central)))
    w = jnp.asarray(rng.normal(size=tangent.shape))
    n = q.shape[0]
    cotangent = jax.jit(lambda x, w: jax.vjp(project, *x)[1]((w[:n], w[n:])))(x, w)
    pairs = zip(jax.tree.leaves(cotangent), jax.tree.leaves(v), strict=True)
    dot = sum(jnp.vdot(a, b) for a, b in pairs)
    assert float(jnp.abs(dot - jnp.vdot(w, tangent))) < 1e-12 * float(jnp.abs(dot))


def test_holds_at_a_step_end_reads_the_residual_left_by_the_projection():
    """`Projection.project_checked` decides `holds` on Φ(q⁺) from the velocity projection's
    jvp: the same (q⁺, q̇⁺) as `project` and the same decision as `holds` at q⁺, both where
    the iterations remove the drift (holds) and where none run (it does not)."""
    mech = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(mech)
    q = q0 + 1e-3 * jnp.asarray(np.random.default_rng(3).normal(size=q0.shape))
    drift = float(jnp.max(jnp.abs(jaxmbs.position_residual(mech, q, 0.2, mech.params))))
    assert drift > 1e-4
    for iterations, expected in ((2, True), (0, False)):
        stab = jaxmbs.Projection(iterations=iterations)
        q1, qd1, holds = stab.project_checked(mech, q, qd0, 0.2, mech.params)
        q2, qd2 = stab.project(mech, q, qd0, 0.2, mech.params)
        np.testing.assert_allclose(q1, q2, rtol=0, atol=1e-15)
        np.testing.assert_allclose(qd1, qd2, rtol=0, atol=1e-15)
        assert bool(holds) is expected
        assert bool(stab.holds(mech, q1, 0.2, mech.params)) is expected
