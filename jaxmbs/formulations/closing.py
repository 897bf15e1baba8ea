"""Closing conditions from inverse kinematics (Blajer, Schiehlen, Schirm 1993; 1994 §4).

The user states the constraints explicitly, resolved for the dependent coordinates:

    q_D = g(q_I, t)                                           (1993 eq 5; 1994 eq 27)

and autodiff gives what the papers derive by hand (1993 eqs 6–7, 1994 eqs 7–8):

    q̇_D = A q̇_I + η,   A = ∂g/∂q_I,   η = ∂g/∂t
    q̈_D = A q̈_I + ξ,   ξ = Ȧ q̇_I + η̇   (one jvp of (q_I, t) ↦ A q̇_I + η along (q̇_I, 1))

With Dᵀ = [I; A] the minimal equations in the k independent coordinates are (1993 eqs 12–14)

    M' q̈_I = h',   M' = DMDᵀ,   h' = D(h − M[0; ξ]),

evaluated at q = [q_I; g(q_I, t)] and q̇ = Dᵀq̇_I + [0; η]. The state is (q_I, v_I) only
(1994 eq 28): the constraints hold to round-off at every output, with no stabilisation.

**Variants and switching.** A closing condition is singular where A is not defined (the
four-bar's case a, α1 independent, at sin α3 = 0). Several variants, each with its own
independent coordinates, can be given; after each step the integrator moves to the variant
whose independent set has the best projective criterion (`jaxmbs.partition_criterion`, computed
from the null-space basis Dᵀ of the active variant) when the active one degrades, re-expressing
the same q, q̇ in the new variant (1993 §3: the switch creates no inconsistency).

**Branches.** Inverse kinematics usually has several solutions (the ± of an arccos). A variant
may carry a `branch(q, p)` function giving the data that selects the solution (e.g. a sign);
it is evaluated from the full configuration whenever the variant is entered and stays fixed
while it is active, which is consistent because branches only meet at the variant's own
singularities. Angles returned by g are whatever g returns (e.g. principal values): after a
switch a dependent angle may differ from its earlier value by a multiple of 2π.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .._internal.checks import coordinate_indices
from .._internal.types import Array, ArrayLike, Params
from ..kinematics import algebra

if TYPE_CHECKING:
    from ..model import Mechanism

ClosingFn = Callable[..., Array]  # g(t, q_I, p, branch) -> q_D
BranchFn = Callable[..., Array]  # (q, p) -> branch data


class ClosingVariant(eqx.Module):
    """One explicit form of the closing conditions, q_D = g(t, q_I, p, branch).

    **Arguments:**

    - `independent`: the independent coordinates q_I (indices or names); the dependent ones
      q_D are the others in ascending order.
    - `closing`: `g(t, q_I, p, branch) -> q_D`, shape (n − k,). Pure JAX, differentiable.
    - `branch`: `(q, p) -> array`, the data selecting the solution branch of g at a full
      configuration q (default: none; g then receives an empty array).
    - `name`: a label for messages.
    """

    independent: tuple[int | str, ...] = eqx.field(static=True, converter=tuple)
    closing: ClosingFn = eqx.field(static=True)
    branch: BranchFn | None = eqx.field(static=True, default=None)
    name: str = eqx.field(static=True, default="")

    def __check_init__(self):
        if len(self.independent) == 0:
            raise ValueError(
                "a closing-condition variant needs at least one independent coordinate"
            )
        if not callable(self.closing):
            raise ValueError("closing must be a callable g(t, q_I, p, branch) -> q_D")


class ClosingTerms(eqx.Module):
    """A variant evaluated at (t, q_I, q̇_I): full q, q̇, and A, η, ξ (1993 eqs 5–7)."""

    q: Array
    qd: Array
    A: Array
    eta: Array
    xi: Array


class ResolvedVariant(eqx.Module):
    """A variant with its index sets q_I (`ind`) and q_D (`dep`) resolved for a mechanism
    (static; made by `resolve_variant`)."""

    variant: ClosingVariant
    ind: tuple[int, ...] = eqx.field(static=True)
    dep: tuple[int, ...] = eqx.field(static=True)

    def branch_of(self, q, params) -> Array:
        if self.variant.branch is None:
            return jnp.zeros((0,), q.dtype)
        return jnp.asarray(self.variant.branch(q, params), q.dtype)

    def terms(self, qI, vI, t, params, branch) -> ClosingTerms:
        t = jnp.asarray(t, qI.dtype)

        def g(qI_, t_):
            return jnp.asarray(self.variant.closing(t_, qI_, params, branch))

        def g_and_rate(qI_, t_):
            return jax.jvp(g, (qI_, t_), (vI, jnp.ones_like(t_)))  # (q_D, A v_I + η)

        (qD, qD_dot), (_, xi) = jax.jvp(g_and_rate, (qI, t), (vI, jnp.ones_like(t)))
        A = jax.jacfwd(g)(qI, t)
        n = len(self.ind) + len(self.dep)
        ind, dep = np.asarray(self.ind), np.asarray(self.dep)
        q = jnp.zeros(n, qI.dtype).at[ind].set(qI).at[dep].set(qD)
        qd = jnp.zeros(n, qI.dtype).at[ind].set(vI).at[dep].set(qD_dot)
        return ClosingTerms(q=q, qd=qd, A=A, eta=qD_dot - A @ vI, xi=xi)

    def transpose_D(self, A) -> Array:
        """Dᵀ = [I; A] in the mechanism's coordinate order (1993 eq 11)."""
        k = len(self.ind)
        n = k + len(self.dep)
        Dt = jnp.zeros((n, k), A.dtype)
        return (
            Dt.at[np.asarray(self.ind)]
            .set(jnp.eye(k, dtype=A.dtype))
            .at[np.asarray(self.dep)]
            .set(A)
        )

    def accelerations(self, mechanism, qI, vI, t, params, branch):
        """(terms, Dᵀ, v̇_I, q̈) from the minimal equations (12)–(14)."""
        terms = self.terms(qI, vI, t, params, branch)
        Dt = self.transpose_D(terms.A)
        M_d, h_d, xi_full = _minimal(mechanism, terms, Dt, self.dep, t, params)
        vd = jsl.cho_solve(jsl.cho_factor(M_d, lower=True), h_d)
        return terms, Dt, vd, Dt @ vd + xi_full


