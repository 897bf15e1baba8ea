"""The model contract: a mechanism is a handful of pure functions and a parameter pytree.

Equations of motion (Pękal–Frączek 2016, eq 2.1, extended to Pfaffian constraints as in
Wojtyra–Frączek 2013, eq 9):

    M(q) q̈ + Cᵀ λ = Q(t, q, q̇),     Φ(q, t) = 0,     ψ = A(q, t) q̇ + a(q, t) = 0.

The user supplies M, Q ("forces": applied and velocity-dependent terms), Φ and ψ; every
Jacobian and acceleration term is derived by autodiff in `jaxmbs.kinematics`.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Params
from ..kinematics.structure import Structure, sample_reference, structure_of_samples

if TYPE_CHECKING:
    from .joints.forces import ElementSet

MassMatrixFn = Callable[..., jax.Array]  # (q, p) -> (n, n)
MassProductFn = Callable[..., jax.Array]  # (q, v, p) -> M(q) v, (n,)
ForcesFn = Callable[..., jax.Array]  # (t, q, qd, p) -> (n,)
ConstraintsFn = Callable[..., jax.Array]  # (t, q, p) -> (m,)
VelocityConstraintsFn = Callable[..., jax.Array]  # (t, q, qd, p) -> (h,)
PotentialFn = Callable[..., jax.Array]  # (q, p) -> ()
RestForcesFn = Callable[..., jax.Array]  # (t, q, p) -> (n,)


def _shape_of(fn: Callable, *args) -> tuple[int, ...]:
    return jax.eval_shape(fn, *args).shape


def _sampled_avals(params: Params) -> Params:
    """The parameters as `sample_reference` passes them, every leaf a (strongly typed) float
    array, as shapes: M's shape check traces `mass_matrix` at them, and the sampling
    program's jit of `mass_matrix` reuses that trace."""
    dtype = jnp.result_type(float)
    return jax.tree_util.tree_map(lambda x: jax.ShapeDtypeStruct(np.shape(x), dtype), params)


class AbstractKineticCompletion(abc.ABC):
    """A part T_c of the kinetic energy (quadratic in q̇) whose Lagrange terms are written
    in closed form rather than derived by autodiff of T (`Mechanism.from_lagrangian`):

        M_c = ∂²T_c/∂q̇²,    Q_c = ∂T_c/∂q − (∂²T_c/∂q̇∂q) q̇.
    """

    @abc.abstractmethod
    def mass_product(self, q, v, p) -> jax.Array:
        """M_c(q) v."""

    @abc.abstractmethod
    def mass_matrix(self, q, p) -> jax.Array:
        """M_c(q), shape (n, n)."""

    @abc.abstractmethod
    def force(self, q, qd, p) -> jax.Array:
        """Q_c(q, q̇), shape (n,)."""


