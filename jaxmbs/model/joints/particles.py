"""Rigid bodies as dynamically equivalent particles (point-joint coordinates, Attia 2005).

A rigid body is replaced by particles whose masses reproduce its mass m, centre of mass r_G
and inertia exactly (§2). The coordinates are the global positions of the *primary*
particles only — no rotational coordinates; rigidity is kept by quadratic distance
constraints between primaries (eqs 4.2a–c, 4.4a). *Secondary* particles sit at mid-points of
primaries (eqs 4.2d, 4.4b): they carry mass but no coordinates, so the mass matrix is
constant and sparse (eq 4.3). Bodies sharing a particle are joined by a revolute (planar) or
spherical (spatial) joint that needs no constraint; their mass matrices overlap (§5).

Bodies (the particle layouts of §2):

- `PlanarBody`: primaries 1, 2, 3 anywhere (not collinear), a secondary at the mid-point of
  1 and 3; the masses solve the 4×4 linear system of eq 2.1.
- `Rod`: primaries at both ends, a secondary at the mid-point (3×3 system).
- `SpatialBody`: 4 primaries (not coplanar) and 6 secondaries at the mid-points of every
  pair (10×10 system: mass, centre of mass, the six inertia components).

The mass conditions Σₖ mₖ φ(sₖ) = ∫ φ dm are written here with the positions sₖ taken from
the centre of mass; the span of the moment functions φ does not change under a shift of
origin, so the masses are those of eq 2.1 in any body frame. The inertia given to a body is
its *centroidal* one (polar moment J_G in the plane; 3×3 tensor in space); eq 2.1c's
J_ξξ + J_ηη about a body-frame origin O equals J_G + m|r_G − O|².

Applied loads are distributed over the primaries (§3): a force f at a body point P acts as
fᵢ = αᵢ f with α the affine (barycentric) coordinates of P (eqs 3.1–3.2); a couple acts as
forces with zero resultant and the couple's moment. Geometry and inertia may be numbers,
keys into a dict of parameters, or callables of the parameters, as in `joints.planar`, so
`jax.grad` reaches them.
"""

from __future__ import annotations

import abc
import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.checks import is_concrete
from ..._internal.linalg import cross
from ..._internal.types import Array
from ..mechanism import Mechanism
from .planar import Spec, value

#: Condition number (positions scaled to unit size) above which the mass system is singular.
SINGULAR_COND = 1e10


def _midpoint_weights(n_primary: int, pairs: Sequence[tuple[int, int]]) -> np.ndarray:
    """Rows expressing every particle (primaries, then mid-points) in the primaries."""
    rows = [np.eye(n_primary)]
    for i, j in pairs:
        w = np.zeros((1, n_primary))
        w[0, [i, j]] = 0.5
        rows.append(w)
    return np.concatenate(rows)


