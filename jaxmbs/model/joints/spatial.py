"""Spatial rigid bodies in absolute coordinates and the spatial joints.

Body i owns a slice of q: its centre of mass r_i = (x, y, z), then its orientation, in one of
two kinds (`Body(..., orientation=...)`; a mechanism may mix them):

- `"euler_parameters"` (the default): e = (e₀, e₁, e₂, e₃), 7 coordinates, with the rotation
  matrix A(e) = (2e₀² − 1) I + 2 (ē ēᵀ + e₀ ẽ) and the normalisation eᵀe − 1 = 0 as a
  holonomic row of its own (Haug 1989, §6.3; Nikravesh 1988, §6.3). No orientation is
  singular. A(e) is evaluated in a form invariant to the scale of e (`parameter_rotation`),
  so joint rows are orthogonal to the normalisation rows and both reactions stay separate.
- `"zxz"`: ZXZ Euler angles (φ, θ, ψ), 6 coordinates, A = R_z(φ) R_x(θ) R_z(ψ)
  (Pękal–Frączek 2016, §1). The mass matrix is singular at the gimbal lock sin θ = 0; choose
  body frames so that θ stays away from 0 and π (e.g. a body's local z axis horizontal).

A `Layout` records where each body's coordinates lie; `Layout.frames(q)` gives every body's
position and rotation matrix at once (`Frames`), on which joints, force elements and
outputs are written. A point with local coordinates s is at r_i + A s; "ground" is body
`None`, whose local coordinates are global ones.

Kinetic energy (Lagrangian form, `Mechanism.from_lagrangian`):

    T = Σ ½ mᵢ |ṙᵢ|² + ½ ω'ᵢᵀ Jᵢ ω'ᵢ  (+ ½ J̄ᵢ (2 eᵢᵀ ėᵢ)² for Euler parameters),

with the body-frame angular velocity ω' = 2 G(e) ė for Euler parameters (Nikravesh 1988,
eq 6.98), and read off the skew-symmetric matrix Aᵀ Ȧ for ZXZ angles α (Ȧ = Σₖ (∂A/∂αₖ) α̇ₖ
by forward-mode autodiff of `rotation`). With Euler parameters ½ ω'ᵀJω' = 2 ėᵀ GᵀJG ė is singular
along e (G e = 0); the last term, with J̄ = tr J / 3, completes it: 2 eᵀė is the fourth
component of Nikravesh's 4-vector 2 [eᵀ; G] ė and vanishes wherever the normalisation's
velocity constraint eᵀė = 0 holds, so the motion, the multipliers and the energy on the
constraint manifold are those of ½ ω'ᵀJω' alone (its Lagrange terms, 4 J̄ (eᵀë + ėᵀė) e,
vanish where the normalisation's acceleration constraint holds) while M stays positive
definite. The mass matrix and the gyroscopic and centrifugal terms are written in closed
form body by body (`_RigidBodies`, a kinetic completion), from ω' = B(α) α̇ with B = 2 G(e)
or the ZXZ rate matrix (`zxz_rate_matrix`), not derived by autodiff of T.
Joints only write Φ; applied forces at points and torques become generalized forces through
the transposed Jacobian of the point position (or of ω) by a vjp.

Geometry and inertia may be numbers, keys into a dict of parameters, or callables of the
parameters, so that `jax.grad` reaches them: `Body("arm", mass="m1", inertia="J1")`. An inertia
is a scalar (isotropic), three principal moments, or a 3×3 tensor, in the body frame.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._internal.linalg import array_module, cross, unit
from ..._internal.types import Array
from ...kinematics.structure import warn_if_singular
from ..mechanism import AbstractKineticCompletion, KineticCompletion, Mechanism
from ._common import PointPair, Spec, geometry, split_joints, value
from .forces import AbstractForceElement, BodyKinematics, ElementSet, check_elements
from .orientation import (
    body_rate_matrix,
    euler_angles,
    euler_parameters,
    euler_parameters_to_zxz,
    parameter_rates,
    parameter_rotation,
    rotation,
    zxz_rate_matrix,
    zxz_rates,
    zxz_to_euler_parameters,
)

EULER_PARAMETERS = "euler_parameters"
ZXZ = "zxz"
#: The coordinates of a body of each orientation kind (centre of mass first).
COORDINATES = {
    EULER_PARAMETERS: ("x", "y", "z", "e0", "e1", "e2", "e3"),
    ZXZ: ("x", "y", "z", "phi", "theta", "psi"),
}
#: The name of the constraint group of the Euler parameters' normalisations eᵀe − 1 = 0.
NORMALIZATION = "normalization"


def matvec(A, v) -> Array:
    """A v for 3×3 matrices, as an elementwise product and a sum.

    XLA on CPU does not fuse tiny `dot` operations; this form fuses with its neighbours, which
    makes the many 3-vector operations of the joints several times cheaper.
    """
    return jnp.sum(A * v[..., None, :], axis=-1)


def dot(a, b) -> Array:
    """aᵀ b of 3-vectors (fusible, see `matvec`)."""
    return jnp.sum(a * b, axis=-1)


def _check_orientation(orientation: str) -> None:
    if orientation not in COORDINATES:
        raise ValueError(f"orientation must be one of {tuple(COORDINATES)}, got {orientation!r}")


def pose(position, matrix, orientation: str = EULER_PARAMETERS) -> np.ndarray:
    """Body coordinates of a centre of mass and a frame orientation (a rotation matrix):
    (x, y, z, e₀, e₁, e₂, e₃) for Euler parameters (`euler_parameters`, Shepperd's method),
    (x, y, z, φ, θ, ψ) for `"zxz"` (`euler_angles`; raises at the gimbal lock)."""
    _check_orientation(orientation)
    convert = euler_parameters if orientation == EULER_PARAMETERS else euler_angles
    return np.concatenate([np.asarray(position, dtype=float), convert(matrix)])


class Frames(NamedTuple):
    """Positions (N, 3) and rotation matrices (N, 3, 3) of all bodies at one configuration,
    computed once and shared by every joint."""

    positions: Array
    rotations: Array

    def point(self, body: int | None, local) -> Array:
        """Global position of a point given in the body's local frame (ground: global)."""
        if body is None:
            return local
        return self.positions[body] + matvec(self.rotations[body], local)

    def vector(self, body: int | None, local) -> Array:
        """A body-fixed vector in global components (ground: unchanged)."""
        return local if body is None else matvec(self.rotations[body], local)

    def in_frame(self, body: int | None, vectors) -> Array:
        """Global vectors (..., 3) in the body's components, Aᵀ w (ground: unchanged)."""
        if body is None:
            return vectors
        return jnp.sum(self.rotations[body] * vectors[..., :, None], axis=-2)


#: A function q -> Frames (`Layout.frames`), on which joints and force elements are written.
FramesFn = Callable[[Array], Frames]


def _vee(W) -> Array:
    """The vector w of the antisymmetric part of W = w̃ + (symmetric), shape (..., 3)."""
    return 0.5 * jnp.stack(
        [W[..., 2, 1] - W[..., 1, 2], W[..., 0, 2] - W[..., 2, 0], W[..., 1, 0] - W[..., 0, 1]],
        axis=-1,
    )


def rotation_derivatives(angles) -> Array:
    """∂A/∂eₖ of the rotation matrix, shape (..., 3, 3, 3) (last axis k), by forward-mode
    autodiff of `rotation`."""
    flat = angles.reshape(-1, 3)
    dA = jax.vmap(jax.jacfwd(rotation))(flat)
    return dA.reshape(*angles.shape[:-1], 3, 3, 3)


def body_angular_velocity(angles, rates) -> Array:
    """Angular velocity ω' in the body frame from ZXZ angles and their rates, shape (..., 3).

    ω̃' = Aᵀ Ȧ with Ȧ = Σₖ (∂A/∂eₖ) ėₖ (`rotation_derivatives`); the antisymmetric part is
    taken, so round-off cannot leak a symmetric component. The rates enter only through this
    sum, so ∂²T/∂ė² needs ∂A/∂e once rather than once per rate direction.
    """
    A = rotation(angles)
    A_dot = jnp.sum(rotation_derivatives(angles) * rates[..., None, None, :], axis=-1)
    return _vee(jnp.sum(A[..., :, :, None] * A_dot[..., :, None, :], axis=-3))


def parameter_angular_velocity(e, e_dot) -> Array:
    """Angular velocity ω' = 2 G(e) ė in the body frame from Euler parameters, shape (..., 3)
    (`body_rate_matrix`; Nikravesh 1988, eq 6.98)."""
    return 2 * jnp.sum(body_rate_matrix(e) * e_dot[..., None, :], axis=-1)


def inertia_tensor(spec: Spec, params) -> Array:
    """3×3 inertia tensor from a scalar (isotropic), 3 principal moments, or a tensor."""
    J = value(spec, params)
    if J.ndim == 0:
        return J * jnp.eye(3, dtype=J.dtype)
    if J.shape == (3,):
        return jnp.diag(J)
    if J.shape == (3, 3):
        return J
    raise ValueError(f"an inertia must be a scalar, 3 moments or a 3×3 tensor; got {J.shape}")


def perpendicular_pair(axis) -> tuple[Array, Array]:
    """Unit vectors u, v with (â, u, v) right-handed orthonormal, â = axis / |axis|.

    The helper direction is the coordinate axis least aligned with â, so u and v are smooth
    in the axis (they are differentiable with respect to a parametrised axis). A NumPy axis
    (a constant, `geometry`) gives NumPy vectors, computed while tracing.
    """
    xp = array_module(axis)
    a = unit(axis)
    helper = xp.eye(3, dtype=a.dtype)[xp.argmin(xp.abs(a))]
    u = cross(a, helper)
    u = unit(u)
    return u, cross(a, u)


@dataclasses.dataclass(frozen=True)
class Body:
    """A spatial rigid body: mass and centroidal inertia in its frame (number, key, callable),
    and the kind of its orientation coordinates: `"euler_parameters"` (default) or `"zxz"`."""

    name: str
    mass: Spec
    inertia: Spec
    orientation: str = EULER_PARAMETERS

    def __post_init__(self):
        _check_orientation(self.orientation)


def _frame(frame: str) -> str:
    """`frame` checked: "global" or "body"."""
    if frame not in ("global", "body"):
        raise ValueError(f'frame must be "global" or "body", got {frame!r}')
    return frame


@dataclasses.dataclass(frozen=True)
class Layout:
    """Where each body's coordinates lie in q (static): body k owns q[offsets[k] : offsets[k]
    + 6 or 7], centre of mass first, then its ZXZ angles or Euler parameters.

    **Arguments:** `names` and `orientations`, one per body (`Layout.from_bodies`, or
    `Layout.from_mechanism` to read them back from a built mechanism's coordinate names).
    """

    names: tuple[str, ...]
    orientations: tuple[str, ...]

    def __post_init__(self):
        if len(self.names) != len(self.orientations):
            raise ValueError("Layout needs one orientation per body name")
        for orientation in self.orientations:
            _check_orientation(orientation)

    @classmethod
    def from_bodies(cls, bodies: Sequence[Body]) -> Layout:
        """The layout of `spatial_mechanism(bodies, …)`: the bodies in the given order."""
        return cls(tuple(b.name for b in bodies), tuple(b.orientation for b in bodies))

    @classmethod
    def from_mechanism(cls, mechanism: Mechanism) -> Layout:
        """The layout of a mechanism built by `spatial_mechanism`, from its coordinate names
        (`name.x, name.y, name.z` then `name.e0 … name.e3` or `name.phi, name.theta,
        name.psi`); the coordinates after the bodies' (`extra_coordinates`) are no body's."""
        names, orientations, rest = [], [], list(mechanism.coordinate_names)
        while rest:
            body = rest[0].rpartition(".")[0]
            kinds = [
                k for k, c in COORDINATES.items() if rest[: len(c)] == [f"{body}.{x}" for x in c]
            ]
            if not kinds and names:  # the extra coordinates
                break
            if not kinds:
                raise ValueError(f"not the coordinates of spatial bodies: {rest[:7]}")
            names.append(body)
            orientations.append(kinds[0])
            rest = rest[len(COORDINATES[kinds[0]]) :]
        return cls(tuple(names), tuple(orientations))

    @property
    def widths(self) -> np.ndarray:
        """The number of coordinates of every body: 7 (Euler parameters) or 6 (ZXZ)."""
        return np.array([len(COORDINATES[o]) for o in self.orientations], dtype=int)

    @property
    def offsets(self) -> np.ndarray:
        """The first coordinate of every body."""
        return np.concatenate([[0], np.cumsum(self.widths)[:-1]]).astype(int)

    @property
    def n(self) -> int:
        """The number of coordinates of all bodies."""
        return int(np.sum(self.widths))

    def coordinates(self, body: int) -> slice:
        """The slice of q that body `body` owns."""
        start = int(self.offsets[body])
        return slice(start, start + int(self.widths[body]))

    def coordinate_names(self) -> tuple[str, ...]:
        """`name.x`, `name.y`, `name.z`, then `name.e0 … name.e3` or `name.phi`,
        `name.theta`, `name.psi`, for every body."""
        return tuple(
            f"{b}.{c}"
            for b, o in zip(self.names, self.orientations, strict=True)
            for c in COORDINATES[o]
        )

    def bodies_of(self, orientation: str) -> np.ndarray:
        """The indices of the bodies of one orientation kind."""
        return np.array([k for k, o in enumerate(self.orientations) if o == orientation], int)

    def _take(self, x, bodies: np.ndarray, start: int, width: int) -> Array:
        """x[..., offsets + start : … + width] of the given bodies, shape (..., len, width);
        x may go on past the bodies' coordinates (a mechanism's extra coordinates)."""
        if bodies.size == len(self.names) and len(set(self.orientations)) == 1:  # a reshape
            bodies_x = x[..., : self.n]
            return bodies_x.reshape(*x.shape[:-1], len(self.names), -1)[..., start : start + width]
        index = self.offsets[bodies][:, None] + start + np.arange(width)
        return x[..., index]

    def positions(self, q) -> Array:
        """Centres of mass of all bodies, shape (..., N, 3)."""
        return self._take(q, np.arange(len(self.names)), 0, 3)

    def euler_parameters(self, q) -> Array:
        """Euler parameters of every body, shape (..., N, 4): a ZXZ body's converted
        (`zxz_to_euler_parameters`)."""
        return self._per_kind({EULER_PARAMETERS: lambda e: e, ZXZ: zxz_to_euler_parameters}, q)

    def zxz_angles(self, q) -> Array:
        """ZXZ angles of every body, shape (..., N, 3): an Euler-parameter body's converted
        (`euler_parameters_to_zxz`, θ ∈ [0, π])."""
        return self._per_kind({EULER_PARAMETERS: euler_parameters_to_zxz, ZXZ: lambda a: a}, q)

    def rotations(self, q) -> Array:
        """Rotation matrices of all bodies, shape (..., N, 3, 3)."""
        return self._per_kind({EULER_PARAMETERS: parameter_rotation, ZXZ: rotation}, q)

    def body_angular_velocities(self, q, qd) -> Array:
        """ω' of every body in its own frame, shape (..., N, 3): 2 G(e) ė, or from Aᵀ Ȧ."""
        functions = {EULER_PARAMETERS: parameter_angular_velocity, ZXZ: body_angular_velocity}
        return self._per_kind(functions, q, qd)

    def velocities(self, q, qd, frame: str = "global") -> tuple[Array, Array]:
        """Every body's centre velocity ṙ and angular velocity, shapes (..., N, 3) each:
        ω = A ω' in the global frame (`frame="global"`) or ω' in the body's own
        (`frame="body"`); the inverse of `rates`."""
        omega = self.body_angular_velocities(q, qd)
        if _frame(frame) == "global":
            omega = jnp.sum(self.rotations(q) * omega[..., None, :], axis=-1)
        return self.positions(qd), omega

    def rates(self, q, velocities, angular_velocities, frame: str = "global") -> Array:
        """The coordinates' rates q̇ (shape (n,)) that give every body the centre velocity
        `velocities[k]` and the angular velocity `angular_velocities[k]` (shapes (N, 3), in
        the global frame or, with `frame="body"`, in each body's own): ṙ as given, and the
        orientation rates of ω' = Aᵀ ω, ė = ½ Gᵀ ω' (`parameter_rates`) or the ZXZ rates
        (`zxz_rates`, infinite at sin θ = 0). The inverse of `velocities`.

        Initial velocities in a user's terms: `q̇₀ = layout.rates(q0, v, ω)`, then
        `jaxmbs.assemble` (or `project_velocities`) makes them consistent with the joints.
        """
        velocities, omega = jnp.asarray(velocities), jnp.asarray(angular_velocities)
        shape = (len(self.names), 3)
        if velocities.shape != shape or omega.shape != shape:
            raise ValueError(
                f"rates needs velocities and angular velocities of shape {shape}, got "
                f"{velocities.shape} and {omega.shape}"
            )
        if _frame(frame) == "global":  # ω' = Aᵀ ω
            omega = jnp.sum(self.rotations(q) * omega[..., :, None], axis=-2)
        qd = jnp.zeros(self.n, jnp.result_type(q, velocities, omega, float))
        functions = {EULER_PARAMETERS: parameter_rates, ZXZ: zxz_rates}
        for kind, function in functions.items():
            bodies = self.bodies_of(kind)
            if bodies.size:
                width = len(COORDINATES[kind]) - 3
                angles = self._take(jnp.asarray(q), bodies, 3, width)
                index = self.offsets[bodies][:, None] + np.arange(3 + width)
                block = jnp.concatenate([velocities[bodies], function(angles, omega[bodies])], -1)
                qd = qd.at[index].set(block)
        return qd

    def wrenches(self, q, generalized_force) -> tuple[Array, Array]:
        """The wrench on every body of a force system given by its generalized force f
        (shape (n,)): forces F (N, 3) at the centres of mass and moments N_c (N, 3) about
        them, global axes.

        By virtual power. `rates` is linear in the centre velocities and the global angular
        velocities, q̇_k = T_k [v_k; ω_k]; f's power on such a motion is
        f_kᵀ T_k [v_k; ω_k] = Fᵀ v_k + N_cᵀ ω_k for all v_k, ω_k, so [F; N_c] = T_kᵀ f_k
        (computed as the transpose of `rates`, a vjp). T_k = diag(I, ½ Eᵀ(e)) for Euler
        parameters, since ė = ½ Gᵀ Aᵀ ω = ½ Eᵀ ω with E = [−ē, ẽ + e₀ I] (Nikravesh 1988,
        eqs 6.95–6.98; A = E Gᵀ, GᵀG = I − e eᵀ and E e = 0), so N_c = ½ E f_e; and
        diag(I, Z Aᵀ) for ZXZ angles, Z the map ω' → α̇ of `zxz_rates` (undefined at
        sin θ = 0). With Euler parameters the motions q̇ = T [v; ω] are those that keep
        eᵀe = 1 (eᵀė = ½ eᵀEᵀω = 0), and Tᵀ e = 0: the normalisation's reaction 2λe has no
        wrench, and a joint's f (orthogonal to e, `parameter_rotation`) has the same power
        f_kᵀ q̇_k = Fᵀṙ_k + N_cᵀω_k for every q̇_k, ω_k from `velocities`.
        """
        f = jnp.asarray(generalized_force)[..., : self.n]  # extra coordinates: no body's
        zeros = jnp.zeros((len(self.names), 3), jnp.result_type(q, f, float))
        _, transpose = jax.vjp(lambda v, w: self.rates(q, v, w), zeros, zeros)
        return transpose(f.astype(zeros.dtype))

    def _per_kind(self, functions: dict[str, Callable], *arrays) -> Array:
        """`functions[kind]` of the orientation coordinates (of each of `arrays`) of the
        bodies of that kind, stacked in body order along the body axis."""
        parts, order = [], []
        for kind, function in functions.items():
            bodies = self.bodies_of(kind)
            if bodies.size:
                width = len(COORDINATES[kind]) - 3
                parts.append(function(*(self._take(x, bodies, 3, width) for x in arrays)))
                order.append(bodies)
        if len(parts) == 1:
            return parts[0]
        axis = arrays[0].ndim - 1
        stacked = jnp.concatenate(parts, axis=axis)
        return jnp.take(stacked, np.argsort(np.concatenate(order)), axis=axis)

    def frames(self, q) -> Frames:
        """The frames of all bodies at a configuration q (shape (n,))."""
        return Frames(self.positions(q), self.rotations(q))

    def normalization(self, q) -> Array:
        """eᵀe − 1 of every Euler-parameter body, in body order (one row each)."""
        e = self._take(q, self.bodies_of(EULER_PARAMETERS), 3, 4)
        return jnp.sum(e * e, axis=-1) - 1


class _TwoBodyJoint:
    """Geometry shared by the joints: points and body-fixed vectors of bodies i and j.

    A joint's rows are `residual(frames, p)` at the frames of one configuration (the builder
    computes them once for all joints; `Layout.frames(q)` gives them for any q).
    """

    #: Spatial joints write holonomic rows Φ (their number: each joint's `rows`).
    holonomic: ClassVar[bool] = True

    def residual(self, frames: Frames, p) -> Array:
        raise NotImplementedError

    def wrench(self, frames: Frames, p, forces: Array, moments: Array) -> dict[str, Array]:
        """The wrench body i exerts on body j through the joint, from the wrenches of the
        joint's force system on every body (`Layout.wrenches` of −C_Xᵀλ_X: forces (N, 3) at
        the centres, moments (N, 3) about them).

        On body j (centre r_j), the force F = F_j and the moment about the joint point P_j,
        N = N_cj − (P_j − r_j) × F. Body i receives −F and −N about P_j: the rows depend on
        the relative pose of the bodies only (up to terms that vanish where Φ = 0), so a
        motion of both bodies together has no power, and the wrenches balance on the
        constraint manifold. So with body j the ground the wrench on it is −F_i and
        −(N_ci − (P_j − r_i) × F_i): the load body i puts on its mount.

        **Returns:** `force`, `moment` (global axes) and `force_local`, `moment_local` (the
        same vectors in body i's frame, the frame of the joint's axis_i and normals; ground:
        global axes).
        """
        point = self._p(frames, p, "j")
        body, sign = (self.body_i, -1.0) if self.body_j is None else (self.body_j, 1.0)
        force = sign * forces[body]
        moment = sign * (moments[body] - cross(point - frames.positions[body], forces[body]))
        to_local = jnp.eye(3) if self.body_i is None else frames.rotations[self.body_i].T
        return {
            "force": force,
            "moment": moment,
            "force_local": matvec(to_local, force),
            "moment_local": matvec(to_local, moment),
        }

    def _p(self, frames: Frames, p, side: str) -> Array:
        body, local = getattr(self, f"body_{side}"), getattr(self, f"point_{side}")
        return frames.point(body, value(local, p))

    def _separation(self, frames: Frames, p) -> Array:
        """d = P_j − P_i."""
        return self._p(frames, p, "j") - self._p(frames, p, "i")

    def _axis(self, frames: Frames, p, side: str) -> Array:
        body, local = getattr(self, f"body_{side}"), getattr(self, f"axis_{side}")
        return frames.vector(body, value(local, p))

    def _normal_pair(self, p) -> Array:
        """The unit pair (u, v) perpendicular to axis_i in body i's frame, shape (2, 3):
        from the parameters alone (NumPy for constant geometry)."""
        axis = geometry(self.axis_i, p)
        return array_module(axis).stack(perpendicular_pair(axis))

    def _across(self, frames: Frames, p, vectors) -> Array:
        """(uᵢ·w, vᵢ·w) of global vectors w (..., 3), shape (..., 2): with uᵢ = Aᵢ u, as
        u·(Aᵢᵀ w), one product with Aᵢᵀ for both normals."""
        return matvec(self._normal_pair(p), frames.in_frame(self.body_i, vectors))

    def _parallel_rows(self, frames: Frames, p) -> Array:
        """axis_j ∥ axis_i: uᵢ·aⱼ = vᵢ·aⱼ = 0 (2 rows)."""
        return self._across(frames, p, self._axis(frames, p, "j"))

    def _on_line_rows(self, frames: Frames, p) -> Array:
        """P_j on the line through P_i along axis_i: uᵢ·d = vᵢ·d = 0 (2 rows)."""
        return self._across(frames, p, self._separation(frames, p))


@dataclasses.dataclass(frozen=True)
class _PointLineJoint(_TwoBodyJoint):
    """A joint between a line of body i (through point_i along axis_i) and point_j of body j."""

    name: str
    body_i: int | None
    point_i: Spec
    axis_i: Spec
    body_j: int | None
    point_j: Spec


@dataclasses.dataclass(frozen=True)
class _AxisJoint(_PointLineJoint):
    """A joint between a point and an axis fixed on each of bodies i and j."""

    axis_j: Spec


@dataclasses.dataclass(frozen=True)
class Spherical(_TwoBodyJoint):
    """Spherical (ball) joint: point_i on body_i coincides with point_j on body_j (3 rows)."""

    name: str
    body_i: int | None
    point_i: Spec
    body_j: int | None = None
    point_j: Spec = (0.0, 0.0, 0.0)
    rows: ClassVar[int] = 3

    def residual(self, frames, p) -> Array:
        return -self._separation(frames, p)


@dataclasses.dataclass(frozen=True)
class Revolute(_AxisJoint):
    """Revolute joint: a common point and parallel axes (3 + 2 rows; one relative rotation).

    Rows: P_i − P_j = 0, and uᵢ·aⱼ = vᵢ·aⱼ = 0 with uᵢ, vᵢ perpendicular to axis_i
    (Haug 1989, spherical joint plus two dot-1 conditions).
    """

    rows: ClassVar[int] = 5

    def residual(self, frames, p) -> Array:
        return jnp.concatenate([-self._separation(frames, p), self._parallel_rows(frames, p)])


@dataclasses.dataclass(frozen=True)
class Universal(_AxisJoint):
    """Universal (Cardan) joint: a common point and perpendicular cross axes (3 + 1 rows).

    Rows: P_i − P_j = 0 and aᵢ·aⱼ = 0 (axis_i on body i, axis_j on body j).
    """

    rows: ClassVar[int] = 4

    def residual(self, frames, p) -> Array:
        cross = dot(self._axis(frames, p, "i"), self._axis(frames, p, "j"))
        return jnp.concatenate([-self._separation(frames, p), cross[None]])


@dataclasses.dataclass(frozen=True)
class Cylindrical(_AxisJoint):
    """Cylindrical joint: P_j on the axis of body i through P_i, axes parallel (2 + 2 rows).

    Leaves a relative sliding and a relative rotation about the common axis.
    """

    rows: ClassVar[int] = 4

    def residual(self, frames, p) -> Array:
        return jnp.concatenate([self._on_line_rows(frames, p), self._parallel_rows(frames, p)])


@dataclasses.dataclass(frozen=True)
class Translational(_TwoBodyJoint):
    """Translational (prismatic) joint: sliding along axis_i only (2 + 2 + 1 rows).

    Rows: P_j on the line of body i (uᵢ·d = vᵢ·d = 0), parallel axes (uᵢ·aⱼ = vᵢ·aⱼ = 0),
    and no twist: normal_j stays parallel to normal_i (vᵢ·nⱼ = 0), where uᵢ is normal_i made
    perpendicular to axis_i and vᵢ = âᵢ × uᵢ. The normals are any vectors perpendicular to the
    axes that coincide in the assembled position.
    """

    name: str
    body_i: int | None
    point_i: Spec
    axis_i: Spec
    normal_i: Spec
    body_j: int | None
    point_j: Spec
    axis_j: Spec
    normal_j: Spec
    rows: ClassVar[int] = 5

    def _normal_pair(self, p) -> Array:
        a, n = geometry(self.axis_i, p), geometry(self.normal_i, p)
        xp = array_module(a, n)
        a = unit(a)
        u = unit(n - xp.sum(n * a) * a)
        return xp.stack([u, cross(a, u)])

    def residual(self, frames, p) -> Array:
        d = self._separation(frames, p)
        a_j = self._axis(frames, p, "j")
        n_j = frames.vector(self.body_j, value(self.normal_j, p))
        across = self._across(frames, p, jnp.stack([d, a_j, n_j]))  # (3, 2)
        return jnp.concatenate([across[0], across[1], across[2, 1:]])


@dataclasses.dataclass(frozen=True)
class Fixed(_TwoBodyJoint):
    """Fixed (weld) joint: body j keeps one pose relative to body i (3 + 3 rows).

    Rows: P_i − P_j = 0 and vee(½(E − Eᵀ)) = 0 with E = (Aⱼ Fⱼ)ᵀ (Aᵢ Fᵢ), where `frame_i`
    Fᵢ and `frame_j` Fⱼ are body-fixed frames (rotation matrices, body i's and body j's)
    that coincide when welded (E = I): the rotation rows of MuJoCo's weld equality. Near
    E = I they are the small rotation angles between the frames, so the rows are independent.
    """

    name: str
    body_i: int | None
    point_i: Spec
    body_j: int | None
    point_j: Spec
    frame_i: Spec = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    frame_j: Spec = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))
    rows: ClassVar[int] = 6

    def residual(self, frames, p) -> Array:
        # Frames.vector of Fᵀ turns F's columns: its rows are those of (A F)ᵀ
        turned_i = frames.vector(self.body_i, value(self.frame_i, p).T)
        turned_j = frames.vector(self.body_j, value(self.frame_j, p).T)
        return jnp.concatenate([-self._separation(frames, p), _vee(turned_j @ turned_i.T)])


