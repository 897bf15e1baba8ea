"""`jaxmbs.GeneralizedAlpha`: generalized-α on the index-3 equations (Chung & Hulbert 1993,
Arnold & Brüls 2007) through `simulate`.

Checked: second order by step halving on the four-bar against a tight Tsit5 reference;
|Φ| at round-off at every output (all step ends) with no stabilisation; ρ∞ = 1 keeps the
energy to O(h²); ρ∞ < 1 damps a stiff mode by the spectral radius of the method's
amplification matrix for the linear test equation; the Newton multipliers equal the KKT
formulation's at the same state (redundant four-bar); gradients in reverse and forward mode
equal central differences; a batch over ρ∞ runs vmapped; float32 runs; step-size control
by the local error estimate; a Newton failure is a named failed step; the banded iteration
matrix (a chain with spring-dampers across its joints) gives the dense one's trajectory and
exact gradients.

Compilations: the step sizes and ρ∞ given as arrays share one program where they can,
through module-scoped fixtures; forward mode and central differences share one program.
"""

import diffrax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg

import jaxmbs
from jaxmbs.kinematics import banded_lu
from jaxmbs.kinematics.algebra import DENSE_NEWTON, BandedAlgebra, DenseAlgebra
from jaxmbs.kinematics.structure import iteration_pattern
from jaxmbs.models import chain, fourbar

T = 0.5  # four-bar run length
OUT = np.linspace(0.0, T, 51)  # outputs every 0.01 s: step ends of every step size below
STEPS = (2e-4, 1e-4)
RHOS = (0.8, 1.0)


def _ga(mech, q0, qd0, t1, h, rho, saveat, **options):
    return jaxmbs.simulate(
        mech, q0, qd0, (0.0, t1), solver=jaxmbs.GeneralizedAlpha(rho_inf=rho),
        stepsize_controller=diffrax.ConstantStepSize(), dt0=h, saveat=saveat,
        stabilization="none", **options,
    )  # fmt: skip


@pytest.fixture(scope="module")
def four_bar():
    """The four-bar with its redundant distance constraint (redundancy 1)."""
    mech = fourbar.fourbar(redundant=True)
    assert mech.structure.redundancy == 1
    q0, qd0 = fourbar.initial_state(mech)
    return mech, q0, qd0


@pytest.fixture(scope="module")
def reference(four_bar):
    mech, q0, qd0 = four_bar
    return jaxmbs.simulate(mech, q0, qd0, (0.0, T), saveat=OUT, rtol=1e-12, atol=1e-12)


@pytest.fixture(scope="module")
def runs(four_bar):
    """{(ρ∞, h): Solution} on the four-bar, outputs `OUT`; one program (the step given as
    an array, ρ∞ traced)."""
    mech, q0, qd0 = four_bar
    return {
        (rho, h): _ga(mech, q0, qd0, T, jnp.asarray(h), rho, OUT) for h in STEPS for rho in RHOS
    }


def _slopes(errors):
    return np.log2(np.asarray(errors[:-1]) / np.asarray(errors[1:]))


def test_order_two(runs, reference):
    """Step halving: global errors in q and q̇ fall by 4 (order 2); q̈ and λ after their
    initial transient (t ≥ 0.1 s) too."""
    late = OUT >= 0.1
    errors = {name: [] for name in ("q", "qd", "qdd", "multipliers")}
    for h in STEPS:
        sol = runs[(0.8, h)]
        for name in errors:
            diff = np.abs(np.asarray(getattr(sol, name)) - np.asarray(getattr(reference, name)))
            errors[name].append(diff[late].max() if name in ("qdd", "multipliers") else diff.max())
    for name, e in errors.items():
        print(f"{name}: errors {np.array2string(np.asarray(e), precision=3)}, slopes {_slopes(e)}")
    for name in errors:
        assert abs(_slopes(errors[name])[-1] - 2.0) < 0.15, name
    assert errors["q"][-1] < 1e-4


def test_constraints_at_round_off(runs):
    """Positions satisfy Φ = 0 to round-off at every output (step ends), no stabilisation."""
    worst = max(float(np.max(sol.position_residual)) for sol in runs.values())
    print(f"max |Φ| = {worst:.2e}")
    assert worst < 1e-14
    assert all(bool(sol.successful) for sol in runs.values())


