"""The generalized-α method on the index-3 equations of motion (Chung & Hulbert 1993;
Arnold & Brüls 2007): `jaxmbs.GeneralizedAlpha`.

**The equations.** No index reduction: positions satisfy the constraints themselves,

    M(q) q̈ + C_Iᵀ λ = Q(t, q, q̇),    Φ_I(q, t) = 0,    ψ_I(t, q, q̇) = 0,          (1)

with C = [Φ_q ; A] the constraint Jacobian (Pękal–Frączek 2016, eq 2.1; Pfaffian rows
ψ = A q̇ + a) and I the structure's independent rows (`jaxmbs.Structure`: redundant rows
are left out, and the minimum-norm λ over all rows is recovered afterwards as every
formulation does, `Structure.expand_multipliers`).

**One step** t_n → t_{n+1} = t_n + h, in the form of Arnold & Brüls (2007) with the
acceleration-like variable a (Chung & Hulbert 1993):

    q_{n+1} = q_n + h q̇_n + h² (½ − β) a_n + h² β a_{n+1},                           (2)
    q̇_{n+1} = q̇_n + h (1 − γ) a_n + h γ a_{n+1},                                      (3)
    (1 − α_m) a_{n+1} + α_m a_n = (1 − α_f) q̈_{n+1} + α_f q̈_n,                       (4)

and (1) at (t_{n+1}, q_{n+1}, q̇_{n+1}, q̈_{n+1}, λ_{n+1}). The start is consistent:
a_0 = q̈_0 and λ_0 from the index-1 equations (the state space's formulation). Chung &
Hulbert's parameters for a spectral radius ρ∞ ∈ [0, 1] at ωh → ∞:

    α_m = (2ρ∞ − 1)/(ρ∞ + 1),  α_f = ρ∞/(ρ∞ + 1),  γ = ½ + α_f − α_m,  β = ¼ (γ + ½)²,   (5)

second order and unconditionally stable for the linear test equation; ρ∞ = 1 dissipates
nothing, ρ∞ < 1 damps the modes with ωh ≫ 1 by a factor → ρ∞ per step while those with
ωh ≪ 1 are hardly touched (a soft mode at ωh = 0.07 keeps 0.99998 of its energy over 60
steps at ρ∞ = 0.8). Arnold & Brüls (2007) prove second-order convergence on (1); the
accelerations and multipliers start with a transient that ρ∞ < 1 damps
within tens of steps (on the four-bar at h = 1e-3, ρ∞ = 0.8: |λ − λ_KKT| 5e-2 relative
after 10 steps, 2e-4 after 50; none left after 100 steps at h = 1e-4). Measured in
`tests/test_generalized_alpha.py`: slopes 2.00 for q, q̇, q̈ and λ on the four-bar.

**Newton on x = (q̈_{n+1}, λ_{n+1}).** By (2)–(4), q_{n+1} and q̇_{n+1} are affine in
q̈_{n+1}, with ∂q_{n+1}/∂q̈_{n+1} = β' and ∂q̇_{n+1}/∂q̈_{n+1} = γ',

    β' = h² β (1 − α_f)/(1 − α_m),    γ' = h γ (1 − α_f)/(1 − α_m).                 (6)

The residual is

    r(x) = [ M q̈ + C_Iᵀ λ − Q ;  Φ_I / β' ;  ψ_I / γ' ]                              (7)

— the constraint rows scaled by 1/(βh²) (Arnold & Brüls), and by (1 − α_m)/(1 − α_f) more
(the Pfaffian rows by the matching 1/γ'), so that its Jacobian, the iteration matrix

    S = [ M + β' K_t + γ' C_t   C_Iᵀ ]        K_t = ∂(M q̈ + C_Iᵀλ − Q)/∂q,
        [ C_I + O(h)             0   ],       C_t = −∂Q/∂q̇,                           (8)

tends to the index-1 matrix [M, C_Iᵀ; C_I, 0] (Pękal–Frączek eq 2.5) as h → 0: its
conditioning does not grow as h⁻² (Bottasso, Bauchau & Cardona 2007 analyse the scaling).
S is the exact Jacobian of (7), by forward-mode autodiff through the mechanism's own
functions (mass matrix, forces, constraints), assembled and factorised by the mechanism's
algebra (`AbstractAlgebra.newton_system`, `Structure.algebra`): dense, one
jvp per unknown (n + r in all) and LU, O((n + r)³); or banded, one jvp per colour of S's
pattern (force elements' coupling included) and a banded LU with partial pivoting in
reverse Cuthill–McKee order (`jaxmbs.kinematics.banded_lu`), O(n + r) on chains, above
`jaxmbs.kinematics.algebra.DENSE_NEWTON` unknowns (below, dense costs less). By
default (`newton="modified"`) S is assembled and factorised once per step, at the predictor
x⁰ = (q̈_n, λ_n), and every iteration of the step solves with it: x^{k+1} = x^k − S(x⁰)⁻¹
r(x^k). The first correction is Newton's; the next ones contract by O(|x¹ − x⁰|), a change
of the accelerations over one step. At h = 1e-3 the steps of the flyball governor and of
the four-bar take the same two (rarely three) iterations as with `newton="full"` (S at
every iterate), with one assembly of S instead of two: the governor's run takes 148 ms
instead of 230 and compiles in 12 s instead of 18 (the four-bar: 26 against 39 ms, 2.5
against 3.6 s); at h = 1e-2 the four-bar's steps take 3–5 iterations instead of 3–4. The
converged x is the same up to the tolerance below (over 200 steps of the four-bar: q̈ and
λ 3e-9 relative apart, q 2e-15). Newton stops when the correction of q̈ and of λ is below `tolerance`
relative (√ε by default: the residual left is then O(ε) — |Φ| at round-off with no
stabilisation), and fails after
`max_iterations`. Round-off here means that of the update (2): q_{n+1} is fixed through
q̈_{n+1} to ~ε h²β|q̈|, which exceeds ε|q| for a stiff mode the step does not resolve (a
spring-mass at ωh = 141: |Φ| 5e-13 in float64, 3e-4 in float32).

**Stabilized index-2 form** (`stabilized_index2=True`; Gear, Leimkuhler & Gupta 1985 for
the equations, Arnold, Brüls & Cardona 2015 for generalized-α on them). The index-3 form
leaves the velocities off their constraints by O(h²) (C q̇ ≠ 0 on the holonomic rows). The
stabilized form imposes both levels, with one more multiplier ν per independent holonomic
row that corrects the positions along the constraint normals at the step's start:

    q_{n+1} = (2) + β' D ν̃_{n+1},    D = C_H(q_n)ᵀ,                                  (11)

H the independent holonomic rows, ν̃ = ν/β' (so that ν̃ has the scale of the
accelerations), and the residual (7) extended by the velocity constraints of those rows,

    r(x) = [ M q̈ + C_Iᵀ λ − Q ;  Φ_I / β' ;  ψ_I / γ' ;  c_H(q_{n+1}, q̇_{n+1}) / γ' ]   (7′)

on x = (q̈_{n+1}, λ_{n+1}, ν̃_{n+1}), c = Φ_q q̇ + Φ_t. The correction is of the size of the
velocities' drift over a step (β' ν̃ = O(h³)), and vanishes with it. Measured on the
redundant four-bar at ρ∞ = 0.8, h = 4e-4 … 1e-4, 0.5 s, against Tsit5 at 1e-12: |Φ| and |c|
at round-off (≤ 5.6e-16 and ≤ 1.7e-15, against |c| 6.1e-6 … 3.8e-7 of the index-3 form),
slopes 2.00 for q, q̇, q̈ and λ, errors 2.2× (q) and 2.8× (λ) smaller than the index-3
form's at the same step. S is assembled densely (the banded plan holds x = (q̈, λ) only).

**Step-size control.** With a_n ≈ q̈(t_n + (α_m − α_f) h) (Chung & Hulbert's
acceleration-like variable), Taylor expansion of (2) gives the positions' local error

    q_{n+1} − q(t_{n+1}) = −c h³ q⃛ + O(h⁴),    c = 1/6 − β − (α_m − α_f)/2,           (9)

(c = −1/12 at ρ∞ = 1, the trapezoidal rule's), estimated with q⃛ ≈ (a_{n+1} − a_{n−1})/
(h_n + h_{n−1}): the difference over two steps, because a_{n+1} − a_n alternates with the
spurious root of (4) (near −ρ∞) and, taken over one step, made the estimate jump by 4–6
from step to step and the controller reject a third of its steps. The velocities' error is
not estimated (it is O(h³) as well, with q⁗). After a change of step the offset of a from
q̈ scales with it:

    a_n ← q̈_n + (h_n / h_{n−1}) (a_n − q̈_n).                                         (10)

Measured on the four-bar (`tests/test_generalized_alpha.py`): steps ∝ tol^(−1/3), global
errors ∝ tol^(2/3), 8 % of the steps rejected at rtol = atol = 1e-8 (19 % at 1e-6).

**Derivatives.** The step is differentiated by the implicit function theorem at the
converged x, not through the iterations: with θ everything the step reads (q_n, q̇_n, a_n,
q̈_n, t_{n+1}, h, the parameters), dx = −S⁻¹ (∂r/∂θ) dθ, one more Jacobian and solve. It is
linear in dθ, so reverse mode transposes it: the library's default discrete adjoint
(`jaxmbs.integrate.adjoint`) applies the vjp of this step per step; forward mode and
`vmap` go through it as they are.

**How it fits `simulate`.** `GeneralizedAlpha` is a stepper
(`jaxmbs.integrate.steppers.AbstractStepper`), which chooses the state space and the
diffrax solver: the state is y = [q; q̇; q̈; λ_I] (`IndexThreeCoordinates`), so that the
outputs' accelerations and multipliers are those of the Newton solve, and the diffrax
solver's `step` is one step (2)–(8), (10), with solver state (a_n, a_{n−1}, h_{n−1}) and
the error estimate (9) of the positions. Positions need no
stabilisation: `stabilization="none"` runs the method as it is, `"projection"` (the
default of `simulate`) still projects q̇ onto the velocity constraints after each step,
which the method satisfies only to O(h²). Pass `stabilization="none"` for gradients: the
projection's derivative is exact only up to the size of the drift it removes
(`jaxmbs.integrate.stabilization.project_state`), and generalized-α's O(h²) velocity drift
is larger than a Runge–Kutta step's (four-bar, h = 5e-3: reverse mode 2.6e-4 off central
differences with projection, 8.5e-10 without). Baumgarte stabilisation acts on the index-1
equations that generalized-α does not solve: it has no effect. A step whose Newton
iteration does not converge (or meets a NaN) fails, and the run ends with
`RESULTS.step_failed`, named in its message; with an adaptive controller it is rejected
and retried shorter instead. The step is constant (`diffrax.ConstantStepSize()` with
`dt0`, or `diffrax.StepTo`) or controlled (the default `diffrax.PIDController` from
`rtol`, `atol`); between steps q and q̇ are interpolated by cubic Hermite polynomials
(slopes q̇ and q̈ at both ends), q̈ and λ linearly — Φ = 0 holds at the step ends only.

References: J. Chung, G. M. Hulbert, *A time integration algorithm for structural dynamics
with improved numerical dissipation: the generalized-α method*, J. Appl. Mech. 60 (1993)
371–375. M. Arnold, O. Brüls, *Convergence of the generalized-α scheme for constrained
mechanical systems*, Multibody Syst. Dyn. 18 (2007) 185–202. C. L. Bottasso, O. A. Bauchau,
A. Cardona, *Time-step-size-independent conditioning and sensitivity to perturbations in
the numerical solution of index three differential algebraic equations*, SIAM J. Sci.
Comput. 29 (2007) 397–414. C. W. Gear, B. Leimkuhler, G. K. Gupta, *Automatic integration
of Euler–Lagrange equations with constraints*, J. Comput. Appl. Math. 12–13 (1985) 77–90.
M. Arnold, O. Brüls, A. Cardona, *Error analysis of generalized-α Lie group time
integration methods for constrained mechanical systems*, Numer. Math. 129 (2015) 149–179.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp

from .._internal.checks import is_concrete
from .._internal.types import Array, Coordinates, Velocities
from ..formulations import AbstractFormulation
from ..kinematics import algebra
from ..kinematics.constraints import constraint_jacobian, position_residual, velocity_residual
from ..kinematics.structure import iteration_pattern
from .dynamics import equation_terms
from .solvers import ProjectedSolver
from .stabilization import AbstractStabilization, NoStabilization
from .state_space import AbstractStateFunction, AbstractStateSpace, AllCoordinates, read_off
from .steppers import AbstractStepper

if TYPE_CHECKING:
    from ..model import Mechanism


#: Round-off floor of the Newton corrections, in units of ε|q|/β' (eq 6): the positions fix
#: q̈_{n+1} to that, and no iteration improves on it.
NOISE = 100.0
#: `GeneralizedAlpha(newton=...)`: the iteration matrix once per step, or at every iterate.
NEWTON = ("modified", "full")


class Coefficients(eqx.Module):
    """α_m, α_f, γ, β of eq (5) for a spectral radius ρ∞ (Chung & Hulbert 1993)."""

    alpha_m: Array
    alpha_f: Array
    gamma: Array
    beta: Array

    @classmethod
    def from_rho_inf(cls, rho_inf: Array) -> Coefficients:
        """Eq (5)."""
        alpha_m = (2.0 * rho_inf - 1.0) / (rho_inf + 1.0)
        alpha_f = rho_inf / (rho_inf + 1.0)
        gamma = 0.5 + alpha_f - alpha_m
        return cls(alpha_m, alpha_f, gamma, 0.25 * (gamma + 0.5) ** 2)

    def update(self, qdd1: Array, h, q: Coordinates, qd: Velocities, a: Array, qdd: Array):
        """(q_{n+1}, q̇_{n+1}, a_{n+1}) from q̈_{n+1} and step n's (q, q̇, a, q̈): eqs (4),
        (2), (3)."""
        a1 = ((1.0 - self.alpha_f) * qdd1 + self.alpha_f * qdd - self.alpha_m * a) / (
            1.0 - self.alpha_m
        )
        q1 = q + h * qd + h**2 * ((0.5 - self.beta) * a + self.beta * a1)
        qd1 = qd + h * ((1.0 - self.gamma) * a + self.gamma * a1)
        return q1, qd1, a1

    @property
    def error_constant(self) -> Array:
        """c in the positions' local error c h² (a_{n+1} − a_n) + O(h⁴) (eq 9)."""
        return 1.0 / 6.0 - self.beta - 0.5 * (self.alpha_m - self.alpha_f)

    def scales(self, h) -> tuple[Array, Array]:
        """(β', γ') of eq (6)."""
        ratio = (1.0 - self.alpha_f) / (1.0 - self.alpha_m)
        return h**2 * self.beta * ratio, h * self.gamma * ratio