@dataclasses.dataclass(frozen=True)
class Distance(_TwoBodyJoint, PointPair):
    """Distance constraint |P_j − P_i|² − L² = 0: a massless rod with spherical ends (1 row)."""

    length: Spec
    rows: ClassVar[int] = 1

    def residual(self, frames, p) -> Array:
        d = self._separation(frames, p)
        return jnp.atleast_1d(dot(d, d) - value(self.length, p) ** 2)


@dataclasses.dataclass(frozen=True)
class PointOnLine(_PointLineJoint):
    """Point P_j of body j stays on the line of body i through P_i along axis_i (2 rows)."""

    rows: ClassVar[int] = 2

    def residual(self, frames, p) -> Array:
        return self._on_line_rows(frames, p)


Joint = (
    Spherical | Revolute | Universal | Cylindrical | Translational | Fixed | Distance | PointOnLine
)


def joints_of(mechanism: Mechanism) -> tuple[Joint, ...]:
    """The two-body joints a mechanism was built from (empty if not built by
    `spatial_mechanism`), whose `wrench` gives their reactions."""
    return tuple(j for j in mechanism.joints if isinstance(j, _TwoBodyJoint))


def relative_angle(
    frames: FramesFn, q, body_i: int | None, body_j: int | None, axis_i, reference_i, reference_j
) -> Array:
    """Rotation of body j relative to body i about `axis_i` (body i's frame), in (−π, π], at
    the frames `frames(q)` (`relative_angle_at`)."""
    return relative_angle_at(frames(q), body_i, body_j, axis_i, reference_i, reference_j)


