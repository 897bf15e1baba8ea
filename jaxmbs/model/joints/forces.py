"""Force elements: springs, dampers, bushings, actuators and applied loads on the bodies of a
mechanism.

Every element here acts along a *deformation* δ(q) of the mechanism — the distance between two
body points, a relative angle (scalars), the relative pose of two body frames (a bushing's
six components) — and applies the force (or torque) f along it:

    f = K (δ − δ₀) + C δ̇ − u            (linear law; K, C numbers or matrices), or
    f = law(δ, δ̇, p) − u                 (a user's law, e.g. `one_sided`),

positive f pulling δ back (tension in a spring); u(t, q, q̇, p) is an optional actuator's
force or torque, pushing δ forward (a motor across a joint, a controller). Its generalized
force is

    Q = −(∂δ/∂q)ᵀ f,                      with δ̇ = (∂δ/∂q) q̇,

one linearisation of δ(q) at q: its forward-mode product gives δ̇, its transpose the pullback
(`AbstractForceElement.generalized_force`). The stiffness part of the linear law is
conservative with the potential V = ½ (δ − δ₀)ᵀ K (δ − δ₀) (K symmetric), which the
builders add to the mechanism's potential energy, so `Solution.energy` stays the total
mechanical energy; the remainder f_nc = C δ̇ − u (or the whole of a user's law) does the
work P = −f_ncᵀ δ̇ on the system (`power`; −P ≥ 0 is the power a damper dissipates), and

    E(t) − E(0) = ∫₀ᵗ Σ P dt                                        (energy balance).

Applied loads — a force at a body point (`PointForce`), a torque on a body (`BodyTorque`),
each a callable of (t, q, q̇, p) such as a function of time — act through the velocity v
their power is taken on, P = Fᵀ v (`_Load`).

Coefficients are numbers, parameter keys or callables of the parameters (as the joints'
geometry), so `jax.grad` reaches them. The builders (`planar_mechanism`,
`spatial_mechanism`, keyword `elements=`) hand each element the functions that place a body
point and give a relative angle (`BodyKinematics`); the elements do not depend on how the
bodies are parametrised. They check every element first (`check_elements`): the shape of
each parameter against the mechanism's parameters (`parameter_shapes`: a number for a
scalar δ's K, C and δ₀, a point of 2 or 3 coordinates, …), the keys it names, the shape of
the force its callables return, and that it acts in a mechanism of that dimension.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import ClassVar, NamedTuple

import jax
import jax.numpy as jnp

from ..._internal.types import Array
from ._common import Spec, geometry, value

ForceLaw = Callable[..., Array]  # (δ, δ̇, p) -> f
Shape = tuple[int, ...]
#: What a builder's dimension is called in messages.
SPACES = {2: "planar", 3: "spatial"}


class BodyKinematics(NamedTuple):
    """How a builder's bodies place points and turn: what a force element needs of them.

    - `point(q, body, local)`: global position of a point of `body` (None: ground) given in
      its local frame;
    - `relative_angle(q, body_i, body_j, axis_i, reference_i, reference_j)`: the rotation
      angle of body j relative to body i (planar: φ_j − φ_i, the other arguments ignored;
      spatial: about `axis_i`, measured in the plane normal to it between a reference
      vector carried by each body);
    - `rotation(q, body)`: the rotation matrix of the body's frame (ground: identity).
    """

    point: Callable[..., Array]
    relative_angle: Callable[..., Array]
    rotation: Callable[..., Array]
    #: q -> the kit bound to that configuration (`at`); None where binding saves nothing.
    bind: Callable[[Array], BodyKinematics] | None = None

    def at(self, q) -> BodyKinematics:
        """The kit bound to the configuration q: called with that same q (the same array or
        tracer), its functions read the bodies' frames evaluated once for all of them (a
        builder that places every body at once); called with any other, they evaluate
        anew. What a set of elements at one configuration shares (`ElementSet`)."""
        return self if self.bind is None else self.bind(q)


def _times(K: Array, x: Array) -> Array:
    """K x for a coefficient that is a number, a vector (diagonal) or a matrix."""
    return K @ x if K.ndim == 2 else K * x


def _coefficient_shapes(components: Shape) -> tuple[Shape, ...]:
    """The shapes of a coefficient K in f = K δ (`_times`): a number, one entry per component
    of δ (a diagonal), or a square matrix; a scalar δ takes a number only."""
    return ((),) if components == () else ((), components, components * 2)


def _available(params) -> str:
    """The parameter keys there are, for a message about a missing one."""
    if params is None:
        return "the mechanism has no parameters (params=None)"
    if isinstance(params, Mapping):
        return f"the parameters are {sorted(params, key=str)}"
    return f"the parameters are a {type(params).__name__}, not a dict of named values"


def _traced_shape(element, field: str, params, fn: Callable, *args) -> Shape:
    """The shape of `fn(*args)`, traced abstractly (nothing is computed); a parameter key that
    a callable looks up and that is missing is named with the keys there are."""
    try:
        return tuple(jax.eval_shape(fn, *args).shape)
    except KeyError as err:
        key = err.args[0] if err.args else "?"
        raise ValueError(
            f"force element {element.name!r}: {field} looks up the parameter {key!r}, which is "
            f"missing; {_available(params)}"
        ) from err


def _parameter_shape(element, field: str, params) -> Shape:
    """The shape of the parameter `field` of `element` (a number, a key into `params` or a
    callable of `params`) against the mechanism's parameters."""
    spec = getattr(element, field)
    if isinstance(spec, str):
        try:
            params[spec]
        except (KeyError, TypeError, IndexError):
            raise ValueError(
                f"force element {element.name!r}: {field} is the parameter {spec!r}, which is "
                f"missing; {_available(params)}"
            ) from None
    return _traced_shape(element, field, params, lambda p: value(spec, p), params)