class AbstractParticleBody(abc.ABC):
    """A rigid body replaced by primary particles (coordinates) and mid-point secondaries.

    Subclasses say where the primaries are in the body frame (`primary_local`), where the
    centre of mass is, and which moment conditions fix the masses (`_moment_system`).
    """

    name: str
    particles: tuple[str, ...]
    mass: Spec

    dim: ClassVar[int]
    #: Pairs of primaries (by position in `particles`) whose mid-points carry secondaries.
    secondary_pairs: ClassVar[tuple[tuple[int, int], ...]]
    #: What makes the mass system singular, for the error message.
    _singular_hint: ClassVar[str]

    @abc.abstractmethod
    def primary_local(self, p) -> Array:
        """Positions of the primaries in the body frame, shape (k, dim)."""

    @abc.abstractmethod
    def local_center_of_mass(self, p) -> Array:
        """Centre of mass in the body frame, shape (dim,)."""

    @abc.abstractmethod
    def _moment_system(self, s: Array, p) -> tuple[Array, Array]:
        """(A, b) with A m = b the mass conditions; `s` = particle positions from r_G."""

    @property
    def weights(self) -> np.ndarray:
        """W with (all particle positions) = W (primary positions), shape (k_all, k)."""
        return _midpoint_weights(len(self.particles), self.secondary_pairs)

    def _validate(self, count: int) -> None:
        if len(self.particles) != count or len(set(self.particles)) != count:
            raise ValueError(
                f"{type(self).__name__} {self.name!r} needs {count} distinct particle names, "
                f"got {self.particles}"
            )

    def local_positions(self, p) -> Array:
        """All particle positions (primaries, then secondaries) in the body frame."""
        return jnp.asarray(self.weights) @ self.primary_local(p)

    def mass_system(self, p) -> tuple[Array, Array]:
        """(A, b): the linear system A m = b of eq 2.1 for the particle masses."""
        return self._moment_system(self.local_positions(p) - self.local_center_of_mass(p), p)

    def masses(self, p) -> Array:
        """Particle masses (primaries, then secondaries) from the linear system of eq 2.1."""
        return jnp.linalg.solve(*self.mass_system(p))

    def check(self, p) -> None:
        """Raise `ValueError` if the particle positions make the mass system singular.

        The condition number is taken with positions scaled to unit size, so that it measures
        the geometry (collinear or coincident primaries; coplanar in space), not the units.
        Runs only on concrete parameters.
        """
        if not is_concrete(p):
            return
        s = np.asarray(self.local_positions(p) - self.local_center_of_mass(p))
        scale = float(np.max(np.linalg.norm(s, axis=1), initial=0.0))
        scaled = self._moment_system(jnp.asarray(s / scale if scale > 0 else s), p)[0]
        cond = np.linalg.cond(np.asarray(scaled)) if scale > 0 else np.inf
        if not np.isfinite(cond) or cond > SINGULAR_COND:
            raise ValueError(
                f"{type(self).__name__} {self.name!r}: the particle positions make the mass "
                f"system (Attia 2005, eq 2.1) singular (condition number {cond:.1e}); "
                + self._singular_hint
            )

    def rigidity(self, primaries: Array, p) -> Array:
        """Distance constraints |rᵢ − rⱼ|² − dᵢⱼ² = 0 for every pair of primaries (4.2, 4.4)."""
        s = self.primary_local(p)
        rows = []
        for i, j in itertools.combinations(range(len(self.particles)), 2):
            d, d0 = primaries[i] - primaries[j], s[i] - s[j]
            rows.append(d @ d - d0 @ d0)
        return jnp.stack(rows)

    def affine_weights(self, point, p) -> Array:
        """α with Σαᵢ = 1 and Σαᵢ sᵢ = s_P: a body point as a combination of primaries.

        These are the force distribution parameters of eqs 3.1–3.2 (fᵢ = αᵢ f reproduces the
        resultant and the moment of f applied at P), and they place any body point.
        """
        s = self.primary_local(p)
        A = jnp.concatenate([jnp.ones((1, s.shape[0]), s.dtype), s.T])
        return jnp.linalg.solve(A, jnp.concatenate([jnp.ones(1, s.dtype), jnp.asarray(point)]))


