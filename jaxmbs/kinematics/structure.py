"""Structure analysis outside jit: rank, redundancy, independent rows, null-space dimension.

Rank is data but shapes in JAX are static, so the structure of a mechanism is analysed once,
with NumPy, at a concrete (generic, assembled) configuration (DESIGN §3). The formulations then
receive the independent-row selection and the null-space dimension s = n − r as static data.

Independent rows are chosen by Gram–Schmidt with row pivoting (the QR decomposition with
column pivoting of Cᵀ, Pękal–Frączek 2016 eq 3.31): holonomic rows first, so that position
projection can use them alone, then the Pfaffian rows that add rank (Wojtyra–Frączek 2013 §3.2).
The same pivoting on the columns of the independent rows picks r dependent coordinates u
(the rest, v, are independent) for coordinate partitioning (Pękal–Frączek 2016, §3.3.1).
"""

from __future__ import annotations

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.compile import quick_jit
from .._internal.linalg import pivoted_rows
from .._internal.types import Model
from .algebra import AbstractAlgebra, BandedAlgebra, DenseAlgebra
from .constraints import constraint_jacobian, position_residual, velocity_residual
from .sparsity import SAMPLES, Reference, Sparsity, greedy_colouring, pattern_rows

#: Relative tolerance below which a pivoted row is taken as dependent.
RANK_RTOL = 1e-8


@dataclasses.dataclass(frozen=True)
class Structure:
    """Static constraint structure of a mechanism at a generic configuration.

    Row numbers refer to the stacked constraint vector c = [Φ̇ ; ψ]: holonomic rows
    0 … m−1, Pfaffian rows m … m+h−1.

    **Fields:**

    - `n`: number of coordinates.
    - `n_holonomic`, `n_pfaffian`: m and h.
    - `rank`: r = rank C.
    - `rank_holonomic`: rank Φ_q.
    - `independent_rows`: r rows of C that span its row space (sorted).
    - `independent_holonomic_rows`: rank Φ_q rows of Φ_q spanning its row space (sorted).
    - `smallest_pivot`: the smallest accepted pivot relative to the largest (a conditioning hint).
    - `dependent_coordinates`: r coordinates u whose columns of the independent rows, Φ_u,
      are best conditioned at the analysed configuration (column pivoting; sorted).
    - `sparsity`: structural non-zeros of C and M (`jaxmbs.kinematics.sparsity.Sparsity`), or None.
    """

    n: int
    n_holonomic: int
    n_pfaffian: int
    rank: int
    rank_holonomic: int
    independent_rows: tuple[int, ...]
    independent_holonomic_rows: tuple[int, ...]
    smallest_pivot: float
    dependent_coordinates: tuple[int, ...] = ()
    sparsity: Sparsity | None = None

    @property
    def n_constraints(self) -> int:
        """m + h, the number of stacked constraint rows."""
        return self.n_holonomic + self.n_pfaffian

    @property
    def redundancy(self) -> int:
        """Redundancy degree p = m + h − r (Wojtyra–Frączek 2013, eq 35)."""
        return self.n_constraints - self.rank

    @property
    def dof(self) -> int:
        """Null-space dimension s = n − r: the number of independent velocities."""
        return self.n - self.rank

    @property
    def dependent_rows(self) -> tuple[int, ...]:
        """Rows left out of the independent set (the redundant ones)."""
        chosen = set(self.independent_rows)
        return tuple(i for i in range(self.n_constraints) if i not in chosen)

    def independent_part(self, x):
        """The independent rows of `x` (C, Γ or any array with one entry per constraint row
        along its first axis); `x` itself when there is no redundancy."""
        if self.redundancy == 0:
            return x
        return x[jnp.asarray(self.independent_rows, dtype=int)]

    def expand_multipliers(self, C, lam_ind):
        """Minimum-norm λ over all rows from the multipliers λ_I of the independent rows.

        Every row of C is a combination of the independent rows, C = T C_I with
        T = C C_Iᵀ (C_I C_Iᵀ)⁻¹. Any λ with Tᵀλ = λ_I gives the same generalized reaction
        Cᵀλ = C_Iᵀλ_I (Wojtyra–Frączek 2013, eq 10); the minimum-norm one is
        λ = T (TᵀT)⁻¹ λ_I.
        """
        if self.redundancy == 0:
            return lam_ind
        C_i = C[jnp.asarray(self.independent_rows, dtype=int)]
        T = jnp.linalg.solve(C_i @ C_i.T, C_i @ C.T).T
        return T @ jnp.linalg.solve(T.T @ T, lam_ind)

    def reaction_multipliers(self, C, reaction):
        """Minimum-norm λ with Cᵀλ = `reaction` (= Q − M q̈), through the independent rows."""
        if self.rank == 0:
            return jnp.zeros(C.shape[0], reaction.dtype)
        C_i = self.independent_part(C)
        return self.expand_multipliers(C, jnp.linalg.solve(C_i @ C_i.T, C_i @ reaction))

    @property
    def algebra(self) -> AbstractAlgebra:
        """How M and C are stored and solved (`jaxmbs.kinematics.algebra`): banded on the
        sparsity pattern where it is known, else dense. The one place that choice is made."""
        rows = self.independent_rows, self.dependent_rows
        return DenseAlgebra(*rows) if self.sparsity is None else BandedAlgebra(self.sparsity, *rows)

    @property
    def independent_coordinates(self) -> tuple[int, ...]:
        """The s = n − r coordinates v left out of `dependent_coordinates`."""
        chosen = set(self.dependent_coordinates)
        return tuple(i for i in range(self.n) if i not in chosen)