@dataclasses.dataclass(frozen=True)
class KineticCompletion(AbstractKineticCompletion):
    """A kinetic energy T_c = ½ ṙᵀ W ṙ of the rates ṙ = R(q) q̇ of scleronomic rows r(q, p)
    (R = ∂r/∂q, W = diag(w(p))), with its Lagrange terms in closed form:

        M_c = Rᵀ W R,    Q_c = ∂T_c/∂q − (∂²T_c/∂q̇∂q) q̇ = −Rᵀ W (Ṙ q̇),

    Ṙ q̇ = d²r(q + s q̇)/ds² at s = 0 (one second directional derivative). The terms Ṙᵀ W ṙ
    of ∂²T_c/∂q̇∂q q̇ and (∂ṙ/∂q)ᵀ W ṙ of ∂T_c/∂q cancel exactly, since ∂ṙ/∂q = Ṙ (the
    second derivatives of r are symmetric), so Q_c holds at every (q, q̇), on the constraint
    manifold or off it. Where the rows are constraints of the mechanism (ṙ = 0 and R q̈ =
    −Ṙ q̇ along the motion), M_c q̈ − Q_c = Rᵀ W (R q̈ + Ṙ q̇) = 0: the motion and the
    multipliers are unchanged, while M gains Rᵀ W R, positive along directions that only the
    rows fix (`jaxmbs.io.absolute`'s mixed coordinates). The same terms by autodiff of T_c
    (`Mechanism.from_lagrangian`) nest three derivatives of r; these nest two.

    `rows(q, p) -> (k,)`, `weights(p) -> (k,)`, both pure JAX.
    """

    rows: Callable[[jax.Array, Params], jax.Array]
    weights: Callable[[Params], jax.Array]

    def _linear(self, q, p):
        """r at q, and its pullback v ↦ Rᵀ v."""
        return jax.vjp(lambda q_: self.rows(q_, p), q)

    def mass_product(self, q, v, p) -> jax.Array:
        """M_c v = Rᵀ W (R v): one jvp and one vjp of r."""
        _, rate = jax.jvp(lambda q_: self.rows(q_, p), (q,), (v,))
        return self._linear(q, p)[1](self.weights(p) * rate)[0]

    def mass_matrix(self, q, p) -> jax.Array:
        """M_c = Rᵀ W R, R by reverse mode (k rows, usually fewer than n columns)."""
        R = jax.jacrev(lambda q_: self.rows(q_, p))(q)
        return R.T @ (self.weights(p)[:, None] * R)

    def force(self, q, qd, p) -> jax.Array:
        """Q_c = −Rᵀ W (Ṙ q̇), Ṙ q̇ the second derivative of r along q̇."""

        def rate(q_):
            return jax.jvp(lambda x: self.rows(x, p), (q_,), (qd,))[1]

        _, curvature = jax.jvp(rate, (q,), (qd,))
        return -self._linear(q, p)[1](self.weights(p) * curvature)[0]


