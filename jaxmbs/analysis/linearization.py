"""Linearisation of the motion on the constraint manifold, about an equilibrium or a steady
motion: the state matrix in independent coordinates, its eigenvalues, natural frequencies and
damping ratios — jittable and differentiable with respect to the parameters and the state.

**The reduced field.** Split q into independent positions q_P and dependent ones
(Φ_I(t, q) = 0 fixes the latter locally, Φ_I the independent holonomic rows), and q̇ into
independent velocities v = q̇_V (the velocity constraints c(t, q, q̇) = 0 — holonomic and
Pfaffian rows — fix the rest). The motion is the ODE in x = (q_P, v):

    q(q_P):      Φ_I(t, q) = 0 with q_P held           (Newton, implicit derivative),
    q̇(q, v):     c(t, q, q̇) = 0 with q̇_V = v held      (c is affine in q̇: one solve),
    ẋ = (q̇_P, q̈_V),  q̈ from the formulation at (q, q̇).

A = ∂ẋ/∂x at the given state by forward-mode autodiff — through the Newton solve by the
implicit function theorem. Without Pfaffian rows P = V (f = n − rank C coordinates, A is
2f × 2f); with them q_P has n − rank Φ_q coordinates and v fewer (n − rank C): the velocity
space is reduced by the Pfaffian rows too. The coordinate sets are chosen by column pivoting
on the constraint rows (the best-conditioned dependent columns), or named by the caller.

**About an equilibrium.** Under a change of coordinates x = h(z), the Jacobian of the
vector field transforms as A_z = H⁻¹ A_x H − H⁻¹ (∂H/∂z · ẋ) with H = ∂h/∂z: the second
term vanishes only where ẋ = 0. So at an equilibrium (q̇ = 0, q̈ = 0) the eigenvalues of A
do not depend on the choice of independent coordinates nor on the formulation, and the
modes, natural frequencies and damping ratios are those of the small motions about it.

**About a steady motion** (a relative equilibrium: a disc or a bicycle rolling at constant
speed, a spinning top). Let the independent positions split into cyclic ones q_c and the
rest s, q_P = (q_c, s), and suppose the equations (M, Q, Φ, ψ) are invariant under shifts of
q_c — a symmetry (position on the plane, heading, wheel angles). Then with velocities v
that the symmetry leaves alone, the field does not depend on q_c,

    q̇_c = F_c(s, v),   ṡ = F_s(s, v),   v̇ = G(s, v),

and (s, v) obeys a closed ODE, the reduced (Routh) equations, with q_c recovered by
quadrature. A steady motion is a state with ṡ = 0 and v̇ = 0 while q̇_c ≠ 0: an equilibrium
of the reduced ODE. Its linearisation is A with the rows and columns of q_c left out,

    A_red = ∂(ṡ, v̇)/∂(s, v),

and, being the Jacobian at an equilibrium of the reduced ODE, its eigenvalues do not depend
on the coordinates s, v chosen (the argument above). In block form A = [[0, ∂F_c/∂(s, v)],
[0, A_red]] (the q_c columns vanish), so A's eigenvalues are A_red's and one zero per cyclic
coordinate. For a nonholonomic system, steady motions come in families (a rolling disc rolls
upright at every speed): A_red then keeps a zero eigenvalue for each conserved quantity
along the family (Neimark and Fufaev, *Dynamics of Nonholonomic Systems*, 1972, ch. III;
Zenkov, Bloch and Marsden, *Dynamical Systems* 17, 2002, on the stability of relative
equilibria of nonholonomic systems). The rolling disc's A_red, in (lean; lean, heading and
spin rates), has the eigenvalues 0, 0, ±iω_n (`tests/test_linearize_steady.py`).

`cyclic` names q_c, or `"auto"` recognises them: the coordinates along which none of M, Q,
Φ, c and C changes at the state (a jvp along each coordinate). A symmetry that moves several
coordinates together — a heading in absolute coordinates, which also rotates the position's
velocity — is not recognised and must be named. Whatever names them, `linearize` checks
the two conditions the theory needs at the state: the q_c columns of the reduced rows vanish
(|∂(ṡ, v̇)/∂q_c| ≤ `equilibrium_tol` · max |A_red|), and the reduced state is at rest
(|q̇_s| ≤ tol, |q̈_V| ≤ tol · max |M⁻¹Q(t, q, 0)|). Velocities that the motion does not keep
constant (the x-velocity of a disc rolling on a circle) fail the second: choose others with
`velocities=` (the rates of angles, not of the position on the plane).

Anywhere else A depends on the coordinates, and its eigenvalues are no frequencies of
anything. `linearize` therefore refuses a state that is neither — unless asked with
`equilibrium_only=False`, which returns the local Jacobian labelled `at_equilibrium=False`
(its `frequencies` and `damping_ratios` then refuse to answer).

**Static analysis, traced computation.** The choice of coordinates (ranks, pivoting,
recognised cyclic coordinates) is made once on concrete values: the state when it is known
(also under `jax.grad`, whose primal values are), else — under `jit` — the coordinates must be
named (`positions`, `velocities`, `cyclic`, e.g. those of a `Linearization` computed once
outside), or, without Pfaffian rows, they are the mechanism's structure's (its reference
configuration). A, `eigenvalues` and `modes` are then traced arrays: `jax.jit`, `jax.grad`
and `jax.vmap` reach them (eigenvalues by the derivative of the eigendecomposition; simple
eigenvalues only). The checks of the state run eagerly when the state is concrete and as
`equinox.error_if` under a trace.
"""