def pivoted_row_selection(
    rows: np.ndarray, basis: np.ndarray | None = None, tol: float = 0.0
) -> tuple[list[int], np.ndarray, list[float]]:
    """Greedy maximal independent subset of `rows` (Gram–Schmidt with pivoting on norm, in
    float64: `jaxmbs._internal.linalg.pivoted_rows`), stopped at the first pivot ≤ `tol`.

    Rows are first projected onto the orthogonal complement of the orthonormal `basis` rows.

    **Returns:** the chosen row indices in pivot order, the new orthonormal rows, the pivots.
    """
    rows = np.asarray(rows, dtype=np.float64)
    basis = None if basis is None or not basis.size else np.asarray(basis, np.float64)
    order, pivots, directions = pivoted_rows(rows, min(rows.shape), basis, xp=np)
    count = int(np.argmin(pivots > tol)) if np.any(pivots <= tol) else len(pivots)
    return [int(i) for i in order[:count]], directions[:count], [float(p) for p in pivots[:count]]


@dataclasses.dataclass(frozen=True)
class Samples:
    """C and M evaluated by one compiled program (`sample_reference`): at the reference state
    itself, unperturbed, as sample 0, and at the `SAMPLES` random states near it that the
    sparsity patterns are detected at (`_sampled_states`) as samples 1 … `SAMPLES`.

    **Fields:** the `reference` state, the `jacobians` C, shape (1 + `SAMPLES`, m + h, n),
    and the `masses` M, shape (1 + `SAMPLES`, n, n), as NumPy arrays.
    """

    reference: Reference
    jacobians: np.ndarray
    masses: np.ndarray

    @property
    def jacobian(self) -> np.ndarray:
        """C at the reference state (sample 0)."""
        return self.jacobians[0]

    @property
    def mass(self) -> np.ndarray:
        """M at the reference state (sample 0), for the mass-matrix check of a build."""
        return self.masses[0]


#: The error of a structure analysis that could not be evaluated (tracers).
NOT_CONCRETE = (
    "structure analysis needs concrete q and parameters (it runs outside jit); "
    "give the Mechanism a reference configuration (reference_q=...) or call "
    "jaxmbs.analyze_structure before entering jit/vmap/grad"
)