def _expect(
    element, field: str, shape: Shape, allowed: tuple[Shape, ...], dimension: int, verb="have"
) -> None:
    """Refuse a parameter (or with `verb="return"`, a callable's result) whose shape is not
    one of `allowed`."""
    if shape not in allowed:
        spec = getattr(element, field)
        source = f" (the parameter {spec!r})" if isinstance(spec, str) else ""
        raise ValueError(
            f"force element {element.name!r} ({type(element).__name__} in a "
            f"{SPACES[dimension]} mechanism): {field} must {verb} shape "
            f"{' or '.join(map(str, allowed))}, got shape {shape}{source}"
        )


def _check_parameters(element, params, dimension: int) -> None:
    """Refuse an element that does not act in a mechanism of `dimension`, or a parameter of a
    shape that `element.parameter_shapes(dimension)` does not allow."""
    if dimension not in element.dimensions:
        raise ValueError(
            f"force element {element.name!r}: a {type(element).__name__} acts in "
            f"{' or '.join(SPACES[d] for d in element.dimensions)} mechanisms, not in a "
            f"{SPACES[dimension]} one"
        )
    for field, allowed in element.parameter_shapes(dimension).items():
        _expect(element, field, _parameter_shape(element, field, params), allowed, dimension)


def one_sided(
    stiffness: Spec, clearance: Spec = 0.0, damping: Spec = 0.0, sharpness: Spec = 1e-4
) -> ForceLaw:
    """A smooth one-sided law (bump stop, tyre lift-off): f = k s(δ − δ_c) + c δ̇ σ(δ − δ_c),

    with s(x) = ½ (x + √(x² + ε²)) a smooth ramp (≈ max(x, 0) beyond |x| ≫ ε, ε = `sharpness`
    in units of δ) and σ = s′ its smooth step: no force while δ < δ_c (the stop is open),
    a spring and damper once it closes. Positive δ − δ_c compresses the stop.
    """

    def law(delta, delta_dot, p):
        x = delta - value(clearance, p)
        eps = value(sharpness, p)
        root = jnp.sqrt(x * x + eps * eps)
        ramp, step = 0.5 * (x + root), 0.5 * (1.0 + x / root)
        return value(stiffness, p) * ramp + value(damping, p) * delta_dot * step

    return law