def test_energy_rho_one(runs):
    """ρ∞ = 1 (no numerical dissipation): the energy error of the conservative four-bar is
    O(h²) and does not grow; ρ∞ = 0.8 dissipates more."""

    def drift(sol):
        e = np.asarray(sol.energy)
        return np.max(np.abs(e - e[0])) / np.max(np.abs(e))

    drifts = [drift(runs[(1.0, h)]) for h in STEPS]
    print(f"relative energy drift, ρ∞ = 1: {drifts}, slopes {_slopes(drifts)}")
    assert abs(_slopes(drifts)[-1] - 2.0) < 0.1
    assert drifts[-1] < 1e-6


def amplification_matrix(rho_inf: float, omega_h: float) -> np.ndarray:
    """A with z_{n+1} = A z_n, z = (x, h ẋ, h² a), for ẍ = −ω²x (eqs 2–4 of the module
    `jaxmbs.integrate.generalized_alpha` with q̈ = −ω²x):

        [1          0  −β    ] [x  ]       [1     1  ½ − β ] [x  ]
        [0          1  −γ    ] [hẋ ]     = [0     1  1 − γ ] [hẋ ]
        [(1−α_f)Ω²  0  1 − α_m] [h²a]_{n+1} [−α_fΩ² 0  −α_m  ] [h²a]_n ,   Ω = ωh."""
    c = jaxmbs.GeneralizedAlpha(rho_inf=rho_inf).coefficients
    am, af, g, b = (float(v) for v in (c.alpha_m, c.alpha_f, c.gamma, c.beta))
    w2 = omega_h**2
    left = np.array([[1.0, 0.0, -b], [0.0, 1.0, -g], [(1 - af) * w2, 0.0, 1 - am]])
    right = np.array([[1.0, 1.0, 0.5 - b], [0.0, 1.0, 1 - g], [-af * w2, 0.0, -am]])
    return np.linalg.solve(left, right)


def test_amplification_matrix_limits():
    """ρ(A) → ρ∞ as Ω → ∞ and → 1 as Ω → 0 (Chung & Hulbert's design)."""
    for rho in (0.0, 0.5, 0.8, 1.0):
        assert abs(max(abs(np.linalg.eigvals(amplification_matrix(rho, 1e6)))) - rho) < 1e-3
        assert abs(max(abs(np.linalg.eigvals(amplification_matrix(rho, 1e-3)))) - 1) < 1e-9


def _spring_mass() -> jaxmbs.Mechanism:
    """x1 on a soft spring to the ground, a stiff spring x1–x2, and x3 tied to x2 by the
    constraint x2 − x3 = 0: two modes, one soft, one stiff."""
    masses = (1.0, 0.5, 0.5)

    def forces(t, q, qd, p):
        stiff = p["k_stiff"] * (q[1] - q[0])
        return jnp.stack([stiff - p["k_soft"] * q[0], -stiff, jnp.zeros_like(q[2])])

    def potential(q, p):
        return 0.5 * p["k_soft"] * q[0] ** 2 + 0.5 * p["k_stiff"] * (q[1] - q[0]) ** 2

    return jaxmbs.Mechanism(
        lambda q, p: jnp.diag(jnp.asarray(masses, q.dtype)), forces,
        lambda t, q, p: jnp.stack([q[1] - q[2]]), params={"k_soft": 1.0, "k_stiff": 1e6},
        n=3, potential_energy=potential, reference_q=np.zeros(3),
    )  # fmt: skip