from __future__ import annotations

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.checks import finite_params, state_vector
from .._internal.compile import quick_jit
from .._internal.types import Array, Coordinates, Params, Velocities
from ..formulations import AbstractFormulation
from ..integrate.dynamics import accelerations
from ..integrate.inputs import merge_params
from ..kinematics import algebra
from ..kinematics.constraints import constraint_jacobian, position_residual, velocity_residual
from ..kinematics.structure import pivoted_row_selection, with_known_structure
from ..model.mechanism import Mechanism

#: Newton steps that put the dependent positions back on Φ_I = 0 from the state's own (which
#: satisfies it to `consistency_tol`): unrolled, so that the derivatives of the solution — at
#: the root, those of the implicit function theorem — come from the iteration itself.
NEWTON_STEPS = 3
#: Relative size below which a coordinate's derivative counts as zero (`cyclic="auto"`).
CYCLIC_TOL = 1e-10


class Linearization(eqx.Module):
    """The state matrix `A` of ẋ = A δx in the reduced state x = (s, v) (module docstring),
    with the names of its coordinates: `positions` (s: the independent positions, less the
    `cyclic` ones left out) and `velocities` (v).

    Eigenvalues come in complex-conjugate pairs s = −ζω ± iω√(1 − ζ²) for the oscillating
    modes: `frequencies` are their undamped natural frequencies ω = |s| (rad/s), and
    `damping_ratios` ζ = −Re s / |s|. `at_equilibrium` is True at an equilibrium or a
    steady motion (an equilibrium of the reduced equations), False only for a state that
    `linearize(..., equilibrium_only=False)` accepted without the checks passing (or, under
    a trace, without checks): `A` is then the local Jacobian of the vector field in these
    coordinates, and has no modes. A `Linearization` is a pytree (`A` its one leaf): it can
    be returned from `jax.jit`, and `jax.grad` reaches `A`, `eigenvalues` and `modes()`.
    """

    A: Array
    positions: tuple[str, ...] = eqx.field(static=True)
    velocities: tuple[str, ...] = eqx.field(static=True)
    at_equilibrium: bool = eqx.field(static=True, default=True)
    cyclic: tuple[str, ...] = eqx.field(static=True, default=())

    @property
    def eigenvalues(self) -> Array:
        """Eigenvalues of `A`, sorted by |s| then by imaginary part (differentiable where
        they are simple)."""
        s = jnp.linalg.eigvals(self.A)
        return s[jnp.lexsort((s.imag, jnp.abs(s)))]

    def modes(self) -> tuple[Array, Array, Array]:
        """ω = |s|, ζ = −Re s / |s| of every eigenvalue (in the order of `eigenvalues`), and
        whether it belongs to an oscillating mode (Im s > 0): fixed shapes, for `jit`."""
        s = self.eigenvalues
        omega = jnp.abs(s)
        return omega, -s.real / omega, s.imag > 1e-9 * jnp.maximum(omega, 1.0)

    def _oscillating(self) -> Array:
        if not self.at_equilibrium:
            raise ValueError(
                "frequencies and damping ratios exist only for a linearisation about an "
                "equilibrium or a steady motion; this one is the local Jacobian at a state "
                "that is not one (linearize(..., equilibrium_only=False))"
            )
        omega, _, oscillating = self.modes()
        mask = jax.lax.stop_gradient(oscillating)
        if isinstance(mask, jax.core.Tracer):
            raise ValueError(
                "frequencies and damping_ratios select the oscillating modes, whose number is "
                "data: under jit use Linearization.modes() (ω, ζ and the oscillating mask of "
                "every eigenvalue, fixed shapes)"
            )
        return np.flatnonzero(np.asarray(mask))

    @property
    def frequencies(self) -> Array:
        """Natural frequencies ω = |s| (rad/s) of the oscillating modes, ascending
        (differentiable; not under `jit`: see `modes`)."""
        return self.modes()[0][self._oscillating()]

    @property
    def damping_ratios(self) -> Array:
        """ζ = −Re s / |s| of the oscillating modes, in the order of `frequencies`."""
        return self.modes()[1][self._oscillating()]