def relative_angle_at(
    at: Frames, body_i: int | None, body_j: int | None, axis_i, reference_i, reference_j
) -> Array:
    """Rotation of body j relative to body i about `axis_i` (body i's frame), in (−π, π], at
    the bodies' frames `at`.

    With a = Aᵢ âᵢ, and uᵢ = Aᵢ rᵢ, uⱼ = Aⱼ rⱼ the reference vectors projected onto the plane
    normal to a: δ = atan2(a · (uᵢ × uⱼ), uᵢ · uⱼ).
    """
    a = at.vector(body_i, unit(axis_i))  # `geometry`
    u_i, u_j = at.vector(body_i, reference_i), at.vector(body_j, reference_j)
    u_i, u_j = u_i - dot(u_i, a) * a, u_j - dot(u_j, a) * a
    return jnp.arctan2(dot(a, cross(u_i, u_j)), dot(u_i, u_j))


def _constraint_groups(
    joint_groups: dict[str, tuple[int, ...]], n_normalization: int
) -> dict[str, tuple[int, ...]]:
    """The constraint groups: first `"normalization"` (eᵀe − 1 = 0 of every Euler-parameter
    body), then each joint's rows, shifted past them."""
    groups = {NORMALIZATION: tuple(range(n_normalization))} if n_normalization else {}
    if NORMALIZATION in joint_groups and groups:
        raise ValueError(f"the joint name {NORMALIZATION!r} is the normalisations' group")
    for name, rows in joint_groups.items():
        groups[name] = tuple(r + n_normalization for r in rows)
    return groups