class AbstractForceElement(abc.ABC):
    """What the builders (`planar_mechanism`, `spatial_mechanism`, keyword `elements=`) and
    `ElementSet` ask of a force element: subclass it for an element of your own.

    An element has a `name` (unique in its mechanism), acts on `bodies` (indices, None the
    ground) in builders of `dimensions` (2, 3), and at a state gives, through the builder's
    `BodyKinematics` `kit`, its force or torque f (`force`, read back along a solution), its
    potential V (`potential`, zero where it has none), the generalized force of the rest,
    Q_nc (`nonconservative_force`), and that rest's power P (`power`). Its share of the
    mechanism's generalized force is −∂V/∂q + Q_nc (`generalized_force`, which the builders
    call: by default the two terms apart, in one pass where the element can), of its
    energy V, and the energy balance
    E(t) − E(0) = ∫ Σ P dt holds where Q_ncᵀ q̇ = P (module docstring).
    """

    name: str
    #: The builders the element works with: 2 (`planar_mechanism`), 3 (`spatial_mechanism`).
    dimensions: ClassVar[tuple[int, ...]] = (2, 3)

    @property
    @abc.abstractmethod
    def bodies(self) -> tuple[int | None, ...]:
        """The bodies the element acts on (None: the ground), checked by `check_elements`."""

    @abc.abstractmethod
    def check(self, params, dimension: int, n: int) -> None:
        """Refuse, before anything is traced, what the element cannot work with: a builder
        of another `dimension`, a missing parameter key, a parameter of the wrong shape.
        **Arguments:** the mechanism's `params`, its dimension and number of coordinates n.
        **Raises:** `ValueError` naming the element and the parameter."""

    @abc.abstractmethod
    def force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """The element's force or torque f at a state (what `ElementSet.forces` reads)."""

    @abc.abstractmethod
    def potential(self, kit: BodyKinematics, q, p) -> Array:
        """Its potential energy V(q), a scalar (zero where it has none)."""

    @abc.abstractmethod
    def nonconservative_force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """Q_nc, the generalized force (shape (n,)) of the part without a potential."""

    @abc.abstractmethod
    def power(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """P = Q_ncᵀ q̇, the work per unit time of that part on the system, a scalar."""

    def generalized_force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """The element's whole share of the generalized force, −∂V/∂q + Q_nc (shape (n,)),
        what the builders add to the mechanism's Q. An element may give it in one pass."""
        spring = jax.grad(lambda q_: self.potential(kit, q_, p))(q)
        return self.nonconservative_force(kit, t, q, qd, p) - spring

    def carrier(self, kit: BodyKinematics, q, p) -> Array:
        """g(q), the map whose derivative carries the element's generalized force,

            Q = (∂g/∂q)ᵀ c,     c = `carried_force(kit, t, q, q̇, g, ġ, p)`,  ġ = (∂g/∂q) q̇,

        so that `ElementSet` linearises every element's g at once, over frames evaluated
        once. By default q itself, with c the element's `generalized_force`; an element
        that acts along δ(q) gives δ (c = −f), a load the point or frame it acts on."""
        return q

    def carried_force(self, kit: BodyKinematics, t, q, qd, g, g_dot, p) -> Array:
        """c, the cotangent of the `carrier` g at the state (shape of g): by default the
        element's `generalized_force` (g = q)."""
        return self.generalized_force(kit, t, q, qd, p)


@dataclasses.dataclass(frozen=True)
class _Element(AbstractForceElement):
    """An element acting along a deformation δ(q) (module docstring).

    `stiffness`, `damping` and the element's reference δ₀ define the linear law; a `law`
    replaces it (then no potential is reported: all of its work counts as external); an
    `actuator` u(t, q, q̇, p) adds its force or torque along δ.
    """

    name: str
    stiffness: Spec = 0.0
    damping: Spec = 0.0
    law: ForceLaw | None = None
    actuator: Callable[..., Array] | None = None

    #: The shape of δ: () for a length or an angle.
    components: ClassVar[Shape] = ()

    @property
    def bodies(self) -> tuple[int | None, ...]:
        return (self.body_i, self.body_j)

    def parameter_shapes(self, dimension: int) -> dict[str, tuple[Shape, ...]]:
        """The shapes each parameter (number, key or callable of p) may take in a mechanism
        of `dimension`: the coefficients' here, the geometry's in each element."""
        coefficient = _coefficient_shapes(self.components)
        return {"stiffness": coefficient, "damping": coefficient}

    def check(self, params, dimension: int, n: int) -> None:
        """Refuse, before anything is traced, a parameter of the wrong shape or a missing
        key (`parameter_shapes`), and a `law` or `actuator` whose force is not of δ's shape.

        **Arguments:** the mechanism's `params`, its `dimension` (2 or 3) and its number of
        coordinates `n`. **Raises:** `ValueError` naming the element and the parameter.
        """
        _check_parameters(self, params, dimension)
        real = jnp.result_type(float)
        delta = jax.ShapeDtypeStruct(self.components, real)
        t, q = jax.ShapeDtypeStruct((), real), jax.ShapeDtypeStruct((n,), real)
        if self.law is not None:
            shape = _traced_shape(self, "law", params, self.law, delta, delta, params)
            _expect(self, "law", shape, (self.components,), dimension, "return")
        if self.actuator is not None:
            shape = _traced_shape(self, "actuator", params, self.actuator, t, q, q, params)
            _expect(self, "actuator", shape, (self.components,), dimension, "return")

    def deformation(self, kit: BodyKinematics, q, p) -> Array:
        raise NotImplementedError

    def reference(self, p) -> Array:
        """δ₀, where the spring is relaxed."""
        raise NotImplementedError

    def _rate(self, kit, q, qd, p) -> tuple[Array, Array]:
        """(δ, δ̇) by one jvp of δ(q) along q̇."""
        return jax.jvp(lambda q_: self.deformation(kit, q_, p), (q,), (qd,))

    def _nonconservative(self, t, q, qd, delta, delta_dot, p) -> Array:
        """f_nc = C δ̇ (or the law) − u."""
        if self.law is not None:
            f = self.law(delta, delta_dot, p)
        else:
            f = _times(value(self.damping, p), delta_dot)
        if self.actuator is not None:
            f = f - jnp.asarray(self.actuator(t, q, qd, p))
        return f

    def _total(self, t, q, qd, delta, delta_dot, p) -> Array:
        """f = K (δ − δ₀) + C δ̇ − u, or the law − u."""
        f = self._nonconservative(t, q, qd, delta, delta_dot, p)
        if self.law is None:
            f = f + _times(value(self.stiffness, p), delta - self.reference(p))
        return f

    def force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """The element's force f (tension positive) or torque at a state."""
        delta, delta_dot = self._rate(kit, q, qd, p)
        return self._total(t, q, qd, delta, delta_dot, p)

    def _pulled_back(self, kit: BodyKinematics, t, q, qd, p, law: Callable) -> Array:
        """−(∂δ/∂q)ᵀ f with f = law(t, q, q̇, δ, δ̇, p), from one linearisation of δ(q) at
        q: δ, δ̇ = (∂δ/∂q) q̇ and, transposed, the pullback."""
        delta, tangent = jax.linearize(lambda q_: self.deformation(kit, q_, p), q)
        f = law(t, q, qd, delta, tangent(qd), p)
        return -jax.linear_transpose(tangent, q)(jnp.asarray(f, delta.dtype))[0]

    def generalized_force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """Q = −(∂δ/∂q)ᵀ f, the spring's −∂V/∂q and Q_nc together in one pass (`potential`
        and `nonconservative_force` apart evaluate δ three times, its derivatives three)."""
        return self._pulled_back(kit, t, q, qd, p, self._total)

    def carrier(self, kit: BodyKinematics, q, p) -> Array:
        """δ(q)."""
        return self.deformation(kit, q, p)

    def carried_force(self, kit: BodyKinematics, t, q, qd, g, g_dot, p) -> Array:
        """−f(δ, δ̇), so that Q = −(∂δ/∂q)ᵀ f."""
        return -jnp.asarray(self._total(t, q, qd, g, g_dot, p), g.dtype)

    def potential(self, kit: BodyKinematics, q, p) -> Array:
        """V = ½ (δ − δ₀)ᵀ K (δ − δ₀) (zero for a user's law)."""
        if self.law is not None:
            return jnp.zeros((), q.dtype)
        stretch = self.deformation(kit, q, p) - self.reference(p)
        return 0.5 * jnp.sum(stretch * _times(value(self.stiffness, p), stretch))

    def nonconservative_force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """Q_nc = −(∂δ/∂q)ᵀ f_nc, the part of the generalized force without a potential."""
        return self._pulled_back(kit, t, q, qd, p, self._nonconservative)

    def power(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """P = −f_ncᵀ δ̇, the work per unit time of the non-conservative part on the system."""
        delta, delta_dot = self._rate(kit, q, qd, p)
        return -jnp.sum(self._nonconservative(t, q, qd, delta, delta_dot, p) * delta_dot)


@dataclasses.dataclass(frozen=True)
class SpringDamper(_Element):
    """A translational spring-damper between point_i of body_i and point_j of body_j.

    δ = |P_j − P_i| (the element's length), δ₀ = `free_length`; f > 0 pulls the points
    together, an actuator's u > 0 pushes them apart (a linear actuator, stiffness 0). Planar
    or spatial by the builder it is given to. The length must stay positive (the direction of
    the force is undefined at δ = 0).
    """

    body_i: int | None = None
    point_i: Spec = (0.0, 0.0)
    body_j: int | None = None
    point_j: Spec = (0.0, 0.0)
    free_length: Spec = 0.0

    def parameter_shapes(self, dimension: int) -> dict[str, tuple[Shape, ...]]:
        point = ((dimension,),)
        shapes = {"free_length": ((),), "point_i": point, "point_j": point}
        return {**super().parameter_shapes(dimension), **shapes}

    def deformation(self, kit, q, p) -> Array:
        d = kit.point(q, self.body_j, value(self.point_j, p)) - kit.point(
            q, self.body_i, value(self.point_i, p)
        )
        return jnp.sqrt(jnp.sum(d * d))

    def reference(self, p) -> Array:
        return value(self.free_length, p)


@dataclasses.dataclass(frozen=True)
class AxialSpringDamper(_Element):
    """A translational spring-damper along an axis of body_i (a prismatic joint's), spatial.

    δ = aᵢ · (P_j − P_i) with aᵢ = Aᵢ âᵢ, âᵢ the unit `axis_i` in body i's frame: the signed
    offset of point_j of body_j from point_i of body_i along that axis (where a
    `Translational` joint keeps P_j on the axis, its slide). δ₀ = `free_offset`; f > 0 pulls
    δ back, an actuator's u > 0 pushes it forward (a linear motor along the axis). Unlike
    `SpringDamper`'s length it is smooth and signed through δ = 0.
    """

    body_i: int | None = None
    point_i: Spec = (0.0, 0.0, 0.0)
    axis_i: Spec = (0.0, 0.0, 1.0)
    body_j: int | None = None
    point_j: Spec = (0.0, 0.0, 0.0)
    free_offset: Spec = 0.0

    dimensions: ClassVar[tuple[int, ...]] = (3,)

    def parameter_shapes(self, dimension: int) -> dict[str, tuple[Shape, ...]]:
        vector = ((3,),)
        shapes = {"free_offset": ((),), "point_i": vector, "axis_i": vector, "point_j": vector}
        return {**super().parameter_shapes(dimension), **shapes}

    def deformation(self, kit, q, p) -> Array:
        axis = value(self.axis_i, p)
        axis = kit.rotation(q, self.body_i) @ (axis / jnp.linalg.norm(axis))
        d = kit.point(q, self.body_j, value(self.point_j, p)) - kit.point(
            q, self.body_i, value(self.point_i, p)
        )
        return jnp.sum(axis * d)

    def reference(self, p) -> Array:
        return value(self.free_offset, p)


@dataclasses.dataclass(frozen=True)
class RotationalSpringDamper(_Element):
    """A torsional spring-damper between body_i and body_j (ground: None).

    Planar: δ = φ_j − φ_i, across a revolute joint (no winding limit). Spatial: δ is the
    rotation of body j relative to body i about `axis_i` (body i's frame), measured from
    `reference_j` (a body-j vector perpendicular to its joint axis) against `reference_i`;
    it lies in (−π, π]. δ₀ = `free_angle`; the torque f > 0 turns δ back, an actuator's u > 0
    turns it forward (a motor across the joint: `actuator=lambda t, q, qd, p: …`).
    """

    body_i: int | None = None
    body_j: int | None = None
    free_angle: Spec = 0.0
    axis_i: Spec = (0.0, 0.0, 1.0)
    reference_i: Spec = (1.0, 0.0, 0.0)
    reference_j: Spec = (1.0, 0.0, 0.0)

    def parameter_shapes(self, dimension: int) -> dict[str, tuple[Shape, ...]]:
        shapes = {**super().parameter_shapes(dimension), "free_angle": ((),)}
        if dimension == 3:  # the plane ignores the axis and the reference vectors
            shapes.update(axis_i=((3,),), reference_i=((3,),), reference_j=((3,),))
        return shapes

    def deformation(self, kit, q, p) -> Array:
        return kit.relative_angle(
            q,
            self.body_i,
            self.body_j,
            geometry(self.axis_i, p),
            geometry(self.reference_i, p),
            geometry(self.reference_j, p),
        )

    def reference(self, p) -> Array:
        return value(self.free_angle, p)


@dataclasses.dataclass(frozen=True)
class Bushing(_Element):
    """A spatial bushing between point_i of body_i and point_j of body_j (6 components).

    δ = (d, θ): d = Aᵢᵀ (P_j − P_i), the displacement in body i's frame, and θ = vee(½(R − Rᵀ))
    with R = Aᵢᵀ Aⱼ R₀ᵀ, the small-angle rotation of body j relative to body i (R₀: their
    relative orientation when unloaded, default the identity) — exact to first order, so the
    stiffness is the small-deflection one. `stiffness` and `damping`: 6 × 6 matrices in body
    i's frame (symmetric stiffness), or 6 diagonal entries. f = K δ + C δ̇ (or a law) is the
    force and moment on body i, in its frame.
    """

    body_i: int | None = None
    point_i: Spec = (0.0, 0.0, 0.0)
    body_j: int | None = None
    point_j: Spec = (0.0, 0.0, 0.0)
    rest_rotation: Spec = ((1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0))

    dimensions: ClassVar[tuple[int, ...]] = (3,)
    components: ClassVar[Shape] = (6,)

    def parameter_shapes(self, dimension: int) -> dict[str, tuple[Shape, ...]]:
        shapes = {"point_i": ((3,),), "point_j": ((3,),), "rest_rotation": ((3, 3),)}
        return {**super().parameter_shapes(dimension), **shapes}

    def deformation(self, kit, q, p) -> Array:
        A_i, A_j = kit.rotation(q, self.body_i), kit.rotation(q, self.body_j)
        d = kit.point(q, self.body_j, value(self.point_j, p)) - kit.point(
            q, self.body_i, value(self.point_i, p)
        )
        R = A_i.T @ A_j @ value(self.rest_rotation, p).T
        W = 0.5 * (R - R.T)
        return jnp.concatenate([A_i.T @ d, jnp.stack([W[2, 1], W[0, 2], W[1, 0]])])

    def reference(self, p) -> Array:
        return jnp.zeros(6)


def _angular_velocity(kit: BodyKinematics, q, qd, body: int | None) -> Array:
    """ω of a body (`_spin`) from its rotation A and Ȧ by one jvp along q̇."""
    return _spin(*jax.jvp(lambda q_: kit.rotation(q_, body), (q,), (qd,)))


def _spin(A: Array, A_dot: Array) -> Array:
    """ω from ω̃ = Ȧ Aᵀ (its antisymmetric part W = ½(ω̃ − ω̃ᵀ), exact on the rotation
    manifold): the scalar W₂₁ in the plane, vee(W) in space. Linear in Ȧ."""
    W = A_dot @ A.T
    W = 0.5 * (W - W.T)
    if W.shape[0] == 2:
        return W[1, 0]
    return jnp.stack([W[2, 1], W[0, 2], W[1, 0]])


@dataclasses.dataclass(frozen=True)
class _Load(AbstractForceElement):
    """An applied load F whose power is P = Fᵀ v, v(q, q̇) a velocity linear in q̇
    (`velocity`); `load` is a callable (t, q, q̇, p) -> F (a function of time, a controller)
    or a constant (numbers or a parameter key). Its generalized force is

        Q = ∂P/∂q̇ = (∂v/∂q̇)ᵀ F,

    one vjp of v in q̇. It has no potential: all of its work is external (`power`). With
    `local=True` the load is given in the body's frame (it turns with the body), else in
    the global frame. The force read back is F (global frame)."""

    name: str
    body: int | None
    load: Spec | Callable[..., Array]
    local: bool = False

    @property
    def bodies(self) -> tuple[int | None, ...]:
        return (self.body,)

    def load_shape(self, dimension: int) -> Shape:
        """The shape of F in a mechanism of `dimension`."""
        raise NotImplementedError

    def parameter_shapes(self, dimension: int) -> dict[str, tuple[Shape, ...]]:
        """The shapes each parameter (number, key or callable of p) may take; a constant
        `load` is one of them."""
        return {} if callable(self.load) else {"load": (self.load_shape(dimension),)}

    def check(self, params, dimension: int, n: int) -> None:
        """Refuse, before anything is traced, a parameter of the wrong shape or a missing
        key (`parameter_shapes`), and a callable `load` whose F does not have the shape
        `load_shape(dimension)`. **Raises:** `ValueError` naming the load and the parameter.
        """
        _check_parameters(self, params, dimension)
        if callable(self.load):
            real = jnp.result_type(float)
            t, q = jax.ShapeDtypeStruct((), real), jax.ShapeDtypeStruct((n,), real)
            shape = _traced_shape(self, "load", params, self.load, t, q, q, params)
            _expect(self, "load", shape, (self.load_shape(dimension),), dimension, "return")

    def velocity(self, kit: BodyKinematics, q, qd, p) -> Array:
        raise NotImplementedError

    def force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        F = self.load(t, q, qd, p) if callable(self.load) else value(self.load, p)
        F = jnp.asarray(F, q.dtype)
        if not self.local or F.ndim == 0:  # a planar torque is the same in every frame
            return F
        return kit.rotation(q, self.body) @ F

    def potential(self, kit: BodyKinematics, q, p) -> Array:
        return jnp.zeros((), q.dtype)

    def nonconservative_force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        F = self.force(kit, t, q, qd, p)
        _, pullback = jax.vjp(lambda qd_: self.velocity(kit, q, qd_, p), qd)
        return pullback(F)[0]

    def generalized_force(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        """Q_nc alone: a load has no potential."""
        return self.nonconservative_force(kit, t, q, qd, p)

    def power(self, kit: BodyKinematics, t, q, qd, p) -> Array:
        return jnp.sum(self.force(kit, t, q, qd, p) * self.velocity(kit, q, qd, p))


@dataclasses.dataclass(frozen=True)
class PointForce(_Load):
    """A force F(t, q, q̇, p) applied at `point` of `body` (its local frame): v = ṙ_P, the
    point's velocity (2 components in the plane, 3 in space). A force given as a function
    of time alone: `load=lambda t, q, qd, p: f(t)`, f e.g. a `jaxmbs.Profile` of sampled
    (t, F) data."""

    point: Spec = (0.0, 0.0)

    def load_shape(self, dimension: int) -> Shape:
        return (dimension,)

    def parameter_shapes(self, dimension: int) -> dict[str, tuple[Shape, ...]]:
        return {**super().parameter_shapes(dimension), "point": ((dimension,),)}

    def velocity(self, kit, q, qd, p) -> Array:
        local = value(self.point, p)
        return jax.jvp(lambda q_: kit.point(q_, self.body, local), (q,), (qd,))[1]

    def carrier(self, kit: BodyKinematics, q, p) -> Array:
        """The point's position r_P (v = ṙ_P)."""
        return kit.point(q, self.body, value(self.point, p))

    def carried_force(self, kit: BodyKinematics, t, q, qd, g, g_dot, p) -> Array:
        """F itself: Q = (∂r_P/∂q)ᵀ F."""
        return self.force(kit, t, q, qd, p)


@dataclasses.dataclass(frozen=True)
class BodyTorque(_Load):
    """A torque τ(t, q, q̇, p) on `body`: v = ω, the body's angular velocity (a scalar in the
    plane, a vector in space, from its rotation matrix: `_angular_velocity`)."""

    def load_shape(self, dimension: int) -> Shape:
        return () if dimension == 2 else (3,)

    def velocity(self, kit, q, qd, p) -> Array:
        return _angular_velocity(kit, q, qd, self.body)

    def carrier(self, kit: BodyKinematics, q, p) -> Array:
        """The body's rotation matrix A (ω is linear in Ȧ: `_spin`)."""
        return kit.rotation(q, self.body)

    def carried_force(self, kit: BodyKinematics, t, q, qd, g, g_dot, p) -> Array:
        """(∂ω/∂Ȧ)ᵀ τ at A = g, so that Q = (∂A/∂q)ᵀ (∂ω/∂Ȧ)ᵀ τ = (∂ω/∂q̇)ᵀ τ."""
        _, pullback = jax.vjp(lambda A_dot: _spin(g, A_dot), g_dot)
        return pullback(self.force(kit, t, q, qd, p))[0]


def check_elements(
    elements: Sequence[AbstractForceElement], n_bodies: int, params, *, dimension: int, n: int
) -> tuple[AbstractForceElement, ...]:
    """Check names, body indices, the builder and every parameter's shape before anything is
    traced.

    **Arguments:** the `elements`, the mechanism's number of bodies, its `params`, its
    `dimension` (2: `planar_mechanism`, 3: `spatial_mechanism`) and its number of
    coordinates `n`.

    **Returns:** the elements as a tuple. **Raises:** `ValueError` naming the element and the
    cause: a repeated name, a body out of range, an element of the other dimension (a
    `Bushing` in the plane), a missing parameter key or a shape that is not the element's
    (`parameter_shapes`, `check`).
    """
    elements = tuple(elements)
    names = [e.name for e in elements]
    if len(set(names)) != len(names):
        raise ValueError(f"force element names must be unique, got {names}")
    for e in elements:
        for body in e.bodies:
            if body is not None and not 0 <= body < n_bodies:
                raise ValueError(
                    f"force element {e.name!r} refers to body {body}; there are {n_bodies}"
                )
        e.check(params, dimension, n)
    return elements


class ElementSet(NamedTuple):
    """The force elements of a mechanism with the kinematics of its bodies and their
    dimension (2: planar, 3: spatial); the builders' sums over them and the readback along a
    solution."""

    elements: tuple[AbstractForceElement, ...]
    kit: BodyKinematics
    dimension: int

    def check(self, params, n: int) -> None:
        """Check every element against other parameters than the builder's (a run's
        `params=`, `Mechanism.replace_params`), as the builder did (`check_elements`):
        `ValueError` naming the element and the parameter. `n`: the number of coordinates."""
        for e in self.elements:
            e.check(params, self.dimension, n)

    def potentials(self, q, p) -> dict[str, Array]:
        """Each element's potential V by name (zero for a load or a user's law)."""
        kit = self.kit.at(q)
        return {e.name: e.potential(kit, q, p) for e in self.elements}

    def potential(self, q, p) -> Array:
        """Σ V of the conservative parts."""
        return sum(self.potentials(q, p).values(), jnp.zeros((), q.dtype))

    def generalized_force(self, t, q, qd, p) -> Array:
        """Σ (−∂V/∂q + Q_nc), the elements' share of the mechanism's generalized force, as
        Σₑ (∂gₑ/∂q)ᵀ cₑ (`AbstractForceElement.carrier`): every element's carrier gₑ(q)
        from one linearisation at q, over the bodies' frames evaluated once
        (`BodyKinematics.at`); its forward product gives ġₑ, the carried forces cₑ(gₑ, ġₑ)
        go back through one transpose."""
        if not self.elements:
            return jnp.zeros_like(q)

        def carriers(q_):
            kit = self.kit.at(q_)
            return tuple(jnp.asarray(e.carrier(kit, q_, p), q.dtype) for e in self.elements)

        g, tangent = jax.linearize(carriers, q)
        kit = self.kit.at(q)
        carried = tuple(
            jnp.asarray(e.carried_force(kit, t, q, qd, g_e, g_dot_e, p), q.dtype)
            for e, g_e, g_dot_e in zip(self.elements, g, tangent(qd), strict=True)
        )
        return jax.linear_transpose(tangent, q)(carried)[0]

    def forces(self, t, q, qd, p) -> dict[str, Array]:
        """Each element's force or torque f by name."""
        return {e.name: e.force(self.kit, t, q, qd, p) for e in self.elements}

    def powers(self, t, q, qd, p) -> dict[str, Array]:
        """Each element's power P of its non-conservative part on the system, by name."""
        return {e.name: e.power(self.kit, t, q, qd, p) for e in self.elements}

    def power(self, t, q, qd, p) -> Array:
        """Σ P, the power of the non-conservative parts on the system (≤ 0 for dampers)."""
        return sum(self.powers(t, q, qd, p).values(), jnp.zeros((), q.dtype))