def _known(x) -> np.ndarray | None:
    """The value of `x` when it is known (a concrete array, or a tracer of `jax.grad` whose
    primal value is), else None (under `jit`)."""
    value = jax.lax.stop_gradient(x)
    if any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(value)):
        return None
    return value


def _indices(names: Sequence[str] | None, all_names: tuple[str, ...], what: str) -> np.ndarray:
    if names is None:
        return np.zeros(0, dtype=int)
    if isinstance(names, str):
        raise ValueError(f"linearize: {what} must be a sequence of coordinate names, got {names!r}")
    if unknown := [x for x in names if x not in all_names]:
        raise ValueError(f"linearize: {what} names unknown coordinates {unknown}")
    if len(set(names)) != len(names):
        raise ValueError(f"linearize: {what} names a coordinate twice: {list(names)}")
    return np.array([all_names.index(x) for x in names], dtype=int)


def _independent(rows: np.ndarray, n: int, forced: np.ndarray, what: str) -> np.ndarray:
    """Coordinates left independent by the best-conditioned dependent columns of `rows`,
    the `forced` ones kept independent (a ValueError when they cannot be)."""
    free = np.setdiff1d(np.arange(n), forced)
    scale = np.max(np.abs(rows), initial=1.0)
    rank = np.linalg.matrix_rank(rows, tol=1e-10 * scale) if rows.size else 0
    dependent, _, _ = pivoted_row_selection(rows[:, free].T, tol=1e-10 * scale)
    if len(dependent) < rank:
        raise ValueError(
            f"linearize: the {what} cannot all be independent: the constraints fix one of "
            "them given the others"
        )
    return np.setdiff1d(np.arange(n), free[np.asarray(dependent, dtype=int)])


def _check_named(rows: np.ndarray, n: int, independent: np.ndarray, what: str) -> None:
    """Refuse named independent coordinates that are not a complement of a nonsingular
    block of `rows` (wrong number, or the rest not determined by the constraints)."""
    dependent = np.setdiff1d(np.arange(n), independent)
    if rows.shape[0] != dependent.size:
        raise ValueError(
            f"linearize: {independent.size} {what} named, the constraints leave {n - rows.shape[0]}"
        )
    if dependent.size:
        block = rows[:, dependent]
        sv = np.linalg.svd(block, compute_uv=False)
        if sv[-1] <= 1e-10 * max(sv[0], 1.0):
            raise ValueError(
                f"linearize: the named {what} are not independent at the state: the "
                "constraints do not determine the others (a singular block of C)"
            )