class StepEquations(eqx.Module):
    """The residual (7) of one step — (7′) with `stabilized` — as a function of the unknowns
    x = (q̈_{n+1}, λ_{n+1}) — (q̈_{n+1}, λ_{n+1}, ν̃_{n+1}) — and of θ = (t_{n+1}, h, q_n,
    q̇_n, a_n, q̈_n, params, D), D = C_H(q_n) the direction of the positions' correction (11)
    (None without `stabilized`)."""

    mechanism: Mechanism
    coefficients: Coefficients
    stabilized: bool = eqx.field(default=False, static=True)

    def guess(self, y: Array) -> Array:
        """The unknowns' starting values from a state y = [q; q̇; q̈; λ_I]: step n's q̈ and λ
        (and ν̃ = 0)."""
        structure = self.mechanism.structure
        x = y[2 * structure.n :]
        if self.stabilized:
            x = jnp.concatenate([x, jnp.zeros((structure.rank_holonomic,), x.dtype)])
        return x

    def state(self, x: Array, theta: tuple) -> tuple[Array, Array, Array]:
        """(q_{n+1}, q̇_{n+1}, a_{n+1}): eqs (2)–(4), with the correction (11) of q_{n+1}."""
        structure = self.mechanism.structure
        t1, h, q, qd, a, qdd, params, direction = theta
        n = structure.n
        q1, qd1, a1 = self.coefficients.update(x[:n], h, q, qd, a, qdd)
        if self.stabilized:
            q1 = q1 + self.coefficients.scales(h)[0] * (direction.T @ x[n + structure.rank :])
        return q1, qd1, a1

    def residual(self, x: Array, theta: tuple) -> Array:
        """Eq (7), or (7′) with `stabilized`."""
        mechanism = self.mechanism
        structure = mechanism.structure
        t1, h, q, qd, a, qdd, params, _ = theta
        n, r = structure.n, structure.rank
        q1, qd1, _ = self.state(x, theta)
        M = algebra.mass_matrix(mechanism, q1, params)
        force = M @ x[:n] - mechanism.forces(t1, q1, qd1, params)
        if structure.rank == 0:
            return force
        C_i = structure.independent_part(constraint_jacobian(mechanism, q1, t1, params))
        beta_s, gamma_s = self.coefficients.scales(h)
        rows = [position_residual(mechanism, q1, t1, params) / beta_s]
        if mechanism.velocity_constraints is not None:
            rows.append(jnp.asarray(mechanism.velocity_constraints(t1, q1, qd1, params)) / gamma_s)
        g = [structure.independent_part(jnp.concatenate(rows))]
        if self.stabilized:
            c = velocity_residual(mechanism, q1, qd1, t1, params)
            g.append(c[jnp.asarray(structure.independent_holonomic_rows, dtype=int)] / gamma_s)
        return jnp.concatenate([force + C_i.T @ x[n : n + r], *g])

    def direction(self, q: Array, t, params) -> Array | None:
        """D = C_H(q_n) of (11) (H: the independent holonomic rows), or None."""
        if not self.stabilized:
            return None
        rows = jnp.asarray(self.mechanism.structure.independent_holonomic_rows, dtype=int)
        return constraint_jacobian(self.mechanism, q, t, params)[rows]