def _rate_matrix(kind: str, alpha) -> Array:
    """B(α) with ω' = B α̇ for a kind's orientation coordinates α, shape (..., 3, width):
    2 G(e) for Euler parameters (`body_rate_matrix`), `zxz_rate_matrix` for ZXZ angles."""
    if kind == EULER_PARAMETERS:
        return 2 * body_rate_matrix(alpha)
    return zxz_rate_matrix(alpha)[0]


def _rate_derivatives(kind: str, alpha, alpha_dot) -> tuple[Array, Array]:
    """∂w/∂α and Ḃ = Σₖ α̇ₖ ∂B/∂αₖ of w(α, α̇) = B(α) α̇, shapes (..., 3, width). Euler
    parameters: G(e) is linear in e, G(e) ė = −G(ė) e, so ∂w/∂e = −2 G(ė) and Ḃ = 2 G(ė)."""
    if kind == EULER_PARAMETERS:
        G_dot = 2 * body_rate_matrix(alpha_dot)
        return -G_dot, G_dot
    _, dB_theta, dB_psi = zxz_rate_matrix(alpha)
    columns = [jnp.zeros_like(alpha), matvec(dB_theta, alpha_dot), matvec(dB_psi, alpha_dot)]
    B_dot = alpha_dot[..., 1, None, None] * dB_theta + alpha_dot[..., 2, None, None] * dB_psi
    return jnp.stack(columns, axis=-1), B_dot


