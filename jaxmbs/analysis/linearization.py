"""Linearisation of the motion on the constraint manifold: the state matrix in independent
coordinates, its eigenvalues, natural frequencies and damping ratios.

Split q into independent positions q_P and dependent ones (Φ_I(t, q) = 0 fixes the latter
locally, Φ_I the independent holonomic rows), and q̇ into independent velocities v (the
velocity constraints c(t, q, q̇) = 0 — holonomic and Pfaffian rows — fix the rest). The
motion is the ODE in x = (q_P, v):

    q(q_P):      Φ_I(t, q) = 0 with q_P held           (Newton, implicit derivative),
    q̇(q, v):     c(t, q, q̇) = 0 with q̇_V = v held      (c is affine in q̇: one solve),
    ẋ = (q̇_P, q̈_V),  q̈ from the formulation at (q, q̇).

A = ∂ẋ/∂x at the given state by forward-mode autodiff — through the Newton solve by the
implicit function theorem. Without Pfaffian rows P = V (f = n − rank C coordinates, A is
2f × 2f); with them q_P has n − rank Φ_q coordinates and v fewer. The coordinate sets are
chosen by column pivoting on the constraint rows at the state (the best-conditioned
dependent columns).

**Only at an equilibrium.** Under a change of coordinates x = h(z), the Jacobian of the
vector field transforms as A_z = H⁻¹ A_x H − H⁻¹ (∂H/∂z · ẋ) with H = ∂h/∂z: the second
term vanishes only where ẋ = 0. So at an equilibrium (q̇ = 0, q̈ = 0) the eigenvalues of A
do not depend on the choice of independent coordinates nor on the formulation, and the
modes, natural frequencies and damping ratios are those of the small motions about it;
anywhere else A depends on the coordinates, and its eigenvalues are no frequencies of
anything. `linearize` therefore refuses a state that is not an equilibrium — within
`equilibrium_tol`: |q̇| ≤ tol and |q̈| ≤ tol · max |M⁻¹Q(t, q, 0)| — unless asked with
`equilibrium_only=False`, which returns the local Jacobian labelled `at_equilibrium=False`
(its `frequencies` and `damping_ratios` then refuse to answer). Linearisation about steady
motion (relative equilibria, with cyclic coordinates) is a different computation, not
this one.
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._internal.checks import finite_params, state_vector
from .._internal.types import Array, Coordinates, Params, Velocities
from ..formulations import AbstractFormulation
from ..integrate.dynamics import accelerations
from ..integrate.inputs import merge_params
from ..kinematics import inertia
from ..kinematics.constraints import constraint_jacobian, position_residual, velocity_residual
from ..kinematics.structure import pivoted_row_selection, with_known_structure
from ..model.mechanism import Mechanism


class Linearization(NamedTuple):
    """The state matrix `A` of ẋ = A δx in x = (q_P, v), with the names of its coordinates.

    Eigenvalues come in complex-conjugate pairs s = −ζω ± iω√(1 − ζ²) for the oscillating
    modes: `frequencies` are their undamped natural frequencies ω = |s| (rad/s), and
    `damping_ratios` ζ = −Re s / |s`. `at_equilibrium` is False only for a state that
    `linearize(..., equilibrium_only=False)` accepted off an equilibrium: `A` is then the
    local Jacobian of the vector field in these coordinates, and has no modes.
    """

    A: Array
    positions: tuple[str, ...]
    velocities: tuple[str, ...]
    at_equilibrium: bool = True

    @property
    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues of `A`, sorted by |s| then by imaginary part."""
        s = np.linalg.eigvals(np.asarray(self.A))
        return s[np.lexsort((s.imag, np.abs(s)))]

    def _oscillating(self) -> np.ndarray:
        if not self.at_equilibrium:
            raise ValueError(
                "frequencies and damping ratios exist only for a linearisation about an "
                "equilibrium; this one is the local Jacobian at a state that is not one "
                "(linearize(..., equilibrium_only=False))"
            )
        s = self.eigenvalues
        return s[s.imag > 1e-9 * np.maximum(np.abs(s), 1.0)]

    @property
    def frequencies(self) -> np.ndarray:
        """Natural frequencies ω = |s| (rad/s) of the oscillating modes, ascending."""
        return np.abs(self._oscillating())

    @property
    def damping_ratios(self) -> np.ndarray:
        """ζ = −Re s / |s| of the oscillating modes, in the order of `frequencies`."""
        s = self._oscillating()
        return -s.real / np.abs(s)


def _independent(rows: np.ndarray, n: int) -> np.ndarray:
    """Coordinates left independent by the best-conditioned dependent columns of `rows`."""
    dependent, _, _ = pivoted_row_selection(rows.T, tol=1e-10 * np.max(np.abs(rows), initial=1.0))
    return np.setdiff1d(np.arange(n), dependent)


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
) -> Linearization:
    """Linearise the motion about an equilibrium (q, q̇ = 0) (module docstring).

    **Arguments:** the mechanism, a consistent state at an equilibrium (e.g. from
    `jaxmbs.equilibrium` with q̇ = 0), the time, the parameters (default: the mechanism's;
    a partial mapping replaces only its keys, as in `simulate`), the formulation that gives
    q̈ (the result does not depend on it), the largest |Φ(q)| and |c(q, q̇)| accepted
    (`consistency_tol`: the state is not projected silently), the equilibrium test's
    tolerance (`equilibrium_tol`: |q̇| and |q̈| relative to max |M⁻¹Q(t, q, 0)|), and
    `equilibrium_only=False` to accept any consistent state and get the local Jacobian,
    labelled `at_equilibrium`.

    **Returns:** a `Linearization`. Raises `ValueError`, naming the cause, for a state that
    is not finite, not consistent, or (by default) not an equilibrium.
    """
    state_vector(mechanism, q, "q")
    state_vector(mechanism, qd, "qd")
    q = np.asarray(q, dtype=float)
    qd = np.asarray(qd, dtype=float)
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(qd))):
        raise ValueError("linearize: q or qd is not finite (NaN or inf)")
    p = merge_params(mechanism.params, params, jnp.result_type(float))
    finite_params(p)
    mechanism = with_known_structure(mechanism, q, t)
    structure = mechanism.structure
    n = mechanism.n
    t = jnp.asarray(t, dtype=jnp.result_type(float))
    q, qd = jnp.asarray(q), jnp.asarray(qd)
    report = _state_report(mechanism, method, q, qd, t, p)
    at_equilibrium = _check_state(report, consistency_tol, equilibrium_tol, equilibrium_only)
    holonomic = np.asarray(structure.independent_holonomic_rows, dtype=int)
    all_rows = np.asarray(structure.independent_rows, dtype=int)
    C = np.asarray(report["C"])
    P = _independent(C[holonomic], n) if holonomic.size else np.arange(n)
    V = _independent(C[all_rows], n) if all_rows.size else np.arange(n)
    A = _state_matrix(mechanism, method, tuple(P.tolist()), tuple(V.tolist()), q, qd, t, p)
    names = mechanism.coordinate_names
    return Linearization(A, tuple(names[i] for i in P), tuple(names[i] for i in V), at_equilibrium)


# Compiled once per mechanism, method and choice of coordinates: a design study calls it
# again and again (traced op by op, a pendulum took ~1 s a call).
@eqx.filter_jit
def _state_matrix(
    mechanism: Mechanism, method, P: tuple[int, ...], V: tuple[int, ...], q, qd, t, p
) -> Array:
    """A = ∂ẋ/∂x at x = (q_P, v) (module docstring), P and V the independent positions and
    velocities."""
    structure, n = mechanism.structure, mechanism.n
    P, V = np.asarray(P, dtype=int), np.asarray(V, dtype=int)
    holonomic = np.asarray(structure.independent_holonomic_rows, dtype=int)
    all_rows = np.asarray(structure.independent_rows, dtype=int)
    D_q, D_v = np.setdiff1d(np.arange(n), P), np.setdiff1d(np.arange(n), V)

    def positions(q_p):
        def phi(q_d, q_p):
            full = jnp.zeros(n, q_p.dtype).at[P].set(q_p).at[D_q].set(q_d)
            return position_residual(mechanism, full, t, p)[holonomic]

        q_d = q[D_q]
        if D_q.size:
            newton = optx.Newton(rtol=1e-13, atol=1e-13)
            q_d = optx.root_find(phi, newton, q_d, q_p, max_steps=20).value
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
        return jnp.concatenate([qd_[P], qdd[V]])

    return jax.jacfwd(field)(jnp.concatenate([q[P], qd[V]]))


@eqx.filter_jit
def _state_report(mechanism: Mechanism, method, q, qd, t, p) -> dict[str, Array]:
    """What the checks of the state read: max |Φ|, max |c|, max |q̇|, max |q̈|, the scale
    max |M⁻¹Q(t, q, 0)| of the accelerations, and C."""
    qdd = accelerations(mechanism, q, qd, t, p, method=method)
    free = jnp.linalg.solve(
        inertia.mass_matrix(mechanism, q, p), mechanism.forces(t, q, jnp.zeros_like(q), p)
    )
    return {
        "phi": jnp.max(jnp.abs(position_residual(mechanism, q, t, p)), initial=0.0),
        "c": jnp.max(jnp.abs(velocity_residual(mechanism, q, qd, t, p)), initial=0.0),
        "speed": jnp.max(jnp.abs(qd)),
        "imbalance": jnp.max(jnp.abs(qdd)),
        "scale": jnp.max(jnp.abs(free)),
        "C": constraint_jacobian(mechanism, q, t, p),
    }


def _check_state(
    report: dict, consistency_tol: float, equilibrium_tol: float, equilibrium_only: bool
) -> bool:
    """Refuse an inconsistent state; whether it is an equilibrium (module docstring), and
    with `equilibrium_only` refuse one that is not."""
    phi, c, speed, imbalance, scale = (
        float(report[k]) for k in ("phi", "c", "speed", "imbalance", "scale")
    )
    if not (phi <= consistency_tol and c <= consistency_tol):
        raise ValueError(
            f"linearize: inconsistent state: |Φ(q)| = {phi:.2e}, |c(q, q̇)| = {c:.2e} exceed "
            f"consistency_tol = {consistency_tol:g}; use jaxmbs.equilibrium (or "
            "jaxmbs.assemble) for a consistent state"
        )
    at_equilibrium = speed <= equilibrium_tol and imbalance <= equilibrium_tol * scale
    if equilibrium_only and not at_equilibrium:
        raise ValueError(
            f"linearize: the state is not an equilibrium (|q̇| = {speed:.2e}, |q̈| = "
            f"{imbalance:.2e} against max |M⁻¹Q| = {scale:.2e}, equilibrium_tol = "
            f"{equilibrium_tol:g}): away from one, the state matrix depends on the "
            "coordinates and its eigenvalues are no natural frequencies. Find the "
            "equilibrium with jaxmbs.equilibrium, or pass equilibrium_only=False for the "
            "local Jacobian (labelled at_equilibrium=False)"
        )
    return at_equilibrium