def newton_system(equations: StepEquations, x: Array, theta: tuple):
    """r(x) and b ↦ S⁻¹b, S = ∂r/∂x (eq 8) by forward-mode autodiff, assembled and factorised
    by the mechanism's algebra (dense, or banded on chains: `AbstractAlgebra.newton_system`;
    dense for the stabilized form, whose unknowns ν̃ the banded plan does not hold)."""
    mechanism = equations.mechanism
    chosen = algebra.DENSE if equations.stabilized else algebra.algebra_of(mechanism)
    return chosen.newton_system(
        lambda x_: equations.residual(x_, theta), x, lambda: iteration_pattern(mechanism)
    )


@eqx.filter_custom_jvp
def newton_solve(equations: StepEquations, theta: tuple, guess: Array, *, max_iterations: int,
                 tolerance: float | None, modified: bool) -> tuple[Array, Array]:  # fmt: skip
    """x = (q̈_{n+1}, λ_{n+1}) with r(x) = 0 by Newton's method from `guess`, and whether it
    converged (1.0) or not (0.0, also on a NaN). `modified`: S (eq 8) assembled and
    factorised once, at `guess`, and reused by every iteration of the step (module notes);
    else at every iterate. Differentiated implicitly (module notes)."""
    n = equations.mechanism.structure.n
    eps = jnp.finfo(guess.dtype).eps
    tol = jnp.sqrt(eps) if tolerance is None else tolerance
    _, h, q = theta[:3]
    beta_s = equations.coefficients.scales(h)[0]

    def size(x):
        return jnp.max(jnp.abs(x), initial=0.0)

    def update(x, dx):
        """x + dx and whether dx was small enough to stop: relative to q̈, plus the
        round-off floor of an index-3 solve (q̈ is known from positions to ~ε|q|/β' only,
        module notes)."""
        x = x + dx
        relative = tol + NOISE * eps * (1.0 + size(q)) / (beta_s * (1.0 + size(x[:n])))
        converged = (size(dx[:n]) <= relative * (1.0 + size(x[:n]))) & (
            size(dx[n:]) <= relative * (1.0 + size(x[n:]))
        )
        return x, converged

    if modified:
        r, solve = newton_system(equations, guess, theta)
        start = (*update(guess, -solve(r)), 1)

        def correction(x):
            return -solve(equations.residual(x, theta))
    else:
        start = (guess, jnp.zeros((), bool), 0)

        def correction(x):
            r, solve = newton_system(equations, x, theta)
            return -solve(r)

    def iteration(carry):
        x, _, k = carry
        return (*update(x, correction(x)), k + 1)

    def running(carry):
        x, converged, k = carry
        return (k < max_iterations) & ~converged & jnp.all(jnp.isfinite(x))

    x, converged, _ = jax.lax.while_loop(running, iteration, start)
    ok = converged & jnp.all(jnp.isfinite(x))
    return x, ok.astype(x.dtype)