def test_stiff_mode_damped_at_the_theoretical_rate():
    """On the spring-mass, each modal coordinate follows z_k = A(ωh)^k z_0 (the amplification
    matrix above) to round-off, for ρ∞ = 0.5, 0.8, 1 in one vmapped run: so the stiff mode
    (ωh ≈ 141) decays by ρ(A) per step — measured from its energy — while the soft one
    (ωh ≈ 0.07) keeps its amplitude."""
    mech, rhos, h, n_steps = _spring_mass(), (0.5, 0.8, 1.0), 0.1, 60
    null = np.array([[1.0, 0.0], [0.0, np.sqrt(0.5)], [0.0, np.sqrt(0.5)]])  # B null = 0
    M, K = np.diag([1.0, 0.5, 0.5]), np.array([[1e6 + 1, -1e6, 0], [-1e6, 1e6, 0], [0, 0, 0]])
    w2, modes = scipy.linalg.eigh(null.T @ K @ null, null.T @ M @ null)  # soft, stiff
    amplitudes = np.array([1.0, 1e-2])
    q0 = null @ modes @ amplitudes
    ts = h * np.arange(n_steps + 1)
    sols = jax.vmap(
        lambda rho: _ga(mech, q0, np.zeros(3), ts[-1], h, rho, ts, max_steps=n_steps + 1)
    )(jnp.asarray(rhos))
    to_modal = modes.T @ null.T @ M  # η = Vᵀ M_r Nᵀ q
    for j, rho in enumerate(rhos):
        eta, eta_d = np.asarray(sols.q[j]) @ to_modal.T, np.asarray(sols.qd[j]) @ to_modal.T
        for i, (w, x0) in enumerate(zip(np.sqrt(w2), amplitudes, strict=True)):
            A = amplification_matrix(rho, w * h)
            z = [np.array([x0, 0.0, -(w**2) * h**2 * x0])]
            for _ in range(n_steps):
                z.append(A @ z[-1])
            z = np.array(z)
            assert np.max(np.abs(eta[:, i] - z[:, 0])) < 1e-9 * x0, (rho, i)
            assert np.max(np.abs(h * eta_d[:, i] - z[:, 1])) < 1e-9 * x0, (rho, i)
        stiff, soft = np.sqrt(w2[1]) * h, np.sqrt(w2[0]) * h
        energy = 0.5 * (eta_d[:, 1] ** 2 + w2[1] * eta[:, 1] ** 2)
        k = np.arange(10, n_steps + 1)
        measured = np.exp(np.polyfit(k, np.log(energy[k]), 1)[0] / 2)
        theory = max(abs(np.linalg.eigvals(amplification_matrix(rho, stiff))))
        soft_energy = 0.5 * (eta_d[:, 0] ** 2 + w2[0] * eta[:, 0] ** 2)
        kept = soft_energy[-1] / soft_energy[0]
        print(
            f"ρ∞ = {rho}: stiff mode (ωh = {stiff:.1f}) decays by {measured:.4f} per step, "
            f"ρ(A) = {theory:.4f}; soft mode (ωh = {soft:.3f}) keeps {kept:.8f} of its energy"
        )
        assert abs(measured - theory) < 0.01 * theory
        assert abs(theory - rho) < 0.05
        assert kept > 0.999


def test_multipliers_equal_kkt_at_the_same_state(four_bar, runs):
    """The Newton solve's multipliers (minimum-norm over all rows of the redundant
    four-bar) and accelerations equal the KKT formulation's at the same (q, q̇): to 1e-6
    relative early in the run (h = 1e-4), and to 1e-4 over it, as q̇'s O(h²) violation of
    the velocity constraints (which the index-3 method leaves) grows."""
    mech = four_bar[0]
    sol = runs[(0.8, STEPS[-1])]
    qdd, lam = jax.jit(
        jax.vmap(
            lambda q, qd, t: jaxmbs.accelerations_and_multipliers(mech, q, qd, t, method="kkt")
        )
    )(sol.q, sol.qd, sol.ts)
    lam_diff = np.max(np.abs(sol.multipliers - lam), axis=1) / np.max(np.abs(lam))
    qdd_diff = np.max(np.abs(sol.qdd - qdd), axis=1) / np.max(np.abs(qdd))
    print(f"relative |λ − λ_kkt| {np.array2string(lam_diff[::10], precision=2)}")
    print(f"relative |q̈ − q̈_kkt| {np.array2string(qdd_diff[::10], precision=2)}")
    early = (OUT >= 0.01) & (OUT <= 0.05)  # past the initial transient (100 steps)
    assert lam_diff[early].max() < 1e-6 and qdd_diff[early].max() < 1e-6
    assert lam_diff.max() < 1e-4