def sample_reference(mechanism: Model, q, t: float = 0.0, params=None) -> Samples:
    """C and M at the concrete reference state (sample 0) and at `SAMPLES` random states near
    it (`_sampled_states`), all in one compiled program, `jax.jit(jax.vmap(sample))`: the
    reference's C for the rank analysis, its M for the mass-matrix check of a build
    (`jaxmbs.Mechanism`), the others for the sparsity patterns (`sparsity_of`).

    **Arguments:** as `analyze_structure`'s.
    """
    params = mechanism.params if params is None else params

    def sample(t_, q_, p_):
        C = jax.jacfwd(lambda qd: velocity_residual(mechanism, q_, qd, t_, p_))(jnp.zeros_like(q_))
        # jit-wrapped: traced at the avals of `jaxmbs.Mechanism`'s shape check, and reused
        return C, jax.jit(mechanism.mass_matrix)(q_, p_)

    try:
        reference = Reference.of(q, t, params)
        perturbed = _sampled_states(reference, np.random.default_rng(20260))
        unperturbed = (reference.t, np.asarray(reference.q), reference.params)
        states = jax.tree_util.tree_map(
            lambda x, xs: np.concatenate([np.asarray(x)[None], xs]), unperturbed, perturbed
        )
        jacobians, masses = (np.asarray(a) for a in quick_jit(jax.vmap(sample))(*states))
    except Exception as err:  # tracers cannot be analysed
        raise ValueError(NOT_CONCRETE) from err
    return Samples(reference, jacobians, masses)


#: C and Φ compiled alone, at the top level with XLA's quick settings (`quick_jit`): shared
#: by `analyze_structure` without sparsity and `warn_if_singular`.
_jacobian = quick_jit(constraint_jacobian)
_residual = quick_jit(position_residual)


def analyze_structure(
    mechanism: Model, q, t: float = 0.0, params=None, *, sparsity: bool = True
) -> Structure:
    """Analyse rank and redundancy of the constraint Jacobian at a concrete configuration.

    With `sparsity`, C at `q` comes from the one program that also samples the sparsity
    patterns (`sample_reference`, sample 0); without, from `constraint_jacobian` compiled
    alone (`_jacobian`, the compilation `warn_if_singular` shares).

    **Arguments:**

    - `mechanism`: the mechanism.
    - `q`: a concrete configuration, preferably assembled and away from singular positions.
    - `t`: time (rheonomic constraints).
    - `params`: parameters (default: the mechanism's own).
    - `sparsity`: also detect the sparsity patterns of C and M (compressed Jacobians and the
      `"banded"` formulation use them).

    **Returns:** a [`jaxmbs.Structure`][].
    """
    if sparsity:
        return structure_of_samples(mechanism, sample_reference(mechanism, q, t, params))
    params = mechanism.params if params is None else params
    try:
        jacobian = np.asarray(_jacobian(mechanism, jnp.asarray(q), t, params))
    except Exception as err:  # tracers cannot be analysed
        raise ValueError(NOT_CONCRETE) from err
    return structure_of_jacobian(mechanism, jacobian)


def structure_of_samples(mechanism: Model, samples: Samples) -> Structure:
    """The structure from C at the reference state (sample 0 of `samples`) with the sparsity
    patterns of the other samples (`sparsity_of`)."""
    return structure_of_jacobian(mechanism, samples.jacobian, sparsity_of(mechanism.n, samples))


