"""Planar rigid bodies in absolute coordinates (x, y, φ) and the joints between them.

Body i owns q[3i : 3i+3] = (x_i, y_i, φ_i): the centre of mass and the angle of its local
frame. A point with local coordinates s on body i is at r_i + A(φ_i) s,
A(φ) = [[cos φ, −sin φ], [sin φ, cos φ]]; "ground" is body `None`, whose local coordinates
are global ones. Joints only write Φ (or ψ for the knife edge); every Jacobian and Γ term
comes from `jaxmbs.kinematics` by autodiff.

Geometry and inertia may be numbers, keys into a dict of parameters, or callables of the
parameters, so that `jax.grad` reaches them: `Body("crank", mass="m1", inertia="J1")`.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal import linalg
from ..._internal.types import Array
from ...kinematics.structure import warn_if_singular
from ..mechanism import Mechanism
from ._common import PointPair, Spec, cos_sin, geometry, split_joints, value
from .forces import AbstractForceElement, BodyKinematics, ElementSet, check_elements


def rotation(phi) -> Array:
    """Planar rotation matrix A(φ)."""
    c, s = cos_sin(phi)
    return jnp.array([[c, -s], [s, c]])


def rotate(phi, v) -> Array:
    """A(φ) v, written elementwise (no matrix product) so that XLA fuses it with its users."""
    c, s = cos_sin(phi)
    return jnp.stack([c * v[0] - s * v[1], s * v[0] + c * v[1]])


def points(q, bodies: np.ndarray, local: Array) -> Array:
    """Global positions of k points at once: `local` (k, 2) on `bodies` (k,), −1 for ground.

    The vectorised form of `point`: a table of every body's (x, y, cos φ − 1, sin φ) read
    by one static take (ground, out of range, reads zeros: x = y = 0, cos = 1, sin = 0) and
    one elementwise rotation, whatever k is. The trigonometry is `cos_sin`: evaluated once
    per body, also in derivatives.
    """
    frames = q.reshape(-1, 3)
    c, s = cos_sin(frames[:, 2])
    table = jnp.concatenate([frames[:, :2], jnp.stack([c - 1.0, s], axis=1)], axis=1)
    index = np.where(bodies < 0, frames.shape[0], bodies)  # out of range: ground
    rows = linalg.take(table, index)
    origin, c, s = rows[:, :2], rows[:, 2:3] + 1.0, rows[:, 3:]
    return origin + c * local + s * jnp.stack([-local[:, 1], local[:, 0]], axis=1)


def _unit_normal(axis: Spec, p) -> Array | np.ndarray:
    """The unit normal of an axis (turned by +90°) in its body's frame, from the parameters
    alone, before the body's rotation (|A a| = |a|): NumPy for constant geometry."""
    axis = geometry(axis, p)
    return linalg.unit(linalg.array_module(axis).stack([-axis[1], axis[0]]))


def _body_indices(bodies) -> np.ndarray:
    return np.asarray([-1 if b is None else b for b in bodies], dtype=np.int32)


def _stacked_points(specs, p) -> Array:
    return jnp.stack([jnp.broadcast_to(value(s, p), (2,)) for s in specs])


def angle(q, body: int | None) -> Array:
    """Angle φ of a body (0 for ground)."""
    return jnp.zeros((), q.dtype) if body is None else q[3 * body + 2]


def point(q, body: int | None, local) -> Array:
    """Global position of a point given in the body's local frame (ground: global)."""
    if body is None:
        return local
    return q[3 * body : 3 * body + 2] + rotate(q[3 * body + 2], local)


@dataclasses.dataclass(frozen=True)
class Body:
    """A planar rigid body: mass and centroidal moment of inertia (number, key or callable)."""

    name: str
    mass: Spec
    inertia: Spec


@dataclasses.dataclass(frozen=True)
class Revolute:
    """Revolute joint: point_i on body_i coincides with point_j on body_j (2 rows)."""

    name: str
    body_i: int | None
    point_i: Spec
    body_j: int | None = None
    point_j: Spec = (0.0, 0.0)
    rows: int = dataclasses.field(default=2, init=False)
    holonomic: bool = dataclasses.field(default=True, init=False)

    def __call__(self, t, q, p) -> Array:
        return point(q, self.body_i, value(self.point_i, p)) - point(
            q, self.body_j, value(self.point_j, p)
        )

    @staticmethod
    def stacked(joints: Sequence[Revolute], t, q, p) -> Array:
        """The rows of several revolute joints at once (same order as concatenating them)."""
        ends = points(
            q,
            _body_indices([*(j.body_i for j in joints), *(j.body_j for j in joints)]),
            _stacked_points([*(j.point_i for j in joints), *(j.point_j for j in joints)], p),
        )
        return (ends[: len(joints)] - ends[len(joints) :]).reshape(-1)

    def reaction(self, t, q, p, lam) -> dict[str, Array]:
        """Force exerted on body_i by body_j: −λ in global axes (Φ = P_i − P_j, so
        Φ_{r_i} = I), and the same force in body_i's frame (ground: global)."""
        force = -lam
        return {"force": force, "force_local": rotation(angle(q, self.body_i)).T @ force}