def linearize(
    mechanism: Mechanism,
    q: Coordinates,
    qd: Velocities,
    t=0.0,
    params: Params | None = None,
    *,
    method: str | AbstractFormulation = "auto",
    consistency_tol: float = 1e-6,
    equilibrium_tol: float = 1e-6,
    equilibrium_only: bool = True,
    cyclic: Sequence[str] | str | None = None,
    positions: Sequence[str] | None = None,
    velocities: Sequence[str] | None = None,
) -> Linearization:
    """Linearise the motion about an equilibrium, or about a steady motion with `cyclic`
    coordinates left out (module docstring).

    **Arguments:**

    - the mechanism, a consistent state (q, q̇), the time, the parameters (default: the
      mechanism's; a partial mapping replaces only its keys, as in `simulate`) — each may be
      traced (`jit`, `grad`, `vmap`);
    - `method`: the formulation that gives q̈ (the result does not depend on it);
    - `consistency_tol`: the largest |Φ(q)| and |c(q, q̇)| accepted (the state is not
      projected silently);
    - `equilibrium_tol`: the tolerance of the equilibrium / steady-motion checks (module
      docstring); `equilibrium_only=False` accepts any consistent state and returns the
      local Jacobian, labelled `at_equilibrium`;
    - `cyclic`: names of the cyclic coordinates left out (steady motion), or `"auto"` to
      recognise them (concrete state only), or None (an equilibrium);
    - `positions`, `velocities`: names of the independent positions (the cyclic ones not
      included) and velocities, instead of column pivoting — required under `jit` for a
      mechanism with Pfaffian rows (take them from a `Linearization` computed once outside).

    **Returns:** a `Linearization`. Raises `ValueError`, naming the cause, for bad names, a
    state that is not finite, not consistent, or (by default) neither an equilibrium nor a
    steady motion; under a trace the state's checks are `equinox.error_if`.
    """
    state_vector(mechanism, q, "q")
    state_vector(mechanism, qd, "qd")
    names = tuple(mechanism.coordinate_names)
    auto, cyc, named_p, named_v = _named(names, cyclic, positions, velocities)
    dtype = jnp.result_type(float)
    q, qd = jnp.asarray(q, dtype), jnp.asarray(qd, dtype)
    p = merge_params(mechanism.params, params, dtype)
    finite_params(p)
    t = jnp.asarray(t, dtype)
    known_q, known_qd, known_t, known_p = _known(q), _known(qd), _known(t), _known(p)
    known = known_q is not None and known_qd is not None and known_t is not None
    if known and not (np.all(np.isfinite(known_q)) and np.all(np.isfinite(known_qd))):
        raise ValueError("linearize: q or qd is not finite (NaN or inf)")
    mechanism = with_known_structure(mechanism, known_q, 0.0 if known_t is None else known_t)
    state = (known_q, known_qd, known_t, mechanism.params if known_p is None else known_p)
    P, V, cyc = _independent_coordinates(
        mechanism,
        state if known else None,
        cyc,
        auto,
        named_p,
        named_v,
    )
    A, report = _linearization(
        mechanism, method, tuple(P.tolist()), tuple(V.tolist()), tuple(cyc.tolist()), q, qd, t, p
    )
    A, at_equilibrium = _check_state(
        A, report, consistency_tol, equilibrium_tol, equilibrium_only, bool(cyc.size)
    )
    kept = np.setdiff1d(P, cyc)
    return Linearization(
        A,
        tuple(names[i] for i in kept),
        tuple(names[i] for i in V),
        at_equilibrium,
        tuple(names[i] for i in np.sort(cyc)),
    )