@dataclasses.dataclass(frozen=True)
class PlanarBody(AbstractParticleBody):
    """Planar rigid body: 3 primary particles and a secondary at the mid-point of 1 and 3.

    **Arguments:**

    - `name`: body name.
    - `particles`: names of primaries 1, 2, 3 (shared names join bodies at revolute joints).
    - `local`: their positions in the body frame, shape (3, 2); not collinear.
    - `mass`: m.
    - `inertia`: centroidal polar moment of inertia J_G.
    - `center_of_mass`: r_G in the body frame.
    """

    name: str
    particles: tuple[str, str, str]
    local: Spec
    mass: Spec
    inertia: Spec
    center_of_mass: Spec = (0.0, 0.0)

    dim: ClassVar[int] = 2
    secondary_pairs: ClassVar[tuple[tuple[int, int], ...]] = ((0, 2),)
    _singular_hint: ClassVar[str] = "the three primaries must not be collinear"

    def __post_init__(self):
        self._validate(3)

    def primary_local(self, p):
        return value(self.local, p).reshape(3, 2)

    def local_center_of_mass(self, p):
        return value(self.center_of_mass, p)

    def _moment_system(self, s, p):
        """Eq 2.1: rows 1, ξ, η, ξ² + η²; right-hand side m, 0, 0, J_G (frame at G)."""
        A = jnp.stack([jnp.ones(s.shape[0], s.dtype), s[:, 0], s[:, 1], jnp.sum(s**2, axis=1)])
        zero = jnp.zeros((), s.dtype)
        b = jnp.stack([value(self.mass, p), zero, zero, value(self.inertia, p)])
        return A, b.astype(s.dtype)


@dataclasses.dataclass(frozen=True)
class Rod(AbstractParticleBody):
    """Planar rod: primaries at both ends, a secondary at the mid-point (§2, eq 4.4).

    The body frame has particle 1 at its origin and particle 2 on its ξ axis at `length`.

    **Arguments:**

    - `name`: body name.
    - `particles`: names of the end particles 1 and 2.
    - `length`: distance between them.
    - `mass`: m.
    - `inertia`: centroidal moment of inertia J_G about the axis normal to the plane.
    - `center`: distance of the centre of mass from particle 1 along the rod (default:
      mid-length).
    """

    name: str
    particles: tuple[str, str]
    length: Spec
    mass: Spec
    inertia: Spec
    center: Spec | None = None

    dim: ClassVar[int] = 2
    secondary_pairs: ClassVar[tuple[tuple[int, int], ...]] = ((0, 1),)
    _singular_hint: ClassVar[str] = "the rod length must be positive"

    def __post_init__(self):
        self._validate(2)

    def primary_local(self, p):
        length = value(self.length, p)
        zero = jnp.zeros_like(length)
        return jnp.stack([jnp.stack([zero, zero]), jnp.stack([length, zero])])

    def local_center_of_mass(self, p):
        xi = value(self.length, p) / 2 if self.center is None else value(self.center, p)
        return jnp.stack([xi, jnp.zeros_like(xi)])

    def _moment_system(self, s, p):
        """Rows 1, ξ, ξ² on the rod axis; right-hand side m, 0, J_G."""
        A = jnp.stack([jnp.ones(s.shape[0], s.dtype), s[:, 0], s[:, 0] ** 2])
        zero = jnp.zeros((), s.dtype)
        b = jnp.stack([value(self.mass, p), zero, value(self.inertia, p)])
        return A, b.astype(s.dtype)

    def affine_weights(self, point, p):
        """α on the rod axis; a point off the axis cannot be represented (it has no moment arm
        for the two collinear primaries) and raises `ValueError` when concrete."""
        point = jnp.asarray(point)
        if is_concrete(point, p) and abs(float(point[1])) > 1e-12 * max(
            1.0, float(value(self.length, p))
        ):
            raise ValueError(
                f"Rod {self.name!r}: point {np.asarray(point)} is off the rod axis; "
                "a rod's particles can only carry forces applied on its axis"
            )
        s = self.primary_local(p)[:, 0]
        A = jnp.stack([jnp.ones_like(s), s])
        return jnp.linalg.solve(A, jnp.stack([jnp.ones_like(point[0]), point[0]]))