class Mechanism(eqx.Module):
    """A constrained multibody system: pure model functions plus differentiable parameters.

    **Arguments:**

    - `mass_matrix`: `M(q, p) -> (n, n)`, symmetric positive definite.
    - `forces`: `Q(t, q, qd, p) -> (n,)`, applied forces and velocity-dependent terms.
    - `constraints`: `Φ(t, q, p) -> (m,)`, holonomic constraints (optional).
    - `velocity_constraints`: `ψ(t, q, qd, p) -> (h,)`, Pfaffian constraints, linear in qd.
    - `params`: a pytree of floats; every leaf is traced, so `jax.grad` reaches it.
    - `n`: number of coordinates (may be omitted when `coordinate_names` or `reference_q`
      is given).
    - `coordinate_names`: one name per coordinate (default `q0, q1, …`).
    - `constraint_groups`: mapping group name → row indices of the stacked constraint vector
      [Φ ; ψ] (holonomic rows first); the groups must partition the rows. Default: one group
      `"holonomic"` and one `"pfaffian"`.
    - `potential_energy`: `V(q, p) -> ()`; when given, the total energy ½q̇ᵀMq̇ + V is reported
      (meaningful for conservative systems with scleronomic constraints).
    - `reference_q`: a concrete, consistent, non-singular configuration at which the
      constraint structure (rank, redundancy, independent rows) is analysed once.
    - `reference_t`: the time at which the reference configuration is taken.
    - `mass_product`: `(q, v, p) -> M(q) v` (optional), cheaper than a column of
      `mass_matrix`; with it the engine forms M from one product per colour of M's sparsity
      pattern (`jaxmbs.kinematics.algebra.mass_matrix`). `from_lagrangian` supplies it.
    - `rest_forces`: `(t, q, p) -> (n,)`, the same as `forces(t, q, 0, p)` (optional): the
      forces at rest for static analyses (`jaxmbs.equilibrium`), without the velocity terms
      that vanish there. `from_lagrangian` supplies it.
    - `elements`: the force elements inside `forces` and `potential_energy`, for reading
      their forces and power back (`jaxmbs.joints.forces.ElementSet`; the builders set it).
    - `joints`: the joints the constraints were built from, for pictures of the mechanism
      (`jaxmbs.animate`; the builders set it, empty for a hand-written mechanism).
    - `drawings`: further pictures, objects with a method `outlines(q)` (`jaxmbs.animate`:
      an imported model's geoms, `jaxmbs.io.geometry.Geometry`).
    """

    mass_matrix: MassMatrixFn = eqx.field(static=True)
    forces: ForcesFn = eqx.field(static=True)
    constraints: ConstraintsFn | None = eqx.field(static=True)
    velocity_constraints: VelocityConstraintsFn | None = eqx.field(static=True)
    params: Params
    n: int = eqx.field(static=True)
    n_holonomic: int = eqx.field(static=True)
    n_pfaffian: int = eqx.field(static=True)
    coordinate_names: tuple[str, ...] = eqx.field(static=True)
    constraint_groups: tuple[tuple[str, tuple[int, ...]], ...] = eqx.field(static=True)
    potential_energy: PotentialFn | None = eqx.field(static=True)
    structure: Structure | None = eqx.field(static=True)
    mass_product: MassProductFn | None = eqx.field(static=True)
    rest_forces: RestForcesFn | None = eqx.field(static=True)
    elements: ElementSet | None = eqx.field(static=True)
    joints: tuple = eqx.field(static=True)
    drawings: tuple = eqx.field(static=True)

    def __init__(
        self,
        mass_matrix: MassMatrixFn,
        forces: ForcesFn,
        constraints: ConstraintsFn | None = None,
        velocity_constraints: VelocityConstraintsFn | None = None,
        params: Params = None,
        *,
        n: int | None = None,
        coordinate_names: Sequence[str] | None = None,
        constraint_groups: Mapping[str, Sequence[int]] | None = None,
        potential_energy: PotentialFn | None = None,
        reference_q=None,
        reference_t: float = 0.0,
        mass_product: MassProductFn | None = None,
        rest_forces: RestForcesFn | None = None,
        elements: ElementSet | None = None,
        joints: Sequence = (),
        drawings: Sequence = (),
    ):
        if n is None:
            if coordinate_names is not None:
                n = len(coordinate_names)
            elif reference_q is not None:
                n = int(np.shape(reference_q)[0])
            else:
                raise ValueError("Mechanism needs n, coordinate_names or reference_q")
        n = int(n)
        self.mass_matrix = mass_matrix
        self.mass_product = mass_product
        self.forces = forces
        self.rest_forces = rest_forces
        self.constraints = constraints
        self.velocity_constraints = velocity_constraints
        self.params = params
        self.n = n
        self.potential_energy = potential_energy
        self.elements = elements
        self.joints = tuple(joints)
        self.drawings = tuple(drawings)
        names = tuple(coordinate_names) if coordinate_names is not None else None
        self.coordinate_names = names or tuple(f"q{i}" for i in range(n))
        if len(self.coordinate_names) != n:
            raise ValueError(f"coordinate_names has {len(self.coordinate_names)} names for n={n}")

        q = jax.ShapeDtypeStruct((n,), jnp.result_type(float))
        t = jax.ShapeDtypeStruct((), jnp.result_type(float))
        if (s := _shape_of(mass_matrix, q, _sampled_avals(params))) != (n, n):
            raise ValueError(f"mass_matrix(q, p) must return shape ({n}, {n}), got {s}")
        if (s := _shape_of(forces, t, q, q, params)) != (n,):
            raise ValueError(f"forces(t, q, qd, p) must return shape ({n},), got {s}")
        if rest_forces is not None and (s := _shape_of(rest_forces, t, q, params)) != (n,):
            raise ValueError(f"rest_forces(t, q, p) must return shape ({n},), got {s}")
        m = h = 0
        if constraints is not None:
            s = _shape_of(constraints, t, q, params)
            if len(s) != 1:
                raise ValueError(f"constraints(t, q, p) must return a vector, got shape {s}")
            m = s[0]
        if velocity_constraints is not None:
            s = _shape_of(velocity_constraints, t, q, q, params)
            if len(s) != 1:
                raise ValueError(
                    f"velocity_constraints(t, q, qd, p) must return a vector, got shape {s}"
                )
            h = s[0]
        if potential_energy is not None and (s := _shape_of(potential_energy, q, params)) != ():
            raise ValueError(f"potential_energy(q, p) must return a scalar, got shape {s}")
        self.n_holonomic, self.n_pfaffian = m, h
        self.constraint_groups = _check_groups(constraint_groups, m, h)
        self.structure = None
        if reference_q is not None:
            self.structure = _checked_structure(self, _check_q(reference_q, n), reference_t)

    @classmethod
    def from_lagrangian(
        cls,
        kinetic_energy: Callable[..., jax.Array] | None,
        potential_energy: PotentialFn | None = None,
        constraints: ConstraintsFn | None = None,
        velocity_constraints: VelocityConstraintsFn | None = None,
        params: Params = None,
        *,
        external_forces: ForcesFn | None = None,
        completions: Sequence[AbstractKineticCompletion] = (),
        differentiated_potential: PotentialFn | None = None,
        **kwargs,
    ) -> Mechanism:
        """Build a mechanism from kinetic energy T(q, q̇, p) and potential energy V(q, p).

        Lagrange's equations with T quadratic in q̇ give M = ∂²T/∂q̇² and

            Q = ∂T/∂q − (∂²T/∂q̇∂q) q̇ − ∂V/∂q + Qᵉ(t, q, q̇, p),

        so gyroscopic and centrifugal terms (e.g. spatial bodies in Euler angles) come by
        autodiff. M v is a Hessian-vector product (forward over reverse mode), the dense M
        n of them. `completions` add kinetic energies with their terms in closed form
        (`AbstractKineticCompletion`: ½ ṙᵀ W ṙ of rows' rates, `KineticCompletion`; the
        spatial bodies' own); `kinetic_energy` may be None where they hold all of T.
        `differentiated_potential`: the part of
        V whose −∂/∂q enters Q (default V itself), when Qᵉ already holds the rest's (a
        builder's force elements give their springs' −∂V/∂q with their dampers, from one
        linearisation); V stays the potential of the reported energy. `kwargs` are passed
        to the constructor (`n`, names, `reference_q`, …).
        """
        completions = tuple(completions)
        if kinetic_energy is None and not completions:
            raise ValueError("from_lagrangian needs a kinetic energy or completions")
        if differentiated_potential is None:
            differentiated_potential = potential_energy

        def momentum(q, qd, p):
            return jax.grad(kinetic_energy, argnums=1)(q, qd, p)

        def mass_product(q, v, p):
            parts = [c.mass_product(q, v, p) for c in completions]
            if kinetic_energy is not None:
                zero = jnp.zeros_like(q)
                parts.append(jax.jvp(lambda qd: momentum(q, qd, p), (zero,), (v,))[1])
            return sum(parts[1:], parts[0])

        def mass_matrix(q, p):
            parts = [c.mass_matrix(q, p) for c in completions]
            if kinetic_energy is not None:
                parts.append(jax.jacfwd(lambda qd: momentum(q, qd, p))(jnp.zeros_like(q)))
            return sum(parts[1:], parts[0])

        def applied(t, q, qd, p, out):
            """`out` with −∂V/∂q (of the differentiated potential) and Qᵉ added."""
            if differentiated_potential is not None:
                out = out - jax.grad(differentiated_potential)(q, p)
            if external_forces is not None:
                out = out + external_forces(t, q, qd, p)
            return out

        def forces(t, q, qd, p):
            parts = [c.force(q, qd, p) for c in completions]
            if kinetic_energy is not None:
                dT_dq = jax.grad(kinetic_energy, argnums=0)(q, qd, p)
                # (∂²T/∂q̇∂q) q̇: derivative of the momentum ∂T/∂q̇ along q̇ at fixed q̇.
                _, coupling = jax.jvp(lambda q_: momentum(q_, qd, p), (q,), (qd,))
                parts.append(dT_dq - coupling)
            return applied(t, q, qd, p, sum(parts[1:], parts[0]))

        def rest_forces(t, q, p):
            # At q̇ = 0 the coupling (linear in q̇) and the completions' forces (quadratic)
            # vanish; ∂T/∂q stays (zero unless T has a part without q̇).
            qd = jnp.zeros_like(q)
            if kinetic_energy is None:
                return applied(t, q, qd, p, jnp.zeros_like(q))
            return applied(t, q, qd, p, jax.grad(kinetic_energy)(q, qd, p))

        return cls(
            mass_matrix,
            forces,
            constraints,
            velocity_constraints,
            params,
            potential_energy=potential_energy,
            mass_product=mass_product,
            rest_forces=rest_forces,
            **kwargs,
        )

    def forces_at_rest(self, t, q, p: Params) -> jax.Array:
        """Q(t, q, 0, p), the applied forces at rest (static analyses): `rest_forces` where
        the mechanism has it, else `forces` at q̇ = 0."""
        if self.rest_forces is not None:
            return self.rest_forces(t, q, p)
        return self.forces(t, q, jnp.zeros_like(q), p)

    def with_structure(self, q, t: float = 0.0) -> Mechanism:
        """Return a copy whose constraint structure is analysed at the concrete `q`."""
        return self.replace_structure(_checked_structure(self, _check_q(q, self.n), t))

    def with_drawings(self, *drawings) -> Mechanism:
        """Return a copy carrying further `drawings` (objects with `outlines(q)`) for its
        pictures (same functions, parameters and structure)."""
        new = copy.copy(self)
        object.__setattr__(new, "drawings", (*self.drawings, *drawings))  # a static field
        return new

    def replace_structure(self, structure: Structure) -> Mechanism:
        """Return a copy carrying another analysed structure (same functions and parameters),
        e.g. `analyze_structure(mechanism, q, sparsity=False)` for the dense algebra."""
        new = copy.copy(self)
        object.__setattr__(new, "structure", structure)  # a static field: not reachable by tree_at
        return new

    def replace_params(self, params: Params) -> Mechanism:
        """Return a copy with other parameters (same structure)."""
        new = copy.copy(self)
        object.__setattr__(new, "params", params)
        return new

    def energy(self, q, qd, params=None, mass_matrix=None) -> jax.Array:
        """Total mechanical energy ½ q̇ᵀ M q̇ + V(q) (needs `potential_energy`); `mass_matrix`:
        M(q) where the caller has it already."""
        if self.potential_energy is None:
            raise ValueError("energy needs the mechanism's potential_energy")
        p = self.params if params is None else params
        if mass_matrix is not None:
            momentum = mass_matrix @ qd
        elif self.mass_product is None:
            momentum = self.mass_matrix(q, p) @ qd
        else:
            momentum = self.mass_product(q, qd, p)
        return 0.5 * qd @ momentum + self.potential_energy(q, p)

    def group_rows(self, name: str) -> tuple[int, ...]:
        """Rows of the stacked constraint vector that belong to the named group."""
        for group, rows in self.constraint_groups:
            if group == name:
                return rows
        raise KeyError(
            f"no constraint group {name!r}; groups: {[g for g, _ in self.constraint_groups]}"
        )