def structure_of_jacobian(
    mechanism: Model, jacobian: np.ndarray, sparsity: Sparsity | None = None
) -> Structure:
    """Rank, independent rows and dependent coordinates of the concrete constraint Jacobian
    `jacobian` (C at the analysed configuration), carrying `sparsity`."""
    if not np.all(np.isfinite(jacobian)):
        raise ValueError("constraint Jacobian is not finite at the reference configuration")
    m, n = mechanism.n_holonomic, mechanism.n
    scale = max(1.0, float(np.max(np.abs(jacobian), initial=0.0)))
    tol = RANK_RTOL * scale
    hol, basis, piv_h = pivoted_row_selection(jacobian[:m], tol=tol)
    pf, _, piv_p = pivoted_row_selection(jacobian[m:], basis=basis, tol=tol)
    independent = sorted(hol) + sorted(m + i for i in pf)
    pivots = piv_h + piv_p
    rank = len(independent)
    # Independent cross-check by singular values (same tolerance).
    if jacobian.size:
        sv = np.linalg.svd(jacobian, compute_uv=False)
        svd_rank = int(np.sum(sv > tol))
        if svd_rank != rank:
            raise ValueError(
                f"rank is ill-determined at this configuration (pivoting: {rank}, "
                f"SVD: {svd_rank}); analyse at a generic, non-singular configuration"
            )
    dependent, _, _ = pivoted_row_selection(jacobian[independent].T, tol=tol)
    return Structure(
        n=n,
        n_holonomic=m,
        n_pfaffian=mechanism.n_pfaffian,
        rank=rank,
        rank_holonomic=len(hol),
        independent_rows=tuple(independent),
        independent_holonomic_rows=tuple(sorted(hol)),
        smallest_pivot=min(pivots) / max(pivots) if pivots else 1.0,
        dependent_coordinates=tuple(sorted(dependent)),
        sparsity=sparsity,
    )


def _perturbed(leaf, rng: np.random.Generator):
    x = np.asarray(leaf, dtype=float)
    noise = rng.standard_normal(x.shape)
    return x * (1.0 + 0.1 * noise) + 0.01 * rng.standard_normal(x.shape)


def _sampled_states(reference: Reference, rng: np.random.Generator):
    """`SAMPLES` random (t, q, params) near the reference state, every parameter leaf
    perturbed (`_perturbed`)."""
    q = np.asarray(reference.q)
    leaves, treedef = jax.tree_util.tree_flatten(reference.params)
    q_s = q + 0.1 * (1.0 + np.abs(q)) * rng.standard_normal((SAMPLES, q.size))
    t_s = reference.t + rng.uniform(size=SAMPLES)
    p_s = [np.stack([_perturbed(x, rng) for _ in range(SAMPLES)]) for x in leaves]
    return t_s, q_s, jax.tree_util.tree_unflatten(treedef, p_s)


def _nonzero(x: np.ndarray) -> np.ndarray:
    """Entries non-zero, or not finite (conservative), at any sample (the leading axis)."""
    x = np.asarray(x)
    return np.any((x != 0) | ~np.isfinite(x), axis=0)


def sparsity_of(n: int, samples: Samples) -> Sparsity:
    """The patterns of C and M over the `SAMPLES` random states of `samples` (1 …
    `SAMPLES`; the reference state, sample 0, left out), their column colours.

    Coordinates, time and every parameter leaf are perturbed randomly (fixed seed,
    `sample_reference`), so non-zeros that vanish at the reference state or at the given
    parameter values are found. Non-finite entries count as non-zero (conservative).
    """
    C_pattern, M_pattern = _nonzero(samples.jacobians[1:]), _nonzero(samples.masses[1:])
    M_pattern = M_pattern | np.eye(n, dtype=bool)
    M_pattern |= M_pattern.T
    return Sparsity(
        n=n,
        jacobian=pattern_rows(C_pattern),
        mass=pattern_rows(M_pattern),
        colours=tuple(int(c) for c in greedy_colouring(C_pattern)),
        mass_colours=tuple(int(c) for c in greedy_colouring(M_pattern)),
        reference=samples.reference,
    )


#: Iteration patterns detected, per (sparsity, model functions).
_ITERATION_PATTERNS: dict = {}