def _named(
    names: tuple[str, ...],
    cyclic: Sequence[str] | str | None,
    positions: Sequence[str] | None,
    velocities: Sequence[str] | None,
) -> tuple[bool, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """`linearize`'s named coordinates as indices: whether the cyclic ones are to be
    recognised (`"auto"`), the cyclic ones named, the positions and velocities named (`None`
    where not named)."""
    auto = isinstance(cyclic, str) and cyclic == "auto"
    if isinstance(cyclic, str) and not auto:
        raise ValueError(
            f"linearize: cyclic must be names of coordinates or 'auto', got {cyclic!r}"
        )
    cyc = np.zeros(0, dtype=int) if auto else _indices(cyclic, names, "cyclic")
    named_p = None if positions is None else _indices(positions, names, "positions")
    named_v = None if velocities is None else _indices(velocities, names, "velocities")
    if named_p is not None and np.intersect1d(named_p, cyc).size:
        raise ValueError("linearize: positions are the non-cyclic ones; a name is in both")
    return auto, cyc, named_p, named_v


def _independent_coordinates(
    mechanism: Mechanism,
    state: tuple | None,
    cyc: np.ndarray,
    auto: bool,
    named_p: np.ndarray | None,
    named_v: np.ndarray | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The independent positions P (the cyclic ones included) and velocities V, and the
    cyclic coordinates: named (`named_p`, `named_v`; `None` where not named), else by column
    pivoting on the independent holonomic rows and on all independent rows at the concrete
    `state` (q, q̇, t, p), with the cyclic ones recognised there for `auto`; under a trace
    (`state` None) they must be named, unless the structure's partition serves (no
    Pfaffian rows, no cyclic coordinates)."""
    structure, n = mechanism.structure, mechanism.n
    holonomic = np.asarray(structure.independent_holonomic_rows, dtype=int)
    all_rows = np.asarray(structure.independent_rows, dtype=int)
    if state is not None:
        known_q, known_qd, known_t, p_known = state
        C = np.asarray(_jacobian(mechanism, known_q, known_t, p_known))
        if auto:
            recognised = _recognised(mechanism, known_q, known_qd, known_t, p_known)
            named = np.zeros(0, int) if named_p is None else named_p
            cyc = np.setdiff1d(np.flatnonzero(np.asarray(recognised)), named)
        P = (
            np.union1d(named_p, cyc)
            if named_p is not None
            else _independent(C[holonomic], n, cyc, "cyclic coordinates")
        )
        V = (
            np.sort(named_v)
            if named_v is not None
            else _independent(C[all_rows], n, np.zeros(0, int), "")
        )
        _check_named(C[holonomic], n, P, "positions")
        _check_named(C[all_rows], n, V, "velocities")
    elif auto:
        raise ValueError(
            "linearize: cyclic='auto' needs a concrete state (not under jit): name them"
        )
    elif named_p is not None and named_v is not None:
        P, V = np.union1d(named_p, cyc), np.sort(named_v)
        if P.size != n - holonomic.size or V.size != n - all_rows.size:
            raise ValueError(
                f"linearize: {P.size} positions and {V.size} velocities named, the constraints "
                f"leave {n - holonomic.size} and {n - all_rows.size}"
            )
    elif mechanism.n_pfaffian == 0 and cyc.size == 0:
        P = V = np.setdiff1d(np.arange(n), np.asarray(structure.dependent_coordinates, dtype=int))
    else:
        raise ValueError(
            "linearize: under jit the independent coordinates of a mechanism with Pfaffian "
            "rows or cyclic coordinates must be named: positions=…, velocities=… (e.g. "
            "those of a Linearization computed once outside jit)"
        )
    return P, V, cyc


@quick_jit
def _jacobian(mechanism: Mechanism, q, t, p) -> Array:
    return constraint_jacobian(mechanism, q, t, p)


@quick_jit
def _recognised(mechanism: Mechanism, q, qd, t, p) -> Array:
    """Whether none of M, Q, Φ, c and C changes along each coordinate (`cyclic="auto"`):
    the largest tangent along e_k relative to the largest value, ≤ `CYCLIC_TOL`."""

    def model(q_):
        return (
            algebra.mass_matrix(mechanism, q_, p),
            mechanism.forces(t, q_, qd, p),
            position_residual(mechanism, q_, t, p),
            velocity_residual(mechanism, q_, qd, t, p),
            constraint_jacobian(mechanism, q_, t, p),
        )

    values = model(q)
    scale = [jnp.max(jnp.abs(v), initial=0.0) for v in values]

    def change(direction):
        tangents = jax.jvp(model, (q,), (direction,))[1]
        return jnp.stack(
            [
                jnp.max(jnp.abs(d), initial=0.0) / jnp.maximum(s, 1.0)
                for d, s in zip(tangents, scale, strict=True)
            ]
        )

    return jnp.all(jax.vmap(change)(jnp.eye(q.size, dtype=q.dtype)) <= CYCLIC_TOL, axis=1)


# Compiled once per mechanism, method and choice of coordinates: a design study calls it
# again and again (traced op by op, a pendulum took ~1 s a call).
@quick_jit
def _linearization(
    mechanism: Mechanism, method, P: tuple[int, ...], V: tuple[int, ...],
    cyclic: tuple[int, ...], q, qd, t, p,
) -> tuple[Array, dict[str, Array]]:  # fmt: skip
    """A_red (module docstring) and what the checks of the state read: max |Φ|, max |c|, the
    rates of the non-cyclic positions (all of q̇ without cyclic coordinates), max |q̈_V| (all
    of q̈ without), the scale max |M⁻¹Q(t, q, 0)|, and the cyclic columns' coupling."""
    x = jnp.concatenate([q[np.asarray(P, dtype=int)], qd[np.asarray(V, dtype=int)]])
    A, qdd = _state_matrix(mechanism, method, P, V, q, t, p, x)
    is_cyclic = np.isin(np.asarray(P, dtype=int), cyclic)
    keep = np.concatenate([np.flatnonzero(~is_cyclic), len(P) + np.arange(len(V))])
    columns = np.flatnonzero(is_cyclic)
    reduced = A[np.ix_(keep, keep)]
    free = jnp.linalg.solve(algebra.mass_matrix(mechanism, q, p), mechanism.forces_at_rest(t, q, p))
    rest = np.setdiff1d(np.asarray(P, dtype=int), cyclic) if cyclic else np.arange(mechanism.n)
    return reduced, {
        "phi": jnp.max(jnp.abs(position_residual(mechanism, q, t, p)), initial=0.0),
        "c": jnp.max(jnp.abs(velocity_residual(mechanism, q, qd, t, p)), initial=0.0),
        "speed": jnp.max(jnp.abs(qd[rest]), initial=0.0),
        "imbalance": jnp.max(
            jnp.abs(qdd[np.asarray(V, dtype=int)] if cyclic else qdd), initial=0.0
        ),
        "scale": jnp.max(jnp.abs(free)),
        "coupling": jnp.max(jnp.abs(A[np.ix_(keep, columns)]), initial=0.0),
        "size": jnp.max(jnp.abs(reduced), initial=0.0),
    }


def _state_matrix(
    mechanism: Mechanism, method, P: tuple[int, ...], V: tuple[int, ...], q, t, p, x
) -> tuple[Array, Array]:
    """A = ∂ẋ/∂x at x = (q_P, v) (module docstring), P and V the independent positions and
    velocities, and q̈ there; q the state's configuration, whose dependent part starts the
    Newton solve."""
    structure, n = mechanism.structure, mechanism.n
    P, V = np.asarray(P, dtype=int), np.asarray(V, dtype=int)
    holonomic = np.asarray(structure.independent_holonomic_rows, dtype=int)
    all_rows = np.asarray(structure.independent_rows, dtype=int)
    D_q, D_v = np.setdiff1d(np.arange(n), P), np.setdiff1d(np.arange(n), V)

    def positions(q_p):
        def phi(q_d, q_p):
            full = jnp.zeros(n, q_p.dtype).at[P].set(q_p).at[D_q].set(q_d)
            return position_residual(mechanism, full, t, p)[holonomic]

        def newton(q_d, _):
            step = jnp.linalg.solve(jax.jacfwd(phi)(q_d, q_p), phi(q_d, q_p))
            return q_d - step, None

        q_d = jax.lax.stop_gradient(q[D_q])
        if D_q.size:
            q_d = jax.lax.scan(newton, q_d, None, length=NEWTON_STEPS)[0]
        return jnp.zeros(n, q_p.dtype).at[P].set(q_p).at[D_q].set(q_d)

    def velocities(q_, v):
        base = jnp.zeros(n, v.dtype).at[V].set(v)
        if not D_v.size:
            return base
        c0 = velocity_residual(mechanism, q_, base, t, p)[all_rows]
        C_d = constraint_jacobian(mechanism, q_, t, p)[all_rows][:, D_v]
        return base.at[D_v].set(jnp.linalg.solve(C_d, -c0))

    def field(x):
        q_ = positions(x[: P.size])
        qd_ = velocities(q_, x[P.size :])
        qdd = accelerations(mechanism, q_, qd_, t, p, method=method)
        return jnp.concatenate([qd_[P], qdd[V]]), qdd

    return jax.jacfwd(field, has_aux=True)(x)


def _check_state(
    A: Array, report: dict, consistency_tol: float, equilibrium_tol: float,
    equilibrium_only: bool, steady: bool,
) -> tuple[Array, bool]:  # fmt: skip
    """Refuse an inconsistent state; whether it is an equilibrium or a steady motion (module
    docstring), and with `equilibrium_only` refuse one that is neither. Eagerly (ValueError)
    when the report is known, else by `equinox.error_if` on A."""
    inconsistent = (report["phi"] > consistency_tol) | (report["c"] > consistency_tol)
    moving = report["speed"] > equilibrium_tol
    unbalanced = report["imbalance"] > equilibrium_tol * report["scale"]
    coupled = report["coupling"] > equilibrium_tol * jnp.maximum(report["size"], 1.0)
    what = "a steady motion" if steady else "an equilibrium"
    known = _known(report)
    if known is None:
        A = eqx.error_if(
            A, inconsistent, "linearize: inconsistent state (|Φ| or |c| > consistency_tol)"
        )
        if equilibrium_only:
            A = eqx.error_if(
                A, moving | unbalanced | coupled, f"linearize: the state is not {what}"
            )
        return A, equilibrium_only
    r = {k: float(v) for k, v in known.items()}
    if bool(_known(inconsistent)):
        raise ValueError(
            f"linearize: inconsistent state: |Φ(q)| = {r['phi']:.2e}, |c(q, q̇)| = {r['c']:.2e} "
            f"exceed consistency_tol = {consistency_tol:g}; use jaxmbs.equilibrium (or "
            "jaxmbs.assemble) for a consistent state"
        )
    if steady and bool(_known(coupled)) and equilibrium_only:
        raise ValueError(
            f"linearize: the named cyclic coordinates are not cyclic at this state: the reduced "
            f"field depends on them (|∂(ṡ, v̇)/∂q_c| = {r['coupling']:.2e} against max |A_red| "
            f"= {r['size']:.2e}, equilibrium_tol = {equilibrium_tol:g}); name only coordinates "
            "the equations do not depend on, or choose independent positions and velocities "
            "that the symmetry leaves alone (positions=, velocities=)"
        )
    at_equilibrium = not bool(_known(moving | unbalanced | coupled))
    if equilibrium_only and not at_equilibrium:
        rates = "the non-cyclic positions' rates" if steady else "|q̇|"
        accelerations_ = "|q̈_V|" if steady else "|q̈|"
        raise ValueError(
            f"linearize: the state is not {what} ({rates} = {r['speed']:.2e}, "
            f"{accelerations_} = {r['imbalance']:.2e} against max |M⁻¹Q| = {r['scale']:.2e}, "
            f"equilibrium_tol = {equilibrium_tol:g}): away from one, the state matrix depends "
            "on the coordinates and its eigenvalues are no natural frequencies. Find the "
            "equilibrium with jaxmbs.equilibrium (a steady motion: name its cyclic coordinates "
            "and velocities the motion keeps constant), or pass equilibrium_only=False for the "
            "local Jacobian (labelled at_equilibrium=False)"
        )
    return A, at_equilibrium