def _minimal(mechanism, terms: ClosingTerms, Dt, dep, t, params):
    """M' = DMDᵀ, h' = D(h − M[0; ξ]) (1993 eqs 12–14), and [0; ξ] in mechanism order."""
    M = algebra.mass_matrix(mechanism, terms.q, params)
    Q = mechanism.forces(t, terms.q, terms.qd, params)
    xi_full = jnp.zeros_like(terms.q).at[np.asarray(dep)].set(terms.xi)
    return Dt.T @ M @ Dt, Dt.T @ (Q - M @ xi_full), xi_full


def resolve_variant(mechanism: Mechanism, variant: ClosingVariant) -> ResolvedVariant:
    """Check a variant against a mechanism (coordinates, the shape of q_D) and resolve its
    independent and dependent index sets."""
    ind = coordinate_indices(mechanism, variant.independent)
    dep = np.setdiff1d(np.arange(mechanism.n), ind)
    if len(dep) == 0:
        raise ValueError("a closing-condition variant must leave some coordinates dependent")
    q = jax.ShapeDtypeStruct((len(ind),), jnp.result_type(float))
    t = jax.ShapeDtypeStruct((), jnp.result_type(float))
    branch = (
        jax.eval_shape(
            variant.branch, jax.ShapeDtypeStruct((mechanism.n,), q.dtype), mechanism.params
        )
        if variant.branch is not None
        else jax.ShapeDtypeStruct((0,), q.dtype)
    )
    shape = jax.eval_shape(variant.closing, t, q, mechanism.params, branch).shape
    if shape != (len(dep),):
        raise ValueError(
            f"closing condition {variant.name or variant.independent} must return q_D of shape "
            f"({len(dep)},), got {shape}"
        )
    return ResolvedVariant(variant, tuple(int(i) for i in ind), tuple(int(i) for i in dep))


def closing_terms(
    mechanism: Mechanism,
    variant: ClosingVariant,
    q_I: ArrayLike,
    v_I: ArrayLike,
    t=0.0,
    *,
    params: Params | None = None,
    branch: ArrayLike | None = None,
) -> ClosingTerms:
    """Evaluate a closing-condition variant: q, q̇ and A, η, ξ by autodiff (1993 eqs 5–7).

    **Returns:** `ClosingTerms` with `q`, `qd` (full, mechanism order), `A` (n − k, k),
    `eta` and `xi` (n − k,).
    """
    params = mechanism.params if params is None else params
    resolved = resolve_variant(mechanism, variant)
    q_I = jnp.asarray(q_I, jnp.result_type(float))
    branch = jnp.zeros((0,), q_I.dtype) if branch is None else jnp.asarray(branch, q_I.dtype)
    return resolved.terms(q_I, jnp.asarray(v_I, q_I.dtype), t, params, branch)


def minimal_equations(
    mechanism: Mechanism,
    variant: ClosingVariant,
    q_I: ArrayLike,
    v_I: ArrayLike,
    t=0.0,
    *,
    params: Params | None = None,
    branch: ArrayLike | None = None,
) -> tuple[Array, Array]:
    """M'(q_I, t) and h'(q̇_I, q_I, t) of the minimal equations M' q̈_I = h' (1993 eqs 12–14)."""
    params = mechanism.params if params is None else params
    resolved = resolve_variant(mechanism, variant)
    terms = closing_terms(mechanism, variant, q_I, v_I, t, params=params, branch=branch)
    return _minimal(mechanism, terms, resolved.transpose_D(terms.A), resolved.dep, t, params)[:2]