def _check_q(q, n: int) -> np.ndarray:
    q = np.asarray(q, dtype=float)
    if q.shape != (n,):
        raise ValueError(f"reference configuration must have shape ({n},), got {q.shape}")
    if not np.all(np.isfinite(q)):
        raise ValueError("reference configuration is not finite")
    return q


def _checked_structure(mechanism: Mechanism, q: np.ndarray, t: float) -> Structure:
    """The structure analysed at the concrete reference state (q, t), after checking M there.

    One compiled program evaluates C and M at the reference state (its sample 0) and at the
    states the sparsity patterns are sampled at (`sample_reference`): M is checked first
    (`_check_mass_matrix`), then C analysed (`structure_of_samples`), so a bad mass matrix
    is reported before a bad Jacobian, as when each was evaluated on its own.
    """
    samples = sample_reference(mechanism, q, t)
    _check_mass_matrix(samples.mass)
    return structure_of_samples(mechanism, samples)


def _check_mass_matrix(M: np.ndarray) -> None:
    if not np.allclose(M, M.T, rtol=1e-10, atol=1e-12 * np.max(np.abs(M), initial=1.0)):
        raise ValueError("mass matrix at the reference configuration is not symmetric")
    if not np.all(np.isfinite(M)) or np.min(np.linalg.eigvalsh(M), initial=1.0) <= 0:
        raise ValueError("mass matrix at the reference configuration is not positive definite")


def _check_groups(
    groups: Mapping[str, Sequence[int]] | None, m: int, h: int
) -> tuple[tuple[str, tuple[int, ...]], ...]:
    if groups is None:
        default = [("holonomic", tuple(range(m))), ("pfaffian", tuple(range(m, m + h)))]
        return tuple((name, rows) for name, rows in default if rows)
    out = tuple((str(name), tuple(int(r) for r in rows)) for name, rows in groups.items())
    flat = sorted(r for _, rows in out for r in rows)
    if flat != list(range(m + h)):
        raise ValueError(
            f"constraint_groups must partition the {m + h} constraint rows exactly once each"
        )
    return out