def _transpose_product(B, v) -> Array:
    """Bᵀ v for stacks of 3×w matrices B and 3-vectors v."""
    return jnp.sum(B * v[..., :, None], axis=-2)


def _mean_moment(J) -> Array:
    """J̄ = tr J / 3 of a stack of inertia tensors, shape (k, 1)."""
    return jnp.trace(J, axis1=-2, axis2=-1)[:, None] / 3


@dataclasses.dataclass(frozen=True)
class _RigidBodies(AbstractKineticCompletion):
    """The bodies' kinetic energy (module docstring) with its Lagrange terms in closed form,
    body by body; ω' = B(α) α̇ of a body's orientation coordinates α (`_rate_matrix`):

        M = diag(m I, Bᵀ J B + 4 J̄ e eᵀ),
        Q_α = (∂w/∂α)ᵀ J ω' − Ḃᵀ J ω' − Bᵀ J Ḃ α̇ − 4 J̄ (ėᵀė) e,

    the J̄ terms for Euler parameters only, w(α, α̇) = B(α) α̇, Ḃ = Σₖ α̇ₖ ∂B/∂αₖ; the
    translations add no force. These are ∂²T/∂q̇² and ∂T/∂q − (∂²T/∂q̇∂q) q̇ of T: with
    ∂T/∂α̇ = Bᵀ J ω', its derivative along α̇ is Ḃᵀ J ω' + Bᵀ J Ḃ α̇, while ∂T/∂α =
    (∂w/∂α)ᵀ J ω'; of 2 J̄ (eᵀė)², ∂/∂e = 4 J̄ (eᵀė) ė and the derivative of 4 J̄ (eᵀė) e
    along ė is 4 J̄ ((ėᵀė) e + (eᵀė) ė). With Euler parameters (`_rate_derivatives`, and
    G(ė) ė = 0) Q_e = −8 G(ė)ᵀ J G(e) ė − 4 J̄ (ėᵀė) e. They hold at every (q, q̇), on the
    normalisation's manifold or off it. The same terms by autodiff of T nest two or three
    derivatives of every body's rotation, over all bodies at once in each product."""

    layout: Layout
    bodies: tuple[Body, ...]

    def _inertia(self, p, dtype) -> tuple[Array, Array]:
        m = jnp.stack([value(b.mass, p) for b in self.bodies]).astype(dtype)
        J = jnp.stack([inertia_tensor(b.inertia, p) for b in self.bodies]).astype(dtype)
        return m, J

    def _kinds(self):
        """(kind, bodies of that kind, width of their orientation coordinates)."""
        for kind in COORDINATES:
            bodies = self.layout.bodies_of(kind)
            if bodies.size:
                yield kind, bodies, len(COORDINATES[kind]) - 3

    def _assemble(self, blocks: dict[str, Array], n: int) -> Array:
        """The n-vector whose body coordinates hold `blocks[kind]` (one row of 3 + width per
        body of that kind), zero on the extra coordinates."""
        rows: dict[int, Array] = {}
        for kind, bodies, _ in self._kinds():
            if bodies.size == len(self.bodies):
                rows = {0: blocks[kind].reshape(-1)}
                break
            rows.update({int(b): blocks[kind][j] for j, b in enumerate(bodies)})
        parts = [rows[k] for k in sorted(rows)]
        if n > self.layout.n:
            parts.append(jnp.zeros(n - self.layout.n, parts[0].dtype))
        return jnp.concatenate(parts)

    def mass_product(self, q, v, p) -> Array:
        """M v: m v_r, and Bᵀ J (B v_α) + 4 J̄ e (eᵀ v_α)."""
        m, J = self._inertia(p, q.dtype)
        blocks = {}
        for kind, bodies, width in self._kinds():
            alpha, v_alpha = (self.layout._take(x, bodies, 3, width) for x in (q, v))
            B = _rate_matrix(kind, alpha)
            rotation = _transpose_product(B, matvec(J[bodies], matvec(B, v_alpha)))
            if kind == EULER_PARAMETERS:
                rotation = (
                    rotation + 4 * _mean_moment(J[bodies]) * alpha * dot(alpha, v_alpha)[:, None]
                )
            translation = m[bodies][:, None] * self.layout._take(v, bodies, 0, 3)
            blocks[kind] = jnp.concatenate([translation, rotation], axis=-1)
        return self._assemble(blocks, q.shape[-1])

    def mass_matrix(self, q, p) -> Array:
        """M = diag(m I, Bᵀ J B + 4 J̄ e eᵀ), one block per body."""
        m, J = self._inertia(p, q.dtype)
        blocks = [None] * len(self.bodies)
        for kind, bodies, width in self._kinds():
            alpha = self.layout._take(q, bodies, 3, width)
            B = _rate_matrix(kind, alpha)
            rotation = jnp.swapaxes(B, -1, -2) @ J[bodies] @ B
            if kind == EULER_PARAMETERS:
                J_mean = _mean_moment(J[bodies])[..., None]
                rotation = rotation + 4 * J_mean * alpha[:, :, None] * alpha[:, None, :]
            for j, b in enumerate(bodies):
                translation = m[b] * jnp.eye(3, dtype=q.dtype)
                blocks[b] = jax.scipy.linalg.block_diag(translation, rotation[j])
        extra = q.shape[-1] - self.layout.n
        if extra:
            blocks.append(jnp.zeros((extra, extra), q.dtype))
        return jax.scipy.linalg.block_diag(*blocks)

    def force(self, q, qd, p) -> Array:
        """Q: zero on the centres, (∂w/∂α)ᵀ J ω' − Ḃᵀ J ω' − Bᵀ J Ḃ α̇ − 4 J̄ (ėᵀė) e on the
        orientation coordinates."""
        _, J = self._inertia(p, q.dtype)
        blocks = {}
        for kind, bodies, width in self._kinds():
            alpha, alpha_dot = (self.layout._take(x, bodies, 3, width) for x in (q, qd))
            B = _rate_matrix(kind, alpha)
            W, B_dot = _rate_derivatives(kind, alpha, alpha_dot)
            J_k = J[bodies]
            momentum = matvec(J_k, matvec(B, alpha_dot))
            rotation = _transpose_product(W - B_dot, momentum) - _transpose_product(
                B, matvec(J_k, matvec(B_dot, alpha_dot))
            )
            if kind == EULER_PARAMETERS:
                spin = dot(alpha_dot, alpha_dot)[:, None]
                rotation = rotation - 4 * _mean_moment(J_k) * alpha * spin
            translation = jnp.zeros((bodies.size, 3), rotation.dtype)
            blocks[kind] = jnp.concatenate([translation, rotation], axis=-1)
        return self._assemble(blocks, q.shape[-1])