@newton_solve.def_jvp
def _newton_solve_jvp(primals, tangents, *, max_iterations, tolerance, modified):
    equations, theta, guess = primals
    d_equations, d_theta, _ = tangents
    x, ok = newton_solve(
        equations, theta, guess, max_iterations=max_iterations, tolerance=tolerance,
        modified=modified,
    )  # fmt: skip
    _, solve = newton_system(equations, x, theta)
    primal_in = (equations, theta)
    tangent_in = jax.tree_util.tree_map(
        lambda p, d: d if d is not None or p is None else jnp.zeros_like(p),
        eqx.filter(primal_in, eqx.is_inexact_array),
        (d_equations, d_theta),
        is_leaf=lambda d: d is None,
    )
    _, dr = eqx.filter_jvp(lambda e, th: e.residual(x, th), primal_in, tangent_in)
    return (x, ok), (-solve(dr), jnp.zeros_like(ok))


class GeneralizedAlphaSolver(diffrax.AbstractAdaptiveSolver):
    """One generalized-α step (2)–(8) as a diffrax solver, on y = [q; q̇; q̈; λ_I]
    (`IndexThreeCoordinates`) with solver state a, and the local error estimate (9) of its
    positions. Built by `GeneralizedAlpha`; `adaptive`: whether a step-size controller reads
    the estimate (then a failed Newton iteration rejects the step instead of failing it)."""

    equations: StepEquations
    max_iterations: int = eqx.field(static=True)
    tolerance: float | None = eqx.field(static=True)
    modified: bool = eqx.field(static=True)
    adaptive: bool = eqx.field(static=True)

    term_structure: ClassVar = diffrax.AbstractTerm
    interpolation_cls: ClassVar = diffrax.ThirdOrderHermitePolynomialInterpolation.from_k

    def order(self, terms) -> int:
        return 2

    def init(self, terms, t0, t1, y0, args) -> tuple[Array, Array, Array]:
        """(a_0, a_{−1}, h_0) = (q̈_0, q̈_0, t1 − t0): consistent accelerations, the first
        step."""
        n = self.equations.mechanism.structure.n
        qdd = y0[2 * n : 3 * n]
        return qdd, qdd, jnp.asarray(t1 - t0, y0.dtype)

    def step(self, terms, t0, t1, y0, args, solver_state, made_jump):
        params, valid = args
        n = self.equations.mechanism.structure.n
        q, qd, qdd = y0[:n], y0[n : 2 * n], y0[2 * n : 3 * n]
        h = t1 - t0
        # a_n ≈ q̈(t_n + (α_m − α_f) h): after a change of step, the offset scales with it
        # (eq 10).
        a, a_previous, h_previous = solver_state
        a = qdd + (h / h_previous) * (a - qdd)
        equations = self.equations
        theta = (t1, h, q, qd, a, qdd, params, equations.direction(q, t0, params))
        with jax.named_scope("generalized_alpha_newton"):
            x, ok = newton_solve(
                equations, theta, equations.guess(y0),
                max_iterations=self.max_iterations, tolerance=self.tolerance,
                modified=self.modified,
            )  # fmt: skip
        c = equations.coefficients
        q1, qd1, a1 = equations.state(x, theta)
        y1 = jnp.where(valid, jnp.concatenate([q1, qd1, x[: y0.shape[0] - 2 * n]]), y0)
        a1 = jnp.where(valid, a1, a)
        jerk = (a1 - a_previous) / (h + h_previous)
        error = jnp.zeros_like(y0).at[:n].set(c.error_constant * h**3 * jerk)
        failed = valid & (ok == 0)
        if self.adaptive:  # rejected and retried shorter (down to the controller's floor)
            error = jnp.where(failed, jnp.inf, error)
            result = diffrax.RESULTS.successful
        else:
            result = diffrax.RESULTS.where(
                failed, diffrax.RESULTS.nonlinear_max_steps_reached, diffrax.RESULTS.successful
            )
        # Dense output: cubic Hermite for q (slopes q̇) and q̇ (slopes q̈), linear for q̈, λ.
        secant = y1[2 * n :] - y0[2 * n :]
        k = jnp.stack([
            jnp.concatenate([h * y0[n : 3 * n], secant]),
            jnp.concatenate([h * y1[n : 3 * n], secant]),
        ])  # fmt: skip
        return y1, error, dict(y0=y0, y1=y1, k=k), (a1, a, jnp.asarray(h, y0.dtype)), result

    def func(self, terms, t0, y0, args):
        return terms.vf(t0, y0, args)