@dataclasses.dataclass(frozen=True)
class SpatialBody(AbstractParticleBody):
    """Spatial rigid body: 4 primaries (not coplanar) and 6 mid-point secondaries (§2).

    **Arguments:**

    - `name`: body name.
    - `particles`: names of the 4 primaries (shared names join bodies at spherical joints).
    - `local`: their positions in the body frame, shape (4, 3).
    - `mass`: m.
    - `inertia`: centroidal inertia tensor J_G in the body frame, shape (3, 3).
    - `center_of_mass`: r_G in the body frame.
    """

    name: str
    particles: tuple[str, str, str, str]
    local: Spec
    mass: Spec
    inertia: Spec
    center_of_mass: Spec = (0.0, 0.0, 0.0)

    dim: ClassVar[int] = 3
    secondary_pairs: ClassVar[tuple[tuple[int, int], ...]] = tuple(
        itertools.combinations(range(4), 2)
    )
    _singular_hint: ClassVar[str] = "the four primaries must not be coplanar"

    def __post_init__(self):
        self._validate(4)

    def primary_local(self, p):
        return value(self.local, p).reshape(4, 3)

    def local_center_of_mass(self, p):
        return value(self.center_of_mass, p)

    def _moment_system(self, s, p):
        """Rows 1, ξ, η, ζ and the six second moments; right-hand side m, 0, and the second
        moments Σ m s sᵀ = ½ tr(J_G) I − J_G of the body about G."""
        x, y, z = s.T
        A = jnp.stack([jnp.ones_like(x), x, y, z, x * x, y * y, z * z, x * y, x * z, y * z])
        J = value(self.inertia, p).reshape(3, 3)
        S = 0.5 * jnp.trace(J) * jnp.eye(3, dtype=J.dtype) - J
        b = jnp.concatenate(
            [
                jnp.stack([value(self.mass, p)]),
                jnp.zeros(3, J.dtype),
                jnp.diag(S),
                jnp.stack([S[0, 1], S[0, 2], S[1, 2]]),
            ]
        )
        return A, b.astype(s.dtype)


ParticleBody = PlanarBody | Rod | SpatialBody


def rigid_body_properties(masses, positions) -> tuple[Array, Array, Array]:
    """Mass, centre of mass and centroidal inertia of a set of particles.

    **Returns:** `(m, r_G, J_G)`; J_G is the polar moment Σ mₖ|sₖ|² in the plane and the
    tensor Σ mₖ(|sₖ|² I − sₖ sₖᵀ) in space, with sₖ = rₖ − r_G.
    """
    masses, positions = jnp.asarray(masses), jnp.asarray(positions)
    m = jnp.sum(masses)
    r_g = masses @ positions / m
    s = positions - r_g
    if positions.shape[1] == 2:
        return m, r_g, jnp.sum(masses * jnp.sum(s**2, axis=1))
    eye = jnp.eye(3, dtype=s.dtype)
    J = jnp.einsum("k,kij->ij", masses, jnp.sum(s**2, axis=1)[:, None, None] * eye)
    return m, r_g, J - jnp.einsum("k,ki,kj->ij", masses, s, s)


def couple_forces(primaries: Array, torque) -> Array:
    """Forces on the primaries equivalent to a couple (§3): zero resultant, moment `torque`.

    The minimum-norm such forces, fᵢ = ω × (rᵢ − r̄) with Σᵢ(|sᵢ|² I − sᵢsᵢᵀ) ω = torque
    (a scalar torque in the plane: fᵢ = τ k × sᵢ / Σ|sᵢ|²). For a rod this is the pair
    ±m_c/d normal to the rod of §3.
    """
    s = primaries - jnp.mean(primaries, axis=0)
    if primaries.shape[1] == 2:
        normal = jnp.stack([-s[:, 1], s[:, 0]], axis=1)
        return torque * normal / jnp.sum(s**2)
    moment = jnp.sum(jnp.sum(s**2, axis=1)) * jnp.eye(3, dtype=s.dtype) - s.T @ s
    omega = jnp.linalg.solve(moment, jnp.asarray(torque))
    return cross(omega, s)


