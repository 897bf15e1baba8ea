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
dependent columns). The eigenvalues do not depend on the choice nor on the formulation:
another choice is a change of coordinates of the same linear system.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optimistix as optx

from .._internal.types import Array, Coordinates, Params, Velocities
from ..formulations import AbstractFormulation
from ..integrate.dynamics import accelerations
from ..kinematics.constraints import constraint_jacobian, position_residual, velocity_residual
from ..kinematics.structure import pivoted_row_selection, resolve_structure
from ..model.mechanism import Mechanism


class Linearization(NamedTuple):
    """The state matrix `A` of ẋ = A δx in x = (q_P, v), with the names of its coordinates.

    Eigenvalues come in complex-conjugate pairs s = −ζω ± iω√(1 − ζ²) for the oscillating
    modes: `frequencies` are their undamped natural frequencies ω = |s| (rad/s), and
    `damping_ratios` ζ = −Re s / |s|.
    """

    A: Array
    positions: tuple[str, ...]
    velocities: tuple[str, ...]

    @property
    def eigenvalues(self) -> np.ndarray:
        """Eigenvalues of `A`, sorted by |s| then by imaginary part."""
        s = np.linalg.eigvals(np.asarray(self.A))
        return s[np.lexsort((s.imag, np.abs(s)))]

    def _oscillating(self) -> np.ndarray:
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
) -> Linearization:
    """Linearise the motion at a consistent state (q, q̇) (module docstring).

    **Arguments:** the mechanism, a consistent state (e.g. from `jaxmbs.equilibrium` with
    q̇ = 0, or any point of a trajectory), the time, the parameters (default: the
    mechanism's), the formulation that gives q̈ (the result does not depend on it).
    """
    q = np.asarray(q, dtype=float)
    qd = np.asarray(qd, dtype=float)
    structure = resolve_structure(mechanism, q, t)
    p = mechanism.params if params is None else params
    n = mechanism.n
    holonomic = np.asarray(structure.independent_holonomic_rows, dtype=int)
    all_rows = np.asarray(structure.independent_rows, dtype=int)
    C = np.asarray(constraint_jacobian(mechanism, jnp.asarray(q), t, p))
    P = _independent(C[holonomic], n) if holonomic.size else np.arange(n)
    V = _independent(C[all_rows], n) if all_rows.size else np.arange(n)
    D_q, D_v = np.setdiff1d(np.arange(n), P), np.setdiff1d(np.arange(n), V)
    t = jnp.asarray(t, dtype=jnp.result_type(float))

    def positions(q_p):
        def phi(q_d, q_p):
            full = jnp.zeros(n, q_p.dtype).at[P].set(q_p).at[D_q].set(q_d)
            return position_residual(mechanism, full, t, p)[holonomic]

        q_d = q[D_q]
        if D_q.size:
            newton = optx.Newton(rtol=1e-13, atol=1e-13)
            q_d = optx.root_find(phi, newton, jnp.asarray(q_d), q_p, max_steps=20).value
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
        qdd = accelerations(mechanism, q_, qd_, t, p, method=method, structure=structure)
        return jnp.concatenate([qd_[P], qdd[V]])

    x0 = jnp.concatenate([jnp.asarray(q[P]), jnp.asarray(qd[V])])
    A = jax.jacfwd(field)(x0)
    names = mechanism.coordinate_names
    return Linearization(A, tuple(names[i] for i in P), tuple(names[i] for i in V))