def test_gradients_against_central_differences(four_bar):
    """d(crank angle and a multiplier at 0.1 s)/d(masses, g): reverse mode (the discrete
    adjoint through the implicit Newton derivative), with the step given as an array (traced:
    the recorded step times stay decisions), and forward mode with the step a float, against
    central differences."""
    mech, q0, qd0 = four_bar
    names = ("m2", "m3", "g")
    base = jnp.asarray([mech.params[k] for k in names])

    def loss(x, adjoint=None, h=5e-3):
        params = dict(zip(names, x, strict=True))
        sol = _ga(mech, q0, qd0, 0.1, h, 0.8, None, params=params, adjoint=adjoint)
        return sol.q[-1, 2] + 1e-3 * sol.multipliers[-1, 0]

    reverse = jax.jit(jax.grad(loss), static_argnums=1)(base, None, jnp.asarray(5e-3))
    # Forward mode and the central differences' values from one compiled program.
    jvp = jax.jit(lambda x, v: jax.jvp(lambda y: loss(y, diffrax.ForwardMode()), (x,), (v,)))
    step = 1e-4 * np.abs(np.asarray(base))
    forward, central = np.zeros(3), np.zeros(3)
    for i, e in enumerate(np.eye(3)):
        forward[i] = jvp(base, e)[1]
        central[i] = (jvp(base + step[i] * e, e)[0] - jvp(base - step[i] * e, e)[0]) / (2 * step[i])
    rev_error = float(np.max(np.abs(reverse - central)) / np.max(np.abs(central)))
    fwd_error = float(np.max(np.abs(forward - central)) / np.max(np.abs(central)))
    print(f"gradient {reverse}; relative error reverse {rev_error:.1e}, forward {fwd_error:.1e}")
    assert rev_error < 1e-6 and fwd_error < 1e-6


def test_newton_failure_is_a_named_failed_step():
    """A Newton iteration that does not converge fails the step: `step_failed` with its
    time and NaN outputs past it (throw=False), a `SimulationError` naming it (throw=True)."""
    mech = _spring_mass()
    q0 = jnp.asarray([1.0, 0.0, 0.0])
    solver = jaxmbs.GeneralizedAlpha(rho_inf=0.8, max_iterations=1)
    options = dict(
        solver=solver, stepsize_controller=diffrax.ConstantStepSize(), dt0=0.1,
        saveat=np.array([0.0, 0.5]), stabilization="none",
    )  # fmt: skip
    sol = jaxmbs.simulate(mech, q0, jnp.zeros(3), (0.0, 0.5), throw=False, **options)
    assert sol.result == jaxmbs.RESULTS.step_failed
    assert np.isnan(np.asarray(sol.q[1])).all() and np.isfinite(np.asarray(sol.q[0])).all()
    with pytest.raises(jaxmbs.SimulationError, match="generalized-α Newton"):
        jaxmbs.simulate(mech, q0, jnp.zeros(3), (0.0, 0.5), **options)
    with pytest.raises(ValueError, match="rho_inf"):
        jaxmbs.GeneralizedAlpha(rho_inf=1.5)
    with pytest.raises(ValueError, match="newton"):
        jaxmbs.GeneralizedAlpha(newton="chord")


def test_modified_newton_converges_to_the_full_newton_solution(four_bar):
    """The iteration matrix factorised once per step (`newton="modified"`, the default) and
    at every iterate (`"full"`) solve the same step equations: the same trajectory up to the
    Newton tolerance (√ε relative on q̈ and λ, which moves q by β'·that), over 0.2 s at
    h = 1e-3 (200 steps)."""
    mech, q0, qd0 = four_bar
    runs = {}
    for newton in ("modified", "full"):
        solver = jaxmbs.GeneralizedAlpha(rho_inf=0.8, newton=newton)
        runs[newton] = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 0.2), solver=solver, dt0=1e-3, saveat=OUT[:21],
            stepsize_controller=diffrax.ConstantStepSize(), stabilization="none",
        )  # fmt: skip
    modified, full = runs["modified"], runs["full"]

    def relative(field):
        a, b = np.asarray(getattr(modified, field)), np.asarray(getattr(full, field))
        return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))

    errors = {field: relative(field) for field in ("q", "qd", "qdd", "multipliers")}
    print(errors)
    assert errors["q"] < 1e-11 and errors["qd"] < 1e-9
    assert errors["qdd"] < 1e-6 and errors["multipliers"] < 1e-6
    assert float(np.max(np.asarray(modified.position_residual))) < 1e-13