class GeneralizedAlpha(AbstractStepper):
    """The generalized-α method on the index-3 equations (module notes): pass it as
    `simulate(..., solver=jaxmbs.GeneralizedAlpha(rho_inf=0.8),
    stepsize_controller=diffrax.ConstantStepSize(), dt0=h)`, or with `simulate`'s default
    step-size controller (`rtol`, `atol`) for steps set by the positions' local error.

    **Arguments:**

    - `rho_inf`: the spectral radius at ωh → ∞, in [0, 1] (eq 5): 1 dissipates nothing,
      smaller values damp the unresolved high frequencies more. Traced: other values
      reuse the compiled solve (and `jax.grad` reaches it).
    - `max_iterations`: Newton iterations per step before the step fails.
    - `tolerance`: relative size of the last Newton correction of q̈ and of λ at which the
      iteration stops (None: √ε of the dtype).
    - `newton`: `"modified"` (default) assembles and factorises the iteration matrix S once
      per step, at the predictor, and reuses it for the step's further iterations;
      `"full"` at every iterate (module notes, "Newton").
    - `stabilized_index2`: solve the stabilized index-2 form (7′), (11) — positions and
      velocities on their constraints at every step — instead of the index-3 form (7)
      (module notes, "Stabilized index-2 form"; the iteration matrix is then dense).
    """

    rho_inf: Array = eqx.field(default=0.9, converter=jnp.asarray)
    max_iterations: int = eqx.field(default=10, static=True)
    tolerance: float | None = eqx.field(default=None, static=True)
    newton: str = eqx.field(default="modified", static=True)
    stabilized_index2: bool = eqx.field(default=False, static=True)

    def __check_init__(self):
        if self.newton not in NEWTON:
            raise ValueError(f"newton must be one of {NEWTON}, got {self.newton!r}")
        if is_concrete(self.rho_inf) and not 0.0 <= float(self.rho_inf) <= 1.0:
            raise ValueError(f"rho_inf must lie in [0, 1], got {float(self.rho_inf)}")
        if self.max_iterations < 1:
            raise ValueError(f"max_iterations must be positive, got {self.max_iterations}")
        if self.tolerance is not None and not self.tolerance > 0:
            raise ValueError(f"tolerance must be positive, got {self.tolerance}")

    @property
    def coefficients(self) -> Coefficients:
        """α_m, α_f, γ, β (eq 5)."""
        return Coefficients.from_rho_inf(self.rho_inf)

    def state_space(self, space: AbstractStateSpace) -> AbstractStateSpace:
        if not isinstance(space, AllCoordinates):
            raise ValueError(
                f"GeneralizedAlpha integrates all coordinates (method= a formulation), not "
                f"{space.name!r}"
            )
        return IndexThreeCoordinates(space.formulation)

    def diffrax_solver(self, mechanism, controller, adjoint):
        adaptive = isinstance(controller, diffrax.AbstractAdaptiveStepSizeController)
        return GeneralizedAlphaSolver(
            StepEquations(mechanism, self.coefficients, self.stabilized_index2),
            self.max_iterations, self.tolerance,
            self.newton == "modified", adaptive,
        )  # fmt: skip