def iteration_pattern(mechanism: Model) -> tuple[tuple[int, ...], ...]:
    """The (n + m + h)-square pattern of an implicit step's Newton iteration matrix on all
    constraint rows,

        [ M + K + D    Cᵀ ]      K = ∂(M a + Cᵀλ − Q)/∂q,  D = −∂Q/∂q̇,
        [ C + C_q      0  ],     C_q = ∂c/∂q, c = C q̇ + … the velocity residual,

    the union over every step size (`jaxmbs.integrate.generalized_alpha`, eq 8): so the force
    elements' coupling included. Detected once per structure and model, on demand (it
    compiles the forces: structure analysis does not pay for it), near the state the
    structure's sparsity was detected at, by finite steps of each coordinate and velocity
    (first derivatives only: a Jacobian of the vjp Cᵀλ would compile a second-order
    program); a row counts as moved where any bit of it changes. Runs eagerly under a trace.
    Returns the columns of each row (`pattern_rows`). Like every sampled pattern it misses a
    coupling that vanishes at all the samples (a one-sided contact force inactive near the
    reference state): analyse such a model with `sparsity=False` (the dense S).
    """
    sparsity = mechanism.structure.sparsity
    key = (sparsity, mechanism.mass_matrix, mechanism.forces, mechanism.constraints,
           mechanism.velocity_constraints)  # fmt: skip
    if key in _ITERATION_PATTERNS:
        return _ITERATION_PATTERNS[key]
    n, k = mechanism.n, len(sparsity.jacobian)
    rng = np.random.default_rng(20261)
    t_s, q_s, p_s = _sampled_states(sparsity.reference, rng)
    p_ = jax.tree_util.tree_map(lambda x: x[0], p_s)  # one perturbed set, constant: compiles fast
    v_s, a_s = rng.standard_normal((2, SAMPLES, n))
    lam_s = rng.standard_normal((SAMPLES, k))

    def sample(t_, q_, v, a, lam):
        def linearised(y):  # [M a + Cᵀλ − Q; c] at (q, q̇) = y
            q_, v_ = y[:n], y[n:]
            c, transpose = jax.vjp(lambda qd: velocity_residual(mechanism, q_, qd, t_, p_), v_)
            force = mechanism.mass_matrix(q_, p_) @ a + transpose(lam)[0]
            return jnp.concatenate([force - mechanism.forces(t_, q_, v_, p_), c])

        y = jnp.concatenate([q_, v])
        steps = 0.1 * (1.0 + jnp.abs(y)) * jnp.eye(2 * n, dtype=y.dtype)
        moved = jax.vmap(lambda dy: linearised(y + dy) != linearised(y))(steps)
        return moved[:n].T | moved[n:].T

    with jax.ensure_compile_time_eval():
        moved = _nonzero(quick_jit(jax.vmap(sample))(t_s, q_s, v_s, a_s, lam_s))
    C = sparsity.jacobian_pattern
    pattern = pattern_rows(np.block([
        [sparsity.mass_pattern | moved[:n], C.T],
        [C | moved[n:], np.zeros((k, k), dtype=bool)],
    ]))  # fmt: skip
    _ITERATION_PATTERNS[key] = pattern
    return pattern


def resolve_structure(mechanism: Model, q=None, t=0.0) -> Structure:
    """The mechanism's static structure, analysed from a concrete `q` if it has none."""
    return with_known_structure(mechanism, q, t).structure


def with_known_structure(mechanism: Model, q=None, t=0.0) -> Model:
    """The mechanism itself if its structure is known, else a copy analysed at the concrete
    `q` (a mechanism built without `reference_q`); a traced `q` is refused, naming
    `reference_q`."""
    if mechanism.structure is not None:
        return mechanism
    if q is None or isinstance(q, jax.core.Tracer):
        raise ValueError(
            "the mechanism's constraint structure is unknown and q is traced: construct the "
            "Mechanism with reference_q=..., or call mechanism.with_structure(q) outside jit"
        )
    return mechanism.with_structure(q, t)