def test_one_failed_sample_loses_no_other(four_bar, runs):
    """Under `vmap`, a sample whose Newton iteration fails (the crank 400× faster, at most
    3 iterations) stops with `step_failed` at the end of its last step, NaN past it; the
    other sample runs to the end as it runs alone (the module's run with the default
    iteration limit: the same iterates, to 1e-12)."""
    mech, q0, qd0 = four_bar

    def run(scale):
        sol = jaxmbs.simulate(
            mech, q0, scale * qd0, (0.0, T), saveat=OUT, stabilization="none", throw=False,
            solver=jaxmbs.GeneralizedAlpha(rho_inf=0.8, max_iterations=3),
            stepsize_controller=diffrax.ConstantStepSize(), dt0=2e-4,
        )  # fmt: skip
        failed = sol.result == jaxmbs.RESULTS.step_failed
        return sol.q, failed, sol.result == jaxmbs.RESULTS.successful, sol.t_final

    q, failed, successful, t_final = jax.jit(jax.vmap(run))(jnp.array([400.0, 1.0]))
    assert bool(failed[0]) and bool(successful[1])
    assert 0.0 < float(t_final[0]) < 0.01 and abs(float(t_final[1]) - T) < 1e-12
    past = float(t_final[0]) < OUT
    assert np.isnan(np.asarray(q[0][past])).all() and np.isfinite(np.asarray(q[0][~past])).all()
    np.testing.assert_allclose(q[1], runs[(0.8, 2e-4)].q, rtol=0, atol=1e-12)


def test_float32_runs(float32):
    """float32 (x64 off): the spring-mass runs, Φ holds to float32 round-off, and the motion
    follows the float64 recurrence to float32 accuracy. Its stiff spring is softened to
    100 N/m: positions are fixed through q̈ to ~ε h²β|q̈|, and with 1e6 N/m (ωh = 141,
    h²β|q̈| ≈ 60 against |q| ≈ 1) |Φ| is 3e-4 in float32 (5e-13 in float64)."""
    mech, h, n_steps, k = _spring_mass(), 0.1, 10, 100.0
    q0 = jnp.asarray([1.0, 0.1, 0.1])
    ts = h * np.arange(n_steps + 1)
    sol = _ga(mech, q0, jnp.zeros(3), ts[-1], h, 0.8, ts, max_steps=n_steps + 1,
              params={"k_stiff": k})  # fmt: skip
    assert sol.q.dtype == jnp.float32 and bool(sol.successful)
    print(f"float32: max |Φ| = {float(np.max(sol.position_residual)):.1e}")
    assert float(np.max(sol.position_residual)) < 1e-6
    x0 = np.array([1.0, 0.1])  # (x1, x2 = x3): the reduced system, M_r = diag(1, 1)
    w2, modes = np.linalg.eigh(np.array([[k + 1, -k], [-k, k]]))
    expected = []
    for w, e in zip(np.sqrt(w2), modes.T @ x0, strict=True):
        A = amplification_matrix(0.8, w * h)
        expected.append((np.linalg.matrix_power(A, n_steps) @ [e, 0.0, -(w**2) * h**2 * e])[0])
    np.testing.assert_allclose(np.asarray(sol.q[-1, :2], float), modes @ expected, atol=1e-5)


