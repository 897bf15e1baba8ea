"""Coordinate maps: a mechanism in coordinates x and a map x = f(θ, p) give it in θ.

The velocity transformation of Attia 2005 (§6, after Kim and Vanderploeg): with
J = ∂f/∂θ (the matrix B of eq 6.1), ẋ = J θ̇ and ẍ = J θ̈ + J̇ θ̇ (eq 6.2). Substituting in
M ẍ + Cᵀλ = Q and premultiplying by Jᵀ (eq 6.3) gives the equations in θ,

    M_θ = Jᵀ M J,    Q_θ = Jᵀ (Q − M J̇ θ̇)                              (eq 6.4)

— the reactions of every constraint that the map satisfies by construction drop out. The
constraints that it does not satisfy (the cut joints of closed loops, eq 6.5) are pulled
back by composition, Φ_θ(t, θ) = Φ(t, f(θ)), and enter the θ-mechanism as ordinary
constraints, so that any formulation solves eq 6.8. J comes from `jax.jacfwd`, J̇θ̇ from a
nested jvp (the second derivative of f along θ̇); nobody derives B or Ḃ by hand.

The map is generic: particles to joint angles, absolute coordinates to joint angles, or any
other smooth f with full column rank. It must not depend on time (scleronomic).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.compile import quick_jit
from .._internal.types import Array, ArrayLike
from ..kinematics import algebra
from .mechanism import Mechanism

MapFn = Callable[..., Array]  # (θ, p) -> x


def map_velocity(f: MapFn, theta, theta_dot, p) -> tuple[Array, Array]:
    """x = f(θ) and ẋ = J θ̇ (eq 6.1), one jvp."""
    return jax.jvp(lambda th: f(th, p), (theta,), (theta_dot,))


def map_acceleration_bias(f: MapFn, theta, theta_dot, p) -> Array:
    """J̇ θ̇ (the second term of eq 6.2): the derivative of J(θ)θ̇ along θ̇ at fixed θ̇."""
    return jax.jvp(lambda th: map_velocity(f, th, theta_dot, p)[1], (theta,), (theta_dot,))[1]


def _pulled_back_rows(
    mechanism: Mechanism, keep: Sequence[str] | None, n_extra: int, extra_name: str
) -> tuple[list[int], list[int], dict[str, tuple[int, ...]]]:
    """The kept holonomic and Pfaffian rows of [Φ ; ψ], and the groups renumbered for the new
    mechanism: kept holonomic rows, then the `n_extra` rows written in θ, then Pfaffian."""
    names = [g for g, _ in mechanism.constraint_groups]
    if keep is None:
        keep = names
    if unknown := [k for k in keep if k not in names]:
        raise ValueError(f"keep names unknown constraint groups {unknown}; groups: {names}")
    kept = [(g, rows) for g, rows in mechanism.constraint_groups if g in keep]
    m = mechanism.n_holonomic
    hol = [r for _, rows in kept for r in rows if r < m]
    pfaffian = [r for _, rows in kept for r in rows if r >= m]
    new_row = {r: i for i, r in enumerate(hol)}
    new_row.update({r: len(hol) + n_extra + i for i, r in enumerate(pfaffian)})
    groups = {g: tuple(new_row[r] for r in rows) for g, rows in kept}
    if n_extra:
        if extra_name in groups:
            raise ValueError(f"constraints_name {extra_name!r} is already a group name")
        groups[extra_name] = tuple(range(len(hol), len(hol) + n_extra))
    return hol, pfaffian, groups


def _pulled_back_dynamics(mechanism: Mechanism, f: MapFn) -> tuple[Callable, ...]:
    """M_θ = JᵀMJ, Q_θ = Jᵀ(Q − M J̇θ̇) (Attia 2005, §6) and V(f(θ)) (or None) of the
    mechanism in x = f(θ, p), with J = ∂f/∂θ and J̇θ̇ from a jvp."""

    def jacobian(th, p):
        return jax.jacfwd(f)(th, p)

    def mass_matrix(th, p):
        J = jacobian(th, p)
        M = J.T @ algebra.mass_matrix(mechanism, f(th, p), p) @ J
        return (M + M.T) / 2  # symmetric to round-off also in float32

    def forces(t, th, thd, p):
        x, xd = map_velocity(f, th, thd, p)
        bias = map_acceleration_bias(f, th, thd, p)
        Q = mechanism.forces(t, x, xd, p) - algebra.mass_matrix(mechanism, x, p) @ bias
        return jacobian(th, p).T @ Q

    potential = None
    if mechanism.potential_energy is not None:

        def potential(th, p):
            return mechanism.potential_energy(f(th, p), p)

    return mass_matrix, forces, potential


def _pulled_back_constraints(
    mechanism: Mechanism, f: MapFn, hol: list, pfaffian: list, constraints: Callable | None
) -> tuple[Callable | None, Callable | None]:
    """Φ(t, f(θ), p) on the kept holonomic rows `hol` followed by the user's `constraints`
    in θ (eq 6.5), and ψ(t, f(θ), J θ̇, p) on the kept Pfaffian rows (None where there are
    no such rows)."""
    hol_idx = np.asarray(hol, dtype=int)
    pfaffian_idx = np.asarray(pfaffian, dtype=int) - mechanism.n_holonomic

    def pulled_constraints(t, th, p):
        rows = []
        if hol:
            rows.append(mechanism.constraints(t, f(th, p), p)[hol_idx])
        if constraints is not None:
            rows.append(jnp.asarray(constraints(t, th, p)))
        return jnp.concatenate(rows)

    def pulled_velocity_constraints(t, th, thd, p):
        x, xd = map_velocity(f, th, thd, p)
        return mechanism.velocity_constraints(t, x, xd, p)[pfaffian_idx]

    return (
        pulled_constraints if hol or constraints is not None else None,
        pulled_velocity_constraints if pfaffian else None,
    )


def map_coordinates(
    mechanism: Mechanism,
    f: MapFn,
    reference_theta: ArrayLike | None = None,
    *,
    keep: Sequence[str] | None = None,
    constraints: Callable | None = None,
    constraints_name: str = "map",
    coordinate_names: Sequence[str] | None = None,
    n: int | None = None,
) -> Mechanism:
    """The mechanism in new coordinates θ, given x = f(θ, p) (Attia 2005, eqs 6.1–6.8).

    **Arguments:**

    - `mechanism`: a [`jaxmbs.Mechanism`][] in coordinates x.
    - `f`: the map `(θ, p) -> x`, with p the mechanism's parameters (so lengths in the map
      are differentiable too).
    - `reference_theta`: a concrete θ on the constraint manifold, for the structure analysis
      (and a check that J has full column rank there).
    - `keep`: names of the mechanism's constraint groups to pull back (default: all). Leave
      out the groups that f satisfies identically — e.g. rigidity and the uncut joints —
      and keep the cut joints (eq 6.5); kept groups keep their names.
    - `constraints`: further holonomic constraints `(t, θ, p) -> rows` written in θ,
      grouped as `constraints_name`.
    - `coordinate_names`: names of θ (default `theta0, theta1, …`).
    - `n`: the number of θ (default: from `reference_theta` or `coordinate_names`).

    **Returns:** a [`jaxmbs.Mechanism`][] in θ with M_θ = JᵀMJ, Q_θ = Jᵀ(Q − M J̇θ̇), the pulled
    back constraints and potential energy, and the same parameters.
    """
    if n is None:
        if coordinate_names is not None:
            n = len(coordinate_names)
        elif reference_theta is not None:
            n = int(np.shape(reference_theta)[0])
        else:
            raise ValueError("map_coordinates needs n, coordinate_names or reference_theta")
    theta = jax.ShapeDtypeStruct((n,), jnp.result_type(float))
    if (shape := jax.eval_shape(f, theta, mechanism.params).shape) != (mechanism.n,):
        raise ValueError(f"f(θ, p) must return shape ({mechanism.n},), got {shape}")
    n_extra = 0
    if constraints is not None:
        n_extra = jax.eval_shape(constraints, jnp.zeros(()), theta, mechanism.params).shape[0]
    hol, pfaffian, groups = _pulled_back_rows(mechanism, keep, n_extra, constraints_name)
    mass_matrix, forces, potential = _pulled_back_dynamics(mechanism, f)
    pulled_constraints, pulled_velocity_constraints = _pulled_back_constraints(
        mechanism, f, hol, pfaffian, constraints
    )
    if reference_theta is not None:
        _check_map_rank(quick_jit(jax.jacfwd(f)), reference_theta, mechanism.params)
    return Mechanism(
        mass_matrix,
        forces,
        pulled_constraints,
        pulled_velocity_constraints,
        mechanism.params,
        coordinate_names=coordinate_names or tuple(f"theta{i}" for i in range(n)),
        constraint_groups=groups,
        potential_energy=potential,
        reference_q=reference_theta,
    )


def _check_map_rank(jacobian: Callable, theta, params) -> None:
    J = np.asarray(jacobian(jnp.asarray(theta, dtype=float), params))
    if not np.all(np.isfinite(J)):
        raise ValueError("the map's Jacobian ∂f/∂θ is not finite at reference_theta")
    sv = np.linalg.svd(J, compute_uv=False)
    if sv.size and sv[-1] <= 1e-10 * max(1.0, sv[0]):
        raise ValueError(
            "the map's Jacobian ∂f/∂θ is rank-deficient at reference_theta "
            f"(smallest singular value {sv[-1]:.1e}): the coordinates θ are not independent "
            "there, choose other coordinates or another reference"
        )