@dataclasses.dataclass(frozen=True)
class Translational:
    """Translational (prismatic) joint: body_j slides along `axis_i` fixed in body_i (2 rows).

    Rows: n_iᵀ (P_j − P_i) = 0 with n_i the unit axis turned by +90° (P_j stays on the line
    through P_i), and φ_j − φ_i − `angle` = 0 (no relative rotation).
    """

    name: str
    body_i: int | None
    point_i: Spec
    axis_i: Spec
    body_j: int | None
    point_j: Spec = (0.0, 0.0)
    angle: Spec = 0.0
    rows: int = dataclasses.field(default=2, init=False)
    holonomic: bool = dataclasses.field(default=True, init=False)

    def __call__(self, t, q, p) -> Array:
        normal = rotate(angle(q, self.body_i), _unit_normal(self.axis_i, p))
        d = point(q, self.body_j, value(self.point_j, p)) - point(
            q, self.body_i, value(self.point_i, p)
        )
        relative = angle(q, self.body_j) - angle(q, self.body_i) - value(self.angle, p)
        return jnp.stack([normal @ d, relative])

    def reaction(self, t, q, p, lam) -> dict[str, Array]:
        """Reaction on body_j: the force −λ₀ along the joint normal n_i at P_j (row 0 is
        n_iᵀ P_j + …) and the couple −λ₁ (row 1 is φ_j + …), i.e. the moment about P_j."""
        return {"normal_force": -lam[0], "moment": -lam[1]}


@dataclasses.dataclass(frozen=True)
class Distance(PointPair):
    """Distance constraint |P_j − P_i|² − L² = 0 (a rod with pin ends; 1 row)."""

    length: Spec
    rows: int = dataclasses.field(default=1, init=False)
    holonomic: bool = dataclasses.field(default=True, init=False)

    def __call__(self, t, q, p) -> Array:
        d = point(q, self.body_j, value(self.point_j, p)) - point(
            q, self.body_i, value(self.point_i, p)
        )
        return jnp.atleast_1d(d @ d - value(self.length, p) ** 2)

    def reaction(self, t, q, p, lam) -> dict[str, Array]:
        """Tension of the rod (positive when it pulls the points together): the force on
        body_j is −2λ (P_j − P_i), so the tension is 2λ |P_j − P_i|."""
        d = point(q, self.body_j, value(self.point_j, p)) - point(
            q, self.body_i, value(self.point_i, p)
        )
        return {"tension": 2.0 * lam[0] * jnp.linalg.norm(d)}


@dataclasses.dataclass(frozen=True)
class Driving:
    """Driving (rheonomic) constraint f(q) − d(t) = 0 (1 row).

    `coordinate` is a coordinate index or a callable `(q, p) -> scalar`; `motion` is
    `d(t, p) -> scalar`.
    """

    name: str
    coordinate: int | Callable
    motion: Callable
    rows: int = dataclasses.field(default=1, init=False)
    holonomic: bool = dataclasses.field(default=True, init=False)

    def __call__(self, t, q, p) -> Array:
        f = q[self.coordinate] if isinstance(self.coordinate, int) else self.coordinate(q, p)
        return jnp.atleast_1d(f - self.motion(t, p))

    def reaction(self, t, q, p, lam) -> dict[str, Array]:
        """Driving effort −λ: the force (or torque) that pushes the driven quantity f(q)
        up; its generalized force is −λ ∂f/∂q."""
        return {"force": -lam[0]}


@dataclasses.dataclass(frozen=True)
class KnifeEdge:
    """Knife edge (Pfaffian): the point's velocity has no component across the blade (1 row).

    ψ = n(φ)ᵀ ṙ_P with n the blade `axis` (body frame) turned by +90°; ṙ_P is the time
    derivative of the point position along q̇ (a jvp, not a hand-written Jacobian).
    """

    name: str
    body: int
    point: Spec
    axis: Spec = (1.0, 0.0)
    rows: int = dataclasses.field(default=1, init=False)
    holonomic: bool = dataclasses.field(default=False, init=False)

    def normal(self, q, p) -> Array:
        """Unit normal n of the blade in global axes (the blade axis turned by +90°)."""
        return rotate(angle(q, self.body), _unit_normal(self.axis, p))

    def __call__(self, t, q, qd, p) -> Array:
        local = value(self.point, p)
        _, velocity = jax.jvp(lambda q_: point(q_, self.body, local), (q,), (qd,))
        return jnp.atleast_1d(self.normal(q, p) @ velocity)

    def reaction(self, t, q, p, lam) -> dict[str, Array]:
        """Lateral force on the body at the contact point: ψ = nᵀ ṙ_P gives the generalized
        force −λ (∂ṙ_P/∂q̇)ᵀ n, i.e. the force −λ n at P (also given in global axes)."""
        return {"lateral_force": -lam[0], "force": -lam[0] * self.normal(q, p)}


Joint = Revolute | Translational | Distance | Driving | KnifeEdge