def test_adaptive_steps(four_bar, reference):
    """With the default PID controller the local error estimate (9) sets the step: steps
    grow as tol^(−1/3) and the global error falls as tol^(2/3) (local error h³ per step,
    global h²), with few rejected steps; Φ holds at the step ends (t1 is one)."""
    mech, q0, qd0 = four_bar
    solver = jaxmbs.GeneralizedAlpha(rho_inf=0.8)
    sols = [
        jaxmbs.simulate(mech, q0, qd0, (0.0, T), solver=solver, rtol=tol, atol=tol,
                        saveat=OUT, stabilization="none")
        for tol in (1e-6, 1e-8)
    ]  # fmt: skip
    errors = [float(np.max(np.abs(sol.q - reference.q))) for sol in sols]
    steps = [int(sol.stats["num_accepted_steps"]) for sol in sols]
    rejected = [int(sol.stats["num_rejected_steps"]) for sol in sols]
    error_slope, step_slope = np.log10(errors[0] / errors[1]) / 2, np.log10(steps[1] / steps[0]) / 2
    print(f"tol 1e-6, 1e-8: errors {errors}, steps {steps} (rejected {rejected}); "
          f"slopes: error {error_slope:.2f}, steps {step_slope:.2f}")  # fmt: skip
    assert abs(error_slope - 2 / 3) < 0.1 and abs(step_slope - 1 / 3) < 0.05
    assert rejected[1] < 0.15 * steps[1]
    assert all(float(sol.position_residual[-1]) < 1e-14 for sol in sols)


#: 10 links: 50 unknowns, above `jaxmbs.kinematics.algebra.DENSE_NEWTON` (the banded path).
CHAIN_LINKS = 10


@pytest.fixture(scope="module")
def spring_chain():
    """The planar chain of 10 links with a torsional spring-damper across every joint, its
    banded structure (the default) and the same structure without sparsity (dense)."""
    mech = chain.chain(CHAIN_LINKS, stiffness=50.0, damping=0.5)
    q0, qd0 = chain.initial_state(mech)
    assert mech.n + mech.structure.rank > DENSE_NEWTON
    dense = mech.replace_structure(jaxmbs.analyze_structure(mech, q0, sparsity=False))
    assert isinstance(mech.structure.algebra, BandedAlgebra)
    assert isinstance(dense.structure.algebra, DenseAlgebra)
    return mech, dense, q0, qd0


def _reverse_against_central(loss, base: jax.Array) -> float:
    """The largest difference, relative to the largest component, between the reverse-mode
    gradient of the jitted `loss` at `base` and its central differences (steps 1e-4 of each
    component)."""
    reverse = np.asarray(jax.jit(jax.grad(loss))(base))
    step = 1e-4 * np.abs(np.asarray(base))
    central = np.array([
        (loss(base + step[i] * e) - loss(base - step[i] * e)) / (2 * step[i])
        for i, e in enumerate(np.eye(base.shape[0]))
    ])  # fmt: skip
    error = float(np.max(np.abs(reverse - central)) / np.max(np.abs(central)))
    print(f"gradient {reverse}, central {central}: relative error {error:.1e}")
    return error


def test_iteration_pattern_holds_the_springs(spring_chain):
    """The pattern of S couples the angles of neighbouring links (the spring-dampers, not
    the mass matrix), and the banded LU's bandwidth stays that of a few bodies."""
    mech = spring_chain[0]
    pattern = np.zeros((mech.n + mech.n_holonomic,) * 2, dtype=bool)
    for i, cols in enumerate(iteration_pattern(mech)):
        pattern[i, list(cols)] = True
    angles = 3 * np.arange(CHAIN_LINKS) + 2
    assert pattern[angles[1:], angles[:-1]].all() and pattern[angles[:-1], angles[1:]].all()
    assert not mech.structure.sparsity.mass_pattern[angles[1:], angles[:-1]].any()
    plan = banded_lu.lu_plan(mech.n, iteration_pattern(mech), mech.structure.independent_rows)
    print(f"unknowns {plan.size}, bandwidth {plan.width}, colours {plan.seeds.shape[0]}")
    assert plan.width <= 8 and plan.seeds.shape[0] <= 8