def _split(y: Array, n: int) -> tuple[Array, Array, Array, Array]:
    """(q, q̇, q̈, λ_I) from y = [q; q̇; q̈; λ_I]."""
    return y[..., :n], y[..., n : 2 * n], y[..., 2 * n : 3 * n], y[..., 3 * n :]


class _Field(AbstractStateFunction):
    """y ↦ [q̇; q̈; 0; 0]: the derivative of the positions and velocities the state holds
    (diffrax asks for it to choose a first step when `dt0` is None; the steps do not)."""

    def evaluate(self, y, t, params, valid):
        _, qd, qdd, lam = _split(y, self.structure.n)
        field = jnp.concatenate([qd, qdd, jnp.zeros_like(qdd), jnp.zeros_like(lam)])
        return jnp.where(valid, field, 0.0)


class _Projector(AbstractStateFunction):
    """The stabilisation's projection of (q, q̇) in y; q̈ and λ kept."""

    stabilization: AbstractStabilization

    def evaluate(self, y, t, params, valid):
        n = self.structure.n
        q, qd, _, _ = _split(y, n)
        q, qd, holds = self.stabilization.project_checked(self.mechanism, q, qd, t, params)
        projected = jnp.concatenate([q, qd, y[2 * n :]])
        return jnp.where(valid, projected, y), holds | ~valid