@dataclasses.dataclass(frozen=True)
class Pin:
    """A particle held at a fixed point: r_P − c = 0 (`dim` rows). A ground revolute joint,
    or the cut joint of a closed loop (Attia 2005, §7: r₇ − c₁ = 0)."""

    name: str
    particle: str
    position: Spec

    def __call__(self, r: Callable[[str], Array], p) -> Array:
        return r(self.particle) - value(self.position, p)


@dataclasses.dataclass(frozen=True)
class Distance:
    """Massless link between two particles: |rᵢ − rⱼ|² − L² = 0 (1 row)."""

    name: str
    particle_i: str
    particle_j: str
    length: Spec

    def __call__(self, r: Callable[[str], Array], p) -> Array:
        d = r(self.particle_i) - r(self.particle_j)
        return jnp.atleast_1d(d @ d - value(self.length, p) ** 2)


ParticleJoint = Pin | Distance


@dataclasses.dataclass(frozen=True)
class PointForce:
    """A force (global components; number, key or callable of p) at a point of a body
    (body frame), distributed over the body's primaries as fᵢ = αᵢ f (eq 3.2)."""

    body: str
    point: Spec
    force: Spec


@dataclasses.dataclass(frozen=True)
class Couple:
    """A couple on a body (scalar torque in the plane, vector in space), distributed over the
    primaries as forces with zero resultant (§3; see `couple_forces`)."""

    body: str
    torque: Spec


Load = PointForce | Couple