def test_banded_iteration_matrix_equals_dense(spring_chain):
    """The banded and the dense iteration matrices give one trajectory on the spring-damper
    chain, with Newton run to round-off (tolerance 1e-13): q and q̇ to 1e-10; q̈ and λ to
    1e-9, as the positions fix q̈ only to ~ε|q|/β' ≈ 9e-11 here (module notes of
    `jaxmbs.integrate.generalized_alpha`; measured 6e-11 and 1.7e-10)."""
    mech, dense, q0, qd0 = spring_chain
    ts = np.linspace(0.0, 0.5, 11)

    def run(m):
        return jaxmbs.simulate(
            m, q0, qd0, (0.0, ts[-1]), saveat=ts, stabilization="none", dt0=1e-2,
            solver=jaxmbs.GeneralizedAlpha(rho_inf=0.8, tolerance=1e-13),
            stepsize_controller=diffrax.ConstantStepSize(),
        )  # fmt: skip

    banded, full = run(mech), run(dense)
    for name in ("q", "qd", "qdd", "multipliers"):
        a, b = np.asarray(getattr(banded, name)), np.asarray(getattr(full, name))
        diff = float(np.max(np.abs(a - b)) / max(1.0, np.max(np.abs(b))))
        print(f"{name}: banded − dense {diff:.1e} (relative to max(1, |·|))")
        assert diff < (1e-10 if name in ("q", "qd") else 1e-9), name
    assert float(np.max(banded.position_residual)) < 1e-12


def test_gradient_through_the_banded_iteration_matrix(spring_chain):
    """d(last link's angle at 0.2 s)/d(k, c, m) through the banded Newton solve: reverse mode
    (the implicit derivative of each step, its banded solve transposed) against central
    differences."""
    mech, _, q0, qd0 = spring_chain
    names = ("k", "c", "m")
    base = jnp.asarray([mech.params[k] for k in names])

    @jax.jit
    def loss(x):
        params = {**mech.params, **dict(zip(names, x, strict=True))}
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 0.2), params=params, stabilization="none", dt0=1e-2,
            solver=jaxmbs.GeneralizedAlpha(rho_inf=0.8),
            stepsize_controller=diffrax.ConstantStepSize(),
        )  # fmt: skip
        return sol.q[-1, -1]

    assert _reverse_against_central(loss, base) < 1e-6


def test_stabilized_index2_keeps_both_constraint_levels(four_bar, reference, runs):
    """The stabilized index-2 form (module notes, eqs 7′ and 11): second order for q, q̇, q̈
    and λ by step halving (one program: the step given as an array), |Φ| and |c| at
    round-off at every output, where the index-3 form at the same step leaves |c| at O(h²)."""
    mech, q0, qd0 = four_bar
    solver = jaxmbs.GeneralizedAlpha(rho_inf=0.8, stabilized_index2=True)
    errors = []
    for h in STEPS:
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, T), solver=solver, dt0=jnp.asarray(h), saveat=OUT,
            stepsize_controller=diffrax.ConstantStepSize(), stabilization="none",
        )  # fmt: skip
        assert float(np.max(np.asarray(sol.position_residual))) < 1e-14
        assert float(np.max(np.asarray(sol.velocity_residual))) < 1e-13
        errors.append([
            float(np.max(np.abs(np.asarray(getattr(sol, f)) - np.asarray(getattr(reference, f)))))
            for f in ("q", "qd", "qdd", "multipliers")
        ])  # fmt: skip
    slopes = _slopes(errors)
    index3_c = float(np.max(np.asarray(runs[(0.8, STEPS[-1])].velocity_residual)))
    print(f"errors {errors}; slopes {slopes}; index-3 |c| {index3_c:.1e}")
    assert np.all((slopes > 1.9) & (slopes < 2.1))
    assert index3_c > 1e-8


def test_stabilized_index2_gradient_through_the_default_projection(four_bar):
    """With the velocities on their constraints, `simulate`'s default projection removes only
    round-off, and its derivative rule (exact up to the drift removed) is exact: reverse mode
    through the stabilized form equals central differences to 1e-6 (the index-3 form, whose
    velocities drift by O(h²), is 2.6e-4 off with the projection, module notes)."""
    mech, q0, qd0 = four_bar
    names = ("m2", "m3", "g")
    base = jnp.asarray([mech.params[k] for k in names])
    solver = jaxmbs.GeneralizedAlpha(rho_inf=0.8, stabilized_index2=True)

    @jax.jit
    def loss(x):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, 0.1), params=dict(zip(names, x, strict=True)),
            solver=solver, stepsize_controller=diffrax.ConstantStepSize(), dt0=5e-3,
        )  # fmt: skip
        return sol.q[-1, 2] + 1e-3 * sol.multipliers[-1, 0]

    assert _reverse_against_central(loss, base) < 1e-6