#: Distance of the configurations near a reference one at which its rank is compared
#: (`warn_if_singular`), relative to the largest coordinate (at least 1).
NEARBY_STEP = 1e-3
#: How many of them.
NEARBY_SAMPLES = 2
#: Newton steps at most that take one back onto the constraint manifold.
NEWTON_STEPS = 6


def warn_if_singular(mechanism: Model, reference_q, reference_t: float = 0.0) -> None:
    """Warn when `reference_q` is a singular configuration of the mechanism.

    The constraint structure (rank r of C, the independent rows, s = n − r degrees of
    freedom) is analysed once, at the reference configuration (`Mechanism(reference_q=…)`,
    `analyze_structure`), and every formulation takes it as the mechanism's. At a singular
    configuration — a branch point, links in line — C loses rank there alone: r is too small
    and the redundancy m + h − r it reports is not the mechanism's. Redundancy that holds all
    along the constraint manifold (a duplicated joint, a planar loop of spatial joints) keeps
    the rank at every assembled configuration, while off the manifold the rank is generally
    higher; so r is compared with the rank at `NEARBY_SAMPLES` assembled configurations near
    the reference: a step of `NEARBY_STEP` along a random direction of the null space of
    Φ_q, taken back onto Φ = 0 by minimum-norm Newton steps (as `assemble`), analysed by
    `analyze_structure`. A higher rank there is warned about (`UserWarning`), naming both;
    a neighbour not assembled in `NEWTON_STEPS` steps, or whose rank is ill-determined, is
    left out. Where C has full rank at the reference (r = min(m + h, n)) no configuration
    has a higher one and nothing is computed.

    **Arguments:** the built `mechanism` (its `structure` analysed at `reference_q`), the
    reference configuration and its time.
    """
    structure = mechanism.structure
    if structure is None or structure.rank == min(structure.n_constraints, structure.n):
        return
    t, p, m = reference_t, mechanism.params, structure.n_holonomic
    jacobian, residual = _jacobian, _residual  # `analyze_structure`'s compilation of C
    q_ref = jnp.asarray(reference_q, dtype=float)
    tangents = np.eye(mechanism.n)
    if m:  # the right singular vectors past rank Φ_q span its null space
        holonomic = np.asarray(jacobian(mechanism, q_ref, t, p))[:m]
        tangents = np.linalg.svd(holonomic)[2][structure.rank_holonomic :]
    scale = max(1.0, float(jnp.max(jnp.abs(q_ref))))
    tol = 1000 * float(jnp.finfo(q_ref.dtype).eps) * scale  # `assemble`'s
    rng = np.random.default_rng(0)
    nearby = []
    for _ in range(NEARBY_SAMPLES):
        direction = rng.standard_normal(tangents.shape[0]) @ tangents
        q = q_ref + NEARBY_STEP * scale * direction / np.linalg.norm(direction)
        for _ in range(NEWTON_STEPS):
            phi = np.asarray(residual(mechanism, q, t, p))
            if np.max(np.abs(phi), initial=0.0) <= tol:
                break
            C = np.asarray(jacobian(mechanism, q, t, p))[:m]
            q = q - np.linalg.pinv(C, rcond=RANK_RTOL) @ phi
        else:
            continue  # not assembled: no neighbour to compare with
        try:
            nearby.append(analyze_structure(mechanism, q, t, sparsity=False).rank)
        except ValueError:  # a rank that the pivots and the SVD disagree on
            continue
    if nearby and max(nearby) > structure.rank:
        warnings.warn(
            f"reference_q is a singular configuration: C has rank {structure.rank} there and "
            f"rank {max(nearby)} at assembled configurations nearby, so the structure "
            f"analysed at it ({structure.redundancy} redundant rows, {structure.dof} degrees "
            "of freedom) is not the mechanism's: choose a generic configuration as reference_q",
            stacklevel=3,
        )