class ParticleSystem:
    """Bodies made of particles, joined where they share particle names (Attia 2005, §5).

    The coordinates are the global positions of the primary particles that are not fixed to
    the ground, q = [r₁ ; r₂ ; …]; ground particles have known positions (numbers, keys or
    callables of the parameters) and no coordinates.

    **Arguments:**

    - `bodies`: `PlanarBody` / `Rod` (plane) or `SpatialBody` (space) instances.
    - `ground`: mapping particle name → fixed global position.
    - `order`: order of the moving particles in q (default: order of first appearance).
    """

    def __init__(
        self,
        bodies: Sequence[ParticleBody],
        ground: Mapping[str, Spec] | None = None,
        order: Sequence[str] | None = None,
    ):
        bodies = tuple(bodies)
        if not bodies:
            raise ValueError("a particle system needs at least one body")
        dims = {b.dim for b in bodies}
        if len(dims) != 1:
            raise ValueError("planar and spatial bodies cannot be mixed in one system")
        names = [b.name for b in bodies]
        if len(set(names)) != len(names):
            raise ValueError(f"body names must be unique, got {names}")
        ground = dict(ground or {})
        used = list(dict.fromkeys(n for b in bodies for n in b.particles))
        if unknown := [g for g in ground if g not in used]:
            raise ValueError(f"ground particles {unknown} belong to no body")
        moving = [n for n in used if n not in ground]
        if order is not None:
            if sorted(order) != sorted(moving):
                raise ValueError(f"order must list the moving particles {moving}, got {order}")
            moving = list(order)
        self.bodies = bodies
        self.ground = ground
        self.dim = dims.pop()
        self.moving = tuple(moving)
        self._index = {n: i for i, n in enumerate(self.moving)}
        self._body = {b.name: b for b in bodies}
        # Static incidence: every particle of every body (primaries, then its secondaries) as
        # a combination of the named primaries [moving ; ground], G = W_b S_b stacked.
        named = [*self.moving, *self.ground]
        blocks = []
        for b in bodies:
            select = np.zeros((len(b.particles), len(named)))
            select[np.arange(len(b.particles)), [named.index(n) for n in b.particles]] = 1.0
            blocks.append(b.weights @ select)
        self._incidence = np.concatenate(blocks)

    @property
    def n(self) -> int:
        """Number of coordinates, dim × (number of moving particles)."""
        return self.dim * len(self.moving)

    @property
    def coordinate_names(self) -> tuple[str, ...]:
        """`P.x`, `P.y` (, `P.z`) for every moving particle P."""
        return tuple(f"{n}.{c}" for n in self.moving for c in "xyz"[: self.dim])

    def body(self, name: str) -> ParticleBody:
        """The body with this name."""
        try:
            return self._body[name]
        except KeyError:
            raise ValueError(f"no body {name!r}; bodies: {list(self._body)}") from None

    def particle(self, q, name: str, p) -> Array:
        """Global position of a particle (a slice of q, or its fixed ground position)."""
        if name in self._index:
            i = self._index[name]
            return q[self.dim * i : self.dim * (i + 1)]
        if name in self.ground:
            return value(self.ground[name], p).astype(q.dtype)
        raise ValueError(f"no particle {name!r}")

    def primaries(self, q, body: str, p) -> Array:
        """Global positions of a body's primaries, shape (k, dim)."""
        return jnp.stack([self.particle(q, n, p) for n in self.body(body).particles])

    def point(self, q, body: str, local, p) -> Array:
        """Global position of a body point given in the body frame (affine in q)."""
        b = self.body(body)
        return b.affine_weights(jnp.asarray(local), p) @ self.primaries(q, body, p)

    def center_of_mass(self, q, body: str, p) -> Array:
        """Global position of a body's centre of mass."""
        return self.point(q, body, self.body(body).local_center_of_mass(p), p)

    def masses(self, p) -> Array:
        """Masses of all particles, body by body (primaries, then secondaries; eq 2.1)."""
        return jnp.concatenate([b.masses(p) for b in self.bodies])

    def positions(self, q, p) -> Array:
        """Global positions of all particles of all bodies (secondaries included), (K, dim)."""
        named = [q.reshape(-1, self.dim)]
        named += [value(self.ground[n], p).astype(q.dtype)[None] for n in self.ground]
        return jnp.asarray(self._incidence, q.dtype) @ jnp.concatenate(named)

    def mass_matrix(self, p, dtype=None) -> Array:
        """The constant mass matrix (eq 4.3; overlapping at shared particles, §5).

        Kinetic energy ½ Σₖ mₖ |ṙₖ|² with every particle ṙₖ = Σᵢ Gₖᵢ ṙᵢ over the moving
        primaries (G: the bodies' mid-point weights W on their primaries, stacked) gives
        M = (Gᵀ diag(m) G) ⊗ I.
        """
        G = jnp.asarray(self._incidence[:, : len(self.moving)], dtype or jnp.result_type(float))
        small = G.T @ (self.masses(p).astype(G.dtype)[:, None] * G)
        return jnp.kron(small, jnp.eye(self.dim, dtype=G.dtype))

    def particle_masses(self, p) -> dict[str, Array]:
        """Masses of every body's particles, keyed `body/particle` (secondaries `body/mid(i,j)`)."""
        out = {}
        for b in self.bodies:
            labels = list(b.particles) + [
                f"mid({b.particles[i]},{b.particles[j]})" for i, j in b.secondary_pairs
            ]
            out.update({f"{b.name}/{lab}": m for lab, m in zip(labels, b.masses(p), strict=True)})
        return out

    def potential_energy(self, q, p, gravity) -> Array:
        """V = −Σₖ mₖ g·rₖ over all particles (= −Σ_bodies m g·r_G)."""
        return -value(gravity, p).astype(q.dtype) @ (self.masses(p) @ self.positions(q, p))

    def load_forces(self, q, loads: Sequence[Load], p) -> Array:
        """Generalized forces of point forces and couples distributed over the primaries (§3).

        Each body's primary forces fᵢ enter the coordinates of its moving primaries (the
        virtual work Σ fᵢ·δrᵢ, taken as a vector–Jacobian product of the primaries' positions).
        """
        out = jnp.zeros_like(q)
        for load in loads:
            body = self.body(load.body)
            positions, pullback = jax.vjp(lambda q_, b=body: self.primaries(q_, b.name, p), q)
            if isinstance(load, PointForce):
                alpha = body.affine_weights(value(load.point, p), p)
                forces = alpha[:, None] * value(load.force, p)[None, :]
            else:
                forces = couple_forces(positions, value(load.torque, p))
            out = out + pullback(forces.astype(q.dtype))[0]
        return out

    def check(self, p) -> None:
        """Clear errors for a singular mass system or an indefinite M (too negative particle
        masses, which eq 2.1 allows), at concrete parameters."""
        for b in self.bodies:
            b.check(p)
        if not is_concrete(p):
            return
        M = np.asarray(self.mass_matrix(p))
        eig = np.linalg.eigvalsh(M)
        if not np.all(np.isfinite(M)) or eig[0] <= 1e-12 * max(1.0, eig[-1]):
            masses = {k: round(float(v), 6) for k, v in self.particle_masses(p).items()}
            raise ValueError(
                "the particle mass matrix is not positive definite: the equivalent particle "
                "masses are too negative; choose other particle positions (e.g. primaries "
                f"closer to the centre of mass). Particle masses: {masses}"
            )

    def mechanism(
        self,
        params=None,
        *,
        joints: Sequence[ParticleJoint] = (),
        gravity: Spec | None = None,
        loads: Sequence[Load] = (),
        applied_forces: Callable | None = None,
        reference_q=None,
    ) -> Mechanism:
        """The system as a [`jaxmbs.Mechanism`][] in particle coordinates (eqs 5.1–5.2).

        **Arguments:**

        - `params`: the parameter pytree every `Spec` is evaluated against.
        - `joints`: further constraints between particles (`Pin`, `Distance`).
        - `gravity`: gravitational acceleration vector (default none); it gives the
          potential energy, so the total energy is reported.
        - `loads`: `PointForce` and `Couple` loads distributed over the primaries (§3).
        - `applied_forces`: `(t, q, qd, p) -> (n,)`, any further generalized forces.
        - `reference_q`: a concrete consistent configuration for the structure analysis.

        Constraint groups: one per body (its rigidity rows, named after the body), one per
        joint. Shared particles need no constraint: they are the revolute joints.
        """
        self.check(params)
        for j in joints:
            names = (j.particle,) if isinstance(j, Pin) else (j.particle_i, j.particle_j)
            for name in names:
                if name not in self._index and name not in self.ground:
                    raise ValueError(f"joint {j.name!r} refers to unknown particle {name!r}")
        for load in loads:
            self.body(load.body)
        groups, row = {}, 0
        for b in self.bodies:
            rows = len(b.particles) * (len(b.particles) - 1) // 2
            groups[b.name] = tuple(range(row, row + rows))
            row += rows
        for j in joints:
            rows = self.dim if isinstance(j, Pin) else 1
            if j.name in groups:
                raise ValueError(f"joint name {j.name!r} is already a body or joint name")
            groups[j.name] = tuple(range(row, row + rows))
            row += rows

        def mass_matrix(q, p):
            return self.mass_matrix(p, q.dtype)

        def potential_energy(q, p):
            return self.potential_energy(q, p, gravity)

        def forces(t, q, qd, p):
            out = self.load_forces(q, loads, p)
            if gravity is not None:
                out = out - jax.grad(potential_energy)(q, p)
            if applied_forces is not None:
                out = out + applied_forces(t, q, qd, p)
            return out

        def constraints(t, q, p):
            rows = [b.rigidity(self.primaries(q, b.name, p), p) for b in self.bodies]
            rows += [j(lambda name: self.particle(q, name, p), p) for j in joints]
            return jnp.concatenate(rows)

        return Mechanism(
            mass_matrix,
            forces,
            constraints,
            params=params,
            coordinate_names=self.coordinate_names,
            constraint_groups=groups,
            potential_energy=potential_energy if gravity is not None else None,
            reference_q=reference_q,
        )