class IndexThreeCoordinates(AbstractStateSpace):
    """The state of generalized-α on the index-3 equations: y = [q; q̇; q̈; λ_I] (λ on the
    structure's independent rows), started from the index-1 solution of `formulation`."""

    formulation: AbstractFormulation

    @property
    def name(self) -> str:
        return "generalized-alpha"

    def initial_state(self, mechanism, q0, qd0, t0, params, consistency_tol):
        """q̈_0 from the formulation, λ_I0 = (C_I C_Iᵀ)⁻¹ C_I (Q − M q̈_0) (eq 1)."""
        structure = mechanism.structure
        M, Q, C, gamma, *_ = equation_terms(
            mechanism, self.formulation, NoStabilization(), q0, qd0, t0, params
        )
        qdd0 = self.formulation.accelerations(M, Q, C, gamma, mechanism)
        lam0 = jnp.zeros((structure.rank,), q0.dtype)
        if structure.rank:
            C_i = structure.independent_part(constraint_jacobian(mechanism, q0, t0, params))
            lam0 = jnp.linalg.solve(C_i @ C_i.T, C_i @ (Q - M @ qdd0))
        return jnp.concatenate([q0, qd0, qdd0, lam0]), jnp.ones((), bool)

    def vector_field(self, mechanism, stabilization):
        return _Field(mechanism)

    def wrap_solver(self, solver, mechanism, stabilization):
        project = stabilization.end_of_step(_Projector(mechanism, stabilization))
        return solver if project is None else ProjectedSolver(solver, project)

    def error_norm(self, y: Array) -> Array:
        """The largest scaled error: only the positions carry one (eq 9)."""
        return jnp.max(jnp.abs(y))

    def physical_state(self, mechanism, y, t, params) -> tuple[Coordinates, Velocities]:
        return _split(y, mechanism.structure.n)[:2]

    def outputs(self, mechanism, stabilization, y, t, params, *, interpolated=True):
        """(q, q̇, q̈, λ) of the Newton solve; λ the minimum-norm multipliers of all rows."""
        structure = mechanism.structure
        q, qd, qdd, lam = _split(y, structure.n)
        if interpolated:
            q, qd = stabilization.project(mechanism, q, qd, t, params)
        if structure.n_constraints == 0:
            return read_off(mechanism, q, qd, qdd, jnp.zeros((0,), q.dtype), t, params)
        C = constraint_jacobian(mechanism, q, t, params)
        lam = structure.expand_multipliers(C, lam)
        return read_off(mechanism, q, qd, qdd, lam, t, params)