def _constraint_functions(
    layout: Layout, holonomic: Sequence, pfaffian: Sequence
) -> tuple[Callable | None, Callable | None]:
    """Φ(t, q, p) — the normalisations eᵀe − 1 of the Euler-parameter bodies, then the
    holonomic joints' residuals — and ψ(t, q, q̇, p) of the Pfaffian joints, jit-wrapped;
    `None` where there are no such rows."""
    normalized = layout.bodies_of(EULER_PARAMETERS).size > 0

    def constraints(t, q, p):
        at = layout.frames(q)
        rows = [layout.normalization(q)] if normalized else []
        for j in holonomic:
            rows.append(j.residual(at, p) if isinstance(j, _TwoBodyJoint) else j(t, q, p))
        return jnp.concatenate(rows)

    def velocity_constraints(t, q, qd, p):
        return jnp.concatenate([j(t, q, qd, p) for j in pfaffian])

    return (
        jax.jit(constraints) if holonomic or normalized else None,
        jax.jit(velocity_constraints) if pfaffian else None,
    )


def _body_kinematics(layout: Layout) -> BodyKinematics:
    """Points, relative angles and rotations of the bodies, as the force elements read them
    (`jaxmbs.joints.forces`; the ground: body `None`). Bound to a configuration
    (`BodyKinematics.at`), they read every body's frames from one `Layout.frames` there."""

    def kinematics(frames: FramesFn, bind=None) -> BodyKinematics:
        def rotation_of(q, body):
            return jnp.eye(3, dtype=q.dtype) if body is None else frames(q).rotations[body]

        return BodyKinematics(
            lambda q, body, local: frames(q).point(body, local),
            functools.partial(relative_angle, frames),
            rotation_of,
            bind,
        )

    def bound(q) -> BodyKinematics:
        once: list[Frames] = []

        def frames(q_):
            if q_ is not q:
                return layout.frames(q_)
            if not once:  # on first use: a kit no element reads adds nothing to the program
                once.append(layout.frames(q))
            return once[0]

        return kinematics(frames)

    return kinematics(layout.frames, bound)