@dataclasses.dataclass(frozen=True, eq=False)
class JointSet:
    """The stacked rows of several joints, callable as Φ(t, q, p) or ψ(t, q, qd, p).

    A planar mechanism's `constraints` and `velocity_constraints` are JointSets, so the
    joints (and their `reaction` methods) stay reachable from the mechanism.
    """

    joints: tuple[Joint, ...]

    @functools.cached_property
    def _runs(self) -> tuple[tuple[Joint, ...], ...]:
        """Maximal runs of consecutive joints of one class."""
        return tuple(tuple(run) for _, run in itertools.groupby(self.joints, key=type))

    def __call__(self, t, q, *args) -> Array:
        # A run of joints with a vectorised form (`stacked`) is evaluated in one go.
        parts = []
        for run in self._runs:
            if len(run) > 1 and hasattr(type(run[0]), "stacked"):
                parts.append(type(run[0]).stacked(run, t, q, *args))
            else:
                parts.extend(j(t, q, *args) for j in run)
        return jnp.concatenate(parts)


def joints_of(mechanism: Mechanism) -> tuple[Joint, ...]:
    """The planar joints a mechanism was built from (empty if not built by
    `planar_mechanism`)."""
    out = ()
    for fn in (mechanism.constraints, mechanism.velocity_constraints):
        if isinstance(fn, JointSet):
            out += fn.joints
    return out


def relative_angle(q, body_i: int | None, body_j: int | None, *axes) -> Array:
    """φ_j − φ_i (ground: 0); the spatial arguments `axes` do not apply in the plane."""
    return angle(q, body_j) - angle(q, body_i)


def body_rotation(q, body: int | None) -> Array:
    """A(φ) of a body (ground: the identity)."""
    return rotation(angle(q, body))


#: Points, relative angles and rotations of planar bodies, for the force elements.
KINEMATICS = BodyKinematics(point, relative_angle, body_rotation)


def coordinate_names(bodies: Sequence[Body]) -> tuple[str, ...]:
    """`name.x`, `name.y`, `name.phi` for every body."""
    return tuple(f"{b.name}.{c}" for b in bodies for c in ("x", "y", "phi"))


def planar_mechanism(
    bodies: Sequence[Body],
    joints: Sequence[Joint],
    params=None,
    *,
    gravity: Spec = (0.0, -9.81),
    elements: Sequence[AbstractForceElement] = (),
    applied_forces: Callable | None = None,
    reference_q=None,
    reference_t: float = 0.0,
) -> Mechanism:
    """Assemble planar bodies and joints into a [`jaxmbs.Mechanism`][].

    M = diag(m₁, m₁, J₁, …); gravity acts at the centres of mass and gives the potential
    V = −Σ mᵢ gᵀ rᵢ; the force `elements` (`jaxmbs.joints.forces`) add their forces and the
    potentials of their springs, so the total energy is reported; `applied_forces(t, q, qd,
    p)` adds further generalized forces. Each joint is a constraint group; holonomic joints
    take the first rows of [Φ ; ψ] in the given order, knife edges the following ones. A
    `reference_q` (the structure's configuration, `jaxmbs.Mechanism`) that is singular is
    warned about (`warn_if_singular`).
    """
    bodies = tuple(bodies)
    holonomic, pfaffian, groups = split_joints(joints, len(bodies))
    checked = check_elements(elements, len(bodies), params, dimension=2, n=3 * len(bodies))
    element_set = ElementSet(checked, KINEMATICS, dimension=2)

    def masses(p):
        return jnp.stack([value(b.mass, p) for b in bodies])

    def mass_matrix(q, p):
        inertia = jnp.stack([value(b.inertia, p) for b in bodies])
        m = masses(p)
        return jnp.diag(jnp.stack([m, m, inertia], axis=1).reshape(-1)).astype(q.dtype)

    def potential_energy(q, p):
        g = value(gravity, p)
        positions = q.reshape(-1, 3)[:, :2]
        return -jnp.sum(masses(p) * (positions @ g)) + element_set.potential(q, p)

    def forces(t, q, qd, p):
        weight = masses(p)[:, None] * value(gravity, p)[None, :]
        out = jnp.concatenate([weight, jnp.zeros((len(bodies), 1))], axis=1).reshape(-1)
        out = out.astype(q.dtype)
        if element_set.elements:
            out = out + element_set.generalized_force(t, q, qd, p)
        if applied_forces is not None:
            out = out + applied_forces(t, q, qd, p)
        return out

    mechanism = Mechanism(
        mass_matrix,
        forces,
        JointSet(holonomic) if holonomic else None,
        JointSet(pfaffian) if pfaffian else None,
        params,
        coordinate_names=coordinate_names(bodies),
        constraint_groups=groups,
        potential_energy=potential_energy,
        elements=element_set if element_set.elements else None,
        joints=(*holonomic, *pfaffian),
        reference_q=reference_q,
        reference_t=reference_t,
    )
    if reference_q is not None:
        warn_if_singular(mechanism, reference_q, reference_t)
    return mechanism
