"""Constraint reactions: generalized, per constraint group, in joint terms, and physical.

Sign convention (Wojtyra–Frączek 2013, eqs 10, 15, 16): M q̈ + Cᵀλ = Q, and

    f = Cᵀλ = Q − M q̈          generalized constraint reactions (unique even when λ is not),
    f_X = C_Xᵀλ_X              the share of constraint group X (unique only for the groups
                               that pass the solvability test of `jaxmbs.analyze_solvability`).

The force system a group exerts on the bodies is −f_X. Joint terms (`Reactions.joints`) are
physical forces and moments; each planar joint's `reaction` method states its direction.

Spatial joints (`jaxmbs.joints.spatial`): the generalized force −f_X on the coordinates q_k
of body k is, by virtual power, the wrench [F_k; N_k] = T_kᵀ (−f_X)_k, the force at the
centre of mass r_k and the moment about it, with q̇_k = T_k [ṙ_k; ω_k] the coordinates' rates
of a rigid motion (`Layout.rates`; derivation and the Euler parameters' normalisation in
`Layout.wrenches`). A joint reports the wrench body i exerts on body j: F = F_j and the
moment about its point P_j, N = N_j − (P_j − r_j) × F (`_TwoBodyJoint.wrench`; body i
receives −F, −N about P_j). It is unique where the group's reaction is (QR criterion,
`solvability.unique_groups`, evaluated per state): the flag `determined`. A rolling joint
reports the force at its contact point (`rolling.Contact.reaction`).

Which components of a redundant joint's wrench are determined (Wojtyra–Frączek 2013, §3,
eqs 21–27, component by component). λ is unique up to μ in the left null space of C
(Cᵀμ = 0, μ = Q̃ d with Q̃ an orthonormal basis of it): every λ + μ gives the same motion
and the same Cᵀλ, and moves the group's share f_X = C_Xᵀλ_X by C_Xᵀμ_X = B_X d, with
B_X = C_Xᵀ Q̃_X (eq 27). The joint's wrench W (`force`, `moment`, and their components in
body_i's frame) is linear in f_X: W = L(−f_X), L = the joint's `wrench` after
`Layout.wrenches`; row k of L is a vector ℓ_k of q-space, W_k = −ℓ_kᵀ f_X. So W varies over
the span of the columns of L B_X, and a component W_k = e_kᵀW (in the stated axes) is
determined exactly when e_k is orthogonal to that span: ℓ_kᵀ B_X = 0. The statement is per
component and needs no metric on the wrenches (no weighting of forces against moments),
but it depends on the axes: the components along the axes of another frame are
determined where those axes lie in the orthogonal complement of the span. Numerically
|ℓ_kᵀ B_X| ≤ tol ‖ℓ_k‖₁ (every column), with `analyze_solvability`'s tol = rtol · max(1, max |C|)
for B_X (`solvability.reaction_variations`): B_X's own test, max |B_X| ≤ tol, bounds
|ℓ_kᵀ b| by ‖ℓ_k‖₁ tol, so the component test is that test carried through the wrench's
map, in each component's own units; a unique joint has all its components determined.
The converse holds too: a spatial joint's f_X with no wrench is zero (its rows depend on
the normalised rotations only, so f_X is orthogonal to e, where Tᵀ is injective), so
`determined` is "every component determined" (up to the tolerance).

Physical reactions for a user-given distribution matrix B (Blajer et al. 1994, §5):
Bᵀf = M q̈ − Q (eq 32 with M q̈ = Q + Bᵀf), computed by scheme 35, 37 or 38.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

from .._internal.checks import state_vector
from .._internal.compile import quick_jit
from .._internal.types import Array, Coordinates, Params, Velocities
from ..formulations import AbstractFormulation, get_formulation
from ..integrate import NoStabilization
from ..integrate.dynamics import equation_terms
from ..kinematics.constraints import constraint_jacobian
from ..kinematics.structure import with_known_structure
from ..model.joints import rolling, spatial
from ..model.joints.planar import joints_of
from .solvability import reaction_variations, unique_groups

if TYPE_CHECKING:
    from ..model import Mechanism

#: Schemes of Blajer et al. 1994 for the physical reactions f.
SCHEMES = (35, 37, 38)


class Reactions(eqx.Module):
    """Constraint reactions at one state, or along a trajectory (leading time axis).

    **Fields:**

    - `generalized`: f = Cᵀλ = Q − M q̈, shape (…, n).
    - `groups`: constraint group name → f_X = C_Xᵀλ_X, shape (…, n).
    - `joints`: joint name → {component: value} for the groups built by the planar joint
      builders (`jaxmbs.joints.planar`): revolute `force` (on body_i, global) and
      `force_local` (body_i's frame); translational `normal_force` and `moment` (on
      body_j, about P_j); distance `tension`; driving `force`; knife edge `lateral_force`
      and `force` (on the body at the contact point). Spatial joints
      (`jaxmbs.joints.spatial`): the wrench body_i exerts on body_j (with body_j the ground:
      the load on the mount), `force` and `moment` about P_j in global axes,
      `force_local` and `moment_local` in body_i's frame (ground: global), and
      `determined` (whether the joint's reaction is unique: redundant joints share an
      undetermined part, `jaxmbs.analyze_solvability`), with per component (booleans, shape (3,),
      module docstring) `force_determined`, `moment_determined` (global axes) and
      `force_local_determined`, `moment_local_determined` (body_i's frame): whether that
      component is the same for every λ giving the motion (all True where `determined`).
      Rolling joints (`jaxmbs.joints.rolling`):
      `normal_force`, `friction`, `force` on the body at the `contact_point`, and
      `determined`.
    """

    generalized: Array
    groups: dict[str, Array]
    joints: dict[str, dict[str, Array]]


def _reactions(mechanism: Mechanism, t, q, lam, params) -> Reactions:
    C = constraint_jacobian(mechanism, q, t, params)
    groups = {}
    for name, rows in mechanism.constraint_groups:
        idx = jnp.asarray(rows)
        groups[name] = C[idx].T @ lam[idx]
    joints = {
        j.name: j.reaction(t, q, params, lam[jnp.asarray(mechanism.group_rows(j.name))])
        for j in joints_of(mechanism)
    }
    joints.update(_spatial_reactions(mechanism, q, lam, params, C, groups))
    return Reactions(generalized=C.T @ lam, groups=groups, joints=joints)


def _spatial_reactions(mechanism: Mechanism, q, lam, params, C, groups) -> dict:
    """The spatial joints' wrenches and the rolling joints' contact forces (module
    docstring), each with its `determined` flag, and the wrenches' per-component flags."""
    two_body, contacts = spatial.joints_of(mechanism), rolling.contacts_of(mechanism)
    if not (two_body or contacts):
        return {}
    structure = mechanism.structure
    redundant = structure is None or structure.redundancy > 0
    if redundant:
        variations, tol = reaction_variations(C, mechanism.constraint_groups)
        unique = unique_groups(variations, tol)
    else:  # every reaction and every component is unique
        unique = {name: jnp.ones((), bool) for name, _ in mechanism.constraint_groups}
    out = {}
    if two_body:
        layout = spatial.Layout.from_mechanism(mechanism)
        frames = layout.frames(q)
        system = -jnp.stack([groups[j.name] for j in two_body])  # −f_X on the bodies
        forces, moments = jax.vmap(lambda f: layout.wrenches(q, f))(system)
        # The wrenches of the unit generalized forces e_c, (n, N, 3) each: L's columns.
        units = jax.vmap(lambda f: layout.wrenches(q, f))(jnp.eye(q.shape[0], dtype=C.dtype))
        for j, F, N in zip(two_body, forces, moments, strict=True):
            wrench = j.wrench(frames, params, F, N)
            if redundant:
                maps = jax.vmap(lambda F, N, j=j: j.wrench(frames, params, F, N))(*units)
                flags = _determined_components(maps, variations[j.name], tol, unique[j.name])
            else:
                flags = {f"{k}_determined": jnp.ones(3, bool) for k in wrench}
            out[j.name] = {**wrench, **flags, "determined": unique[j.name]}
    for c in contacts:
        slip = f"{c.name}.no_slip"
        lam_c, lam_s = (lam[jnp.asarray(mechanism.group_rows(g))] for g in (c.name, slip))
        determined = unique[c.name] & unique[slip]
        out[c.name] = {**c.reaction(q, params, lam_c, lam_s), "determined": determined}
    return out


def _determined_components(
    maps: dict[str, Array], variations: Array, tol: Array, unique: Array
) -> dict[str, Array]:
    """Per component of each wrench vector, whether it is determined (module docstring):
    `maps[name]` holds its rows ℓ_k as columns, shape (n, 3); `variations` is B_X (n, m + h);
    |ℓ_kᵀ B_X| ≤ tol ‖ℓ_k‖₁, or the joint's reaction unique."""
    out = {}
    for name, rows in maps.items():
        spread = jnp.max(jnp.abs(rows.T @ variations), axis=1)
        out[f"{name}_determined"] = unique | (spread <= tol * jnp.sum(jnp.abs(rows), axis=0))
    return out


#: One state, compiled (with XLA's quick settings, `quick_jit`, as the trajectory's):
#: evaluated eagerly, the spatial joints' many small operations cost more than their
#: compilation.
_reactions_at = quick_jit(_reactions)


@quick_jit
def _reactions_along(mechanism, ts, qs, lams, params) -> Reactions:
    return jax.vmap(lambda t, q, lam: _reactions(mechanism, t, q, lam, params))(ts, qs, lams)


def constraint_reactions(
    mechanism: Mechanism,
    q: Coordinates,
    multipliers: Array,
    t=0.0,
    params: Params | None = None,
) -> Reactions:
    """Generalized, per-group and joint reactions from the multipliers λ.

    **Arguments:**

    - `mechanism`: the mechanism.
    - `q`, `multipliers`, `t`: one state (shapes (n,), (m + h,), ()), or a trajectory
      (shapes (T, n), (T, m + h), (T,)), e.g. a `Solution`'s `ts`, `q`, `multipliers`.
      λ comes from `jaxmbs.accelerations_and_multipliers` or `Solution.multipliers`.
    - `params`: parameters (default: the mechanism's).

    **Returns:** a [`jaxmbs.Reactions`][] (with a leading time axis for a trajectory).
    """
    params = mechanism.params if params is None else params
    q, lam = jnp.asarray(q), jnp.asarray(multipliers)
    rows = mechanism.n_holonomic + mechanism.n_pfaffian
    if q.shape[-1:] != (mechanism.n,) or lam.shape[-1:] != (rows,) or q.ndim != lam.ndim:
        raise ValueError(
            f"constraint_reactions: q must end in ({mechanism.n},) and multipliers in "
            f"({rows},) with the same leading axes; got {q.shape} and {lam.shape}"
        )
    if q.ndim == 1:
        return _reactions_at(mechanism, jnp.asarray(t, q.dtype), q, lam, params)
    if q.ndim != 2:
        raise ValueError(f"constraint_reactions: q must have shape (n,) or (T, n), got {q.shape}")
    ts = jnp.broadcast_to(jnp.asarray(t, q.dtype), q.shape[:1])
    return _reactions_along(mechanism, ts, q, lam, params)


def solution_reactions(mechanism: Mechanism, solution, params: Params | None = None) -> Reactions:
    """[`jaxmbs.constraint_reactions`][] along a [`jaxmbs.Solution`][] (vectorised over
    its output times)."""
    return constraint_reactions(mechanism, solution.q, solution.multipliers, solution.ts, params)


def _distribution(distribution, t, q, params) -> Array:
    B = distribution(t, q, params) if callable(distribution) else distribution
    return jnp.asarray(B, q.dtype)


def physical_reactions(
    mechanism: Mechanism,
    q: Coordinates,
    qd: Velocities,
    distribution: Callable | Array,
    t=0.0,
    *,
    scheme: int = 37,
    params: Params | None = None,
    method: str | AbstractFormulation = "auto",
) -> Array:
    """Physical reactions f with Bᵀf = M q̈ − Q (Blajer et al. 1994, §5, eq 32).

    The rows of B(q, t) are the directions (in q-space, by virtual work) along which the
    physical reaction components fⱼ act; they must span the same space as the rows of C
    (BDᵀ = 0 for any null-space basis Dᵀ of C) and be independent, so B has rank C rows.

    - scheme 35: f = (BM⁻¹Bᵀ)⁻¹ B(q̈ₚ − M⁻¹Q) with q̈ₚ any solution of C q̈ = Γ (here the
      minimum-norm one; Blajer uses [0; ξ]) — no dynamic solve needed, since BDᵀ = 0.
    - scheme 37: `[Bᵀ  MDᵀ] [f; 0] = M q̈ − Q`, one n × n solve (eq 37 with T_bd M = [B; DM]).
    - scheme 38: Bᵀ f = M q̈ − Q by least squares (eq 38).

    q̈ for schemes 37 and 38 comes from the formulation `method`.

    **Arguments:**

    - `mechanism`, `q`, `qd`: one state; `t` its time.
    - `distribution`: B as a callable `(t, q, p) -> (k, n)` or an array, k = rank C.
    - `scheme`: 35, 37 or 38.
    - `params`: parameters (default: the mechanism's).
    - `method`: formulation for q̈.

    **Returns:** f, shape (k,): the reaction components acting on the system.
    """
    if scheme not in SCHEMES:
        raise ValueError(f"scheme must be one of {SCHEMES}, got {scheme!r}")
    state_vector(mechanism, q)
    state_vector(mechanism, qd, "qd")
    params = mechanism.params if params is None else params
    q, qd = jnp.asarray(q), jnp.asarray(qd)
    mechanism = with_known_structure(mechanism, q, t)
    structure = mechanism.structure
    M, Q, C, gamma, *_ = equation_terms(mechanism, None, NoStabilization(), q, qd, t, params)
    B = _distribution(distribution, t, q, params)
    if B.ndim != 2 or B.shape[1] != mechanism.n or B.shape[0] != structure.rank:
        raise ValueError(
            f"the distribution matrix B must have shape (rank C, n) = ({structure.rank}, "
            f"{mechanism.n}), got {B.shape}; with redundant constraints only rank C physical "
            "reaction components can be determined"
        )
    C_i, g_i = structure.independent_part(C), structure.independent_part(gamma)
    if scheme == 35:
        qdd_p = C_i.T @ jnp.linalg.solve(C_i @ C_i.T, g_i)
        M_factor = jsl.cho_factor(M, lower=True)
        Minv_Bt = jsl.cho_solve(M_factor, B.T)
        return jnp.linalg.solve(B @ Minv_Bt, B @ (qdd_p - jsl.cho_solve(M_factor, Q)))
    qdd = get_formulation(method, mechanism).accelerations(M, Q, C, gamma, mechanism)
    rhs = M @ qdd - Q
    if scheme == 38:
        return jnp.linalg.lstsq(B.T, rhs)[0]
    # Null-space basis Dᵀ of C from the complete QR of C_Iᵀ (its last n − r columns).
    Qf, _ = jnp.linalg.qr(C_i.T, mode="complete")
    D_t = Qf[:, structure.rank :]
    return jnp.linalg.solve(jnp.concatenate([B.T, M @ D_t], axis=1), rhs)[: structure.rank]