def spatial_mechanism(
    bodies: Sequence[Body],
    joints: Sequence[Joint],
    params=None,
    *,
    gravity: Spec = (0.0, 0.0, -9.81),
    elements: Sequence[AbstractForceElement] = (),
    applied_forces: Callable | None = None,
    added_kinetic_energy: Callable | None = None,
    completions: Sequence[KineticCompletion] = (),
    reference_q=None,
    reference_t: float = 0.0,
    extra_coordinates: Sequence[str] = (),
) -> Mechanism:
    """Assemble spatial bodies and joints into a [`jaxmbs.Mechanism`][] (Lagrangian form).

    T (module docstring) and V = −Σ mᵢ gᵀrᵢ go to `Mechanism.from_lagrangian`, the bodies'
    T as a completion with M and the velocity-dependent terms in closed form (`_RigidBodies`),
    and the total energy is reported.
    The springs of the force `elements` (`jaxmbs.joints.forces`) add to V (the energy
    reported); each element's whole generalized force, spring and damper or law together,
    enters Q from one linearisation of its deformation (`generalized_force`; only the
    gravity part of V is differentiated), as do their loads (point forces, torques) and
    `applied_forces(t, q, qd, p)`. `added_kinetic_energy(q, qd, p)`, quadratic in q̇, adds to
    T what is no body's (a rotor's ½ a θ̇² of a relative rate: MuJoCo's armature, as
    `jaxmbs.io.absolute` maps it); `completions` add ½ ṙᵀ W ṙ of rows' rates with their
    terms in closed form (`jaxmbs.model.KineticCompletion`). The coordinates follow
    `Layout.from_bodies(bodies)`, then the `extra_coordinates` (their names), which are no
    body's: the joint coordinates of mixed coordinates (`jaxmbs.io.absolute`), on which the
    holonomic joints given as callables (t, q, p), `applied_forces`, `added_kinetic_energy`
    and `completions` act (that must give them their share of a positive definite M); the
    bodies' functions read q up to them. The constraint groups: first `"normalization"`
    (eᵀe − 1 = 0 of every Euler-parameter body, in body order), then each joint, in the given
    order (holonomic joints first). `reference_q` must keep eᵀe = 1 and avoid the gimbal lock
    (sin θ ≠ 0) of every ZXZ body; one that is a singular configuration of the joints is
    warned about (`warn_if_singular`).
    """
    bodies = tuple(bodies)
    n_bodies = len(bodies)
    layout = Layout.from_bodies(bodies)
    parts = [j.parts(layout, params, reference_q) if hasattr(j, "parts") else (j,) for j in joints]
    holonomic, pfaffian, joint_groups = split_joints([k for p in parts for k in p], n_bodies)
    groups = _constraint_groups(joint_groups, int(layout.bodies_of(EULER_PARAMETERS).size))
    extra_coordinates = tuple(extra_coordinates)
    n = layout.n + len(extra_coordinates)
    checked = check_elements(elements, n_bodies, params, dimension=3, n=n)
    element_set = ElementSet(checked, _body_kinematics(layout), dimension=3)

    def gravity_potential(q, p):
        masses = jnp.stack([value(b.mass, p) for b in bodies])
        return -jnp.sum(masses * dot(layout.positions(q), value(gravity, p)))

    def potential_energy(q, p):
        return gravity_potential(q, p) + element_set.potential(q, p)

    def external_forces(t, q, qd, p):
        out = element_set.generalized_force(t, q, qd, p)
        if applied_forces is not None:
            out = out + applied_forces(t, q, qd, p)
        return out

    constraints, velocity_constraints = _constraint_functions(layout, holonomic, pfaffian)
    # Each model function is jit-wrapped: traced once and reused by every derivative that
    # needs it, and evaluated as one compiled call (not primitive by primitive) when the
    # structure and the mass matrix are checked eagerly at the reference configuration.
    mechanism = Mechanism.from_lagrangian(
        None if added_kinetic_energy is None else jax.jit(added_kinetic_energy),
        jax.jit(potential_energy),
        constraints,
        velocity_constraints,
        params,
        external_forces=(
            jax.jit(external_forces) if element_set.elements or applied_forces is not None else None
        ),
        completions=(_RigidBodies(layout, bodies), *completions),
        # the elements' springs are in their generalized force (external_forces)
        differentiated_potential=jax.jit(gravity_potential),
        elements=element_set if element_set.elements else None,
        joints=(*holonomic, *pfaffian),
        coordinate_names=layout.coordinate_names() + extra_coordinates,
        constraint_groups=groups,
        reference_q=reference_q,
        reference_t=reference_t,
    )
    if reference_q is not None:
        warn_if_singular(mechanism, reference_q, reference_t)
    return mechanism
