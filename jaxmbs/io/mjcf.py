"""MJCF and URDF mechanisms through MuJoCo's own compiler (`pip install 'jaxmbs[mjcf]'`).

`mujoco.MjSpec` parses the file (includes, defaults, URDF) and `MjSpec.compile()` computes
what it means — masses and inertias from geoms, principal axes (`body_iquat`), frames,
angle units, joint references, the relative poses of welds — so nothing of MuJoCo's compiler
is re-implemented here. The compiled `MjModel`'s arrays are read into a `jaxmbs.io.tree.Tree`
(joint coordinates = `qpos`, loop-closing equalities as hard holonomic rows; see that module
for the equations) and a parameter dict, and `Mechanism.from_lagrangian` builds the
mechanism. `mujoco` is imported only when a file is read.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.types import Array, ArrayLike
from ..model.inputs import Profile
from ..model.mechanism import Mechanism
from .absolute import absolute_mechanism, absolute_state, body_frames
from .geometry import DRAWN, Geom, Geometry
from .report import ImportReport, LeftOut
from .tree import (
    BALL,
    FREE,
    HINGE,
    NQ,
    NV,
    SLIDE,
    Actuator,
    Closure,
    Tree,
    TreeJoint,
    param_key,
)

#: The two choices of coordinates (`from_mjcf(coordinates=...)`)
JOINTS, ABSOLUTE = "joints", "absolute"
#: The actuators' inputs (`from_mjcf(controls=...)`)
Controls = Mapping[str, Profile | Callable] | Callable | None
#: MuJoCo's joint types (`mjtJoint`) by number
_JOINT_KINDS = {0: FREE, 1: BALL, 2: SLIDE, 3: HINGE}


@dataclasses.dataclass(frozen=True)
class Connect:
    """A `connect` loop closure to add to a file (e.g. to a URDF tree, which cannot say
    "loop"): the point `anchor`, given in `body1`'s frame, is held on the same point of
    `body2` (MuJoCo computes that point at the reference configuration `qpos0`). Bodies are
    named by the file's body (URDF: link) names; `"world"` is the ground."""

    body1: str
    body2: str
    anchor: tuple[float, float, float] = (0.0, 0.0, 0.0)
    name: str | None = None


@dataclasses.dataclass(frozen=True)
class Weld:
    """A `weld` loop closure to add to a file: `body2` keeps the pose relative to `body1`
    that it has at the reference configuration `qpos0`; `anchor` is in `body2`'s frame."""

    body1: str
    body2: str
    anchor: tuple[float, float, float] = (0.0, 0.0, 0.0)
    name: str | None = None


@dataclasses.dataclass(frozen=True, eq=False)
class ImportedModel:
    """A mechanism read from MJCF or URDF, its initial state and the import's report.

    - `mechanism`: the [`jaxmbs.Mechanism`][] in joint coordinates (q is MuJoCo's `qpos`).
    - `q0`, `qd0`: the initial state from `qpos0` (or the keyframe) and zero velocity (or
      the keyframe's `qvel`, as q̇). They are the file's values: with loop closures they may
      not satisfy the constraints exactly (MuJoCo's soft constraints pull them together);
      `jaxmbs.assemble(imported.mechanism, imported.q0, imported.qd0)` makes them consistent.
    - `report`: an [`ImportReport`][jaxmbs.io.ImportReport] (elements left out, notes).
    - `tree`: the kinematic tree (frames of the bodies: `tree.frames(q)`).
    - `coordinates`: `"joints"` (q is `qpos`) or `"absolute"` (one Euler-parameter body per
      moving MuJoCo body, in `absolute_bodies` order: `jaxmbs.io.absolute`).
    - `geometry`: the file's geoms as line drawings moved with their bodies
      (`jaxmbs.io.geometry`); the mechanism carries it among its `drawings`, so
      [`jaxmbs.snapshot`][] and [`jaxmbs.animate`][] draw them.
    - `absolute_positions`, `absolute_velocities`: with absolute coordinates, the maps q ↦
      `qpos` and (q, q̇) ↦ `qvel` of one state (`jaxmbs.io.absolute.joint_positions`,
      `joint_velocities`; `None` where a three-hinge Spherical's hinges have no single
      angles); `to_qpos` and `to_qvel` apply them.
    - `absolute_joint_coordinates`: with absolute coordinates, the `qpos` addresses of the
      joint coordinates that follow the bodies' in q (mixed coordinates: the joints of a
      body whose combination has no joint of its own, `jaxmbs.io.absolute`).
    """

    mechanism: Mechanism
    q0: Array
    qd0: Array
    report: ImportReport
    tree: Tree
    coordinates: str = JOINTS
    absolute_bodies: tuple[int, ...] = ()
    geometry: Geometry | None = None
    absolute_positions: Callable[[Array], Array] | None = None
    absolute_velocities: Callable[[Array, Array], Array] | None = None
    absolute_joint_coordinates: tuple[int, ...] = ()

    def _joint_coordinates_only(self, what: str) -> None:
        if self.coordinates != JOINTS:
            raise ValueError(f"{what} maps joint coordinates; this model has absolute ones")

    def to_qpos(self, q: ArrayLike) -> Array:
        """MuJoCo's `qpos` of q, shape (..., nq): the same order, quaternions normalised.
        With absolute coordinates (`jaxmbs.io.absolute.joint_positions`) a hinge's angle is
        read in (q_ref − π, q_ref + π] and unwrapped along the axis before the last (a
        trajectory's time axis, steps below π), so it runs on past ±π as MuJoCo's does; a
        hinge in mixed coordinates has its angle among q, as it is."""
        if self.coordinates == JOINTS:
            return jnp.vectorize(self.tree.normalized, signature="(n)->(n)")(jnp.asarray(q))
        if self.absolute_positions is None:
            raise ValueError(
                "to_qpos: the three hinges composed into a Spherical have no single angles "
                "(use the joint coordinates)"
            )
        qpos = jnp.vectorize(self.absolute_positions, signature="(n)->(m)")(jnp.asarray(q))
        hinges = np.array(  # read off the bodies: in a window of 2π (mixed: as they are)
            [
                j.qadr
                for j in self.tree.joints
                if j.kind == HINGE and j.qadr not in self.absolute_joint_coordinates
            ],
            dtype=int,
        )
        if qpos.ndim < 2 or hinges.size == 0:
            return qpos
        return qpos.at[..., hinges].set(jnp.unwrap(qpos[..., hinges], axis=-2))

    def to_qvel(self, q: ArrayLike, qd: ArrayLike) -> Array:
        """MuJoCo's `qvel` of (q, q̇), shape (..., nv): ω = 2 G(e) ė for quaternions. With
        absolute coordinates (`jaxmbs.io.absolute.joint_velocities`), read off the bodies: a
        hinge's or slide's rate, a ball's angular velocity relative to its parent in its
        body's frame, a free joint's origin velocity (world frame) and angular velocity (its
        body's frame), as MuJoCo's `qvel`. It is linear in q̇; MuJoCo's `qacc` is its rate,
        `jax.jvp(to_qvel, (q, q̇), (q̇, q̈))[1]` (not `to_qvel(q, q̈)` there: a ball's ω is
        relative to a turning parent, a free joint's origin is off the centre of mass)."""
        if self.coordinates == JOINTS:
            fn = self.tree.velocities
        elif self.absolute_velocities is None:
            raise ValueError(
                "to_qvel: the three hinges composed into a Spherical have no single angles "
                "(use the joint coordinates)"
            )
        else:
            fn = self.absolute_velocities
        return jnp.vectorize(fn, signature="(n),(n)->(v)")(jnp.asarray(q), jnp.asarray(qd))

    def closure_forces(self, multipliers: ArrayLike) -> dict[str, Array]:
        """The force each `connect` and `weld` closure exerts on its first body (`body1`, or
        `site1`'s body) at its anchor, world components, shape (..., 3), from multipliers
        λ (..., m) (`Solution.multipliers`, `jaxmbs.accelerations_and_multipliers`): the
        closure's position rows are p₁ − p₂ and M q̈ + Cᵀλ = Q, so the force is −λ of those
        rows; the second body receives the opposite (a weld's couple: `closure_torques`)."""
        self._joint_coordinates_only("closure_forces")
        lam = jnp.asarray(multipliers)
        groups = self.tree.constraint_groups()
        return {
            c.name: -lam[..., groups[c.name][:3]]
            for c in self.tree.closures
            if c.kind in ("connect", "weld")
        }

    def closure_torques(self, q: ArrayLike, multipliers: ArrayLike) -> dict[str, Array]:
        """The couple each `weld` exerts on its first body, world components, shape (..., 3),
        at configurations q (..., n) with multipliers λ (..., m). Its rotation rows
        r = ½ vee(E − Eᵀ), E = (R₂F₂)ᵀ R₁F₁ R_rel, have ∂r/∂φ₁ = (R₂F₂)ᵀ for a rotation φ₁
        of body 1 (world components) wherever the weld holds (E = I), so the couple is
        −R₂F₂ λ_rot; the second body receives the opposite."""
        self._joint_coordinates_only("closure_torques")
        lam = jnp.asarray(multipliers)
        rotations = jnp.vectorize(lambda q_: self.tree.frames(q_)[1], signature="(n)->(b,i,j)")(
            jnp.asarray(q)
        )
        groups = self.tree.constraint_groups()
        return {
            c.name: -jnp.einsum(
                "...ij,...j->...i", rotations[..., c.body2, :, :] @ c.frame2,
                lam[..., groups[c.name][3:]],
            )
            for c in self.tree.closures
            if c.kind == "weld"
        }  # fmt: skip

    def from_qpos(self, qpos: ArrayLike, qvel: ArrayLike | None = None) -> tuple[Array, Array]:
        """(q, q̇) of MuJoCo's `qpos` and `qvel` (default zero), shapes (..., nq), (..., nv);
        ė = ½ G(ê)ᵀ ω for each quaternion. With absolute coordinates (one state only): the
        bodies' centres of mass, Euler parameters and their rates at that joint state."""
        qpos = jnp.asarray(qpos, dtype=float)
        if qpos.shape[-1:] != (self.tree.nq,):
            raise ValueError(f"qpos must have {self.tree.nq} components, got shape {qpos.shape}")
        if qvel is None:
            qvel = jnp.zeros((*qpos.shape[:-1], self.tree.nv), qpos.dtype)
        qvel = jnp.asarray(qvel, dtype=float)
        if qvel.shape[-1:] != (self.tree.nv,):
            raise ValueError(f"qvel must have {self.tree.nv} components, got shape {qvel.shape}")
        rates = jnp.vectorize(self.tree.rates, signature="(n),(v)->(n)")(qpos, qvel)
        if self.coordinates != JOINTS:
            if qpos.ndim != 1:
                raise ValueError("from_qpos with absolute coordinates takes one state")
            q, qd = absolute_state(
                self.tree, self.absolute_bodies, qpos, rates, extra=self.absolute_joint_coordinates
            )
            return jnp.asarray(q), jnp.asarray(qd)
        return qpos, rates


def from_mjcf(
    source: str | os.PathLike | Any,
    *,
    keyframe: str | int | None = None,
    strict: bool = False,
    loops: Sequence[Connect | Weld] = (),
    controls: Controls = None,
    coordinates: str = JOINTS,
) -> ImportedModel:
    """Import an MJCF (or URDF) model through MuJoCo's compiler.

    **Arguments:**

    - `source`: a file path (`.xml` MJCF or `.urdf`), an XML string, or a `mujoco.MjSpec`.
    - `keyframe`: name or index of a `<key>` whose `qpos`/`qvel` are the initial state
      (default: `qpos0` at rest).
    - `strict`: refuse (`ValueError` naming every such element) a model with elements whose
      omission can change the motion — contacts, joint limits, friction loss, tendons,
      actuators, … — instead of leaving them out and listing them in the report.
    - `loops`: further loop closures ([`Connect`][jaxmbs.io.Connect],
      [`Weld`][jaxmbs.io.Weld]) added to the file's before compiling.
    - `controls`: the actuators' inputs u: a mapping from actuator name to a
      [`jaxmbs.Profile`][] of time or a callable `(t, q, qd, p) -> u` (actuators not named
      get u = 0), or one callable `(t, q, qd, p) -> (n_actuators,)` in the file's order.
      Default: all u = 0 (a `position` servo then holds its target 0). Actuators on a hinge
      or slide joint without activation dynamics are modelled (`jaxmbs.io.tree.Actuator`);
      others are left out. A callable receives the mechanism's coordinates (with
      `coordinates="absolute"`, the bodies' absolute ones).
    - `coordinates`: `"joints"` (default): MuJoCo's `qpos`, the loop closures as
      constraints; or `"absolute"`: an Euler-parameter body per moving body with the joints
      and the `connect`, `weld` and `joint` closures as constraints (`jaxmbs.io.absolute`;
      a slice of the elements: one joint per body or two orthogonal hinges, a hinge and a
      slide along one axis, three hinges at one anchor, orthogonal slides with at most one
      hinge normal to them; hinge and slide springs, dampers, armature and actuators; ball
      and free joints' dampers and armature — others are refused naming them).

    **Returns:** an [`ImportedModel`][jaxmbs.io.ImportedModel]: the mechanism in joint
    coordinates (MuJoCo's `qpos`, quaternions with their normalisation rows), the loop
    closures (`connect`, `weld`, `joint` equalities) as hard holonomic constraints named
    after the file's equalities, body masses and inertias, joint damping, armature,
    stiffness and spring references and the gravity vector as differentiable parameters
    (`"<body>.mass"`, `"<body>.inertia"`, `"<joint>.damping"`, `"<joint>.armature"`,
    `"<joint>.stiffness"`, `"<joint>.springref"`, `"<actuator>.gain"`, `"<actuator>.bias"`,
    `"gravity"`).

    A file MuJoCo's compiler refuses (malformed XML, an unknown joint type, a body without
    mass) is a `ValueError` quoting MuJoCo's message; so is an unknown keyframe.
    """
    mujoco = _mujoco()
    spec, label = _spec(mujoco, source)
    for i, loop in enumerate(loops):
        _add_loop(mujoco, spec, loop, i)
    if coordinates not in (JOINTS, ABSOLUTE):
        raise ValueError(f"coordinates must be {JOINTS!r} or {ABSOLUTE!r}, got {coordinates!r}")
    model = _compile(spec, label)
    fused: tuple[str, ...] = ()
    if coordinates == ABSOLUTE and (welded := _welded_bodies(mujoco, model)):
        # a body without joints under a moving one moves with its parent: MuJoCo's compiler
        # fuses it into the parent (mass, inertia, geoms), as `fusestatic` does, unless
        # something refers to it (then `absolute_mechanism` refuses it by name)
        spec = spec.copy()
        spec.compiler.fusestatic = True
        model = _compile(spec, label)
        kept = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b) for b in range(model.nbody)}
        fused = tuple(name for name in welded if name not in kept)
    return _import(mujoco, model, label, keyframe, strict, controls, coordinates, fused)


def _compile(spec, label: str):
    """`spec.compile()`, MuJoCo's refusal a `ValueError` naming the source."""
    try:
        return spec.compile()
    except Exception as err:  # MuJoCo's compiler names the element and the cause
        raise ValueError(f"{label}: MuJoCo's compiler refused the model: {err}") from None


def _welded_bodies(mujoco, model) -> tuple[str, ...]:
    """The names of the bodies without joints that have a moving ancestor (they move welded
    to their parent)."""
    moving = np.zeros(model.nbody, bool)
    welded = []
    for b in range(1, model.nbody):  # parents come before their children
        moving[b] = model.body_jntnum[b] > 0 or moving[model.body_parentid[b]]
        if model.body_jntnum[b] == 0 and moving[b]:
            name = mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_BODY, b)
            welded.append(name or f"(unnamed body {b})")
    return tuple(welded)


def from_urdf(
    source: str | os.PathLike,
    *,
    loops: Sequence[Connect | Weld] = (),
    keyframe: str | int | None = None,
    strict: bool = False,
    controls: Controls = None,
    coordinates: str = JOINTS,
) -> ImportedModel:
    """Import a URDF tree through MuJoCo's compiler, closing loops with `loops` (a list of
    [`Connect`][jaxmbs.io.Connect] / [`Weld`][jaxmbs.io.Weld] by link name), as
    [`from_mjcf`][jaxmbs.io.from_mjcf] does for MJCF. MuJoCo's URDF reader fixes the root
    link to the world and fuses links joined by fixed joints (their names go with them)."""
    return from_mjcf(
        source, keyframe=keyframe, strict=strict, loops=loops, controls=controls,
        coordinates=coordinates,
    )  # fmt: skip


def _mujoco():
    try:
        import mujoco
    except ImportError as err:  # the optional extra
        raise ImportError(
            "reading MJCF/URDF needs the mujoco package: pip install 'jaxmbs[mjcf]'"
        ) from err
    return mujoco


def _spec(mujoco, source) -> tuple[Any, str]:
    """The MjSpec of a path, an XML string or an MjSpec, and a label for messages."""
    if isinstance(source, mujoco.MjSpec):
        return source, "the MjSpec"
    if isinstance(source, os.PathLike) or (
        isinstance(source, str) and not source.lstrip().startswith("<")
    ):
        path = os.fspath(source)
        if not os.path.isfile(path):
            raise ValueError(f"no model file {path!r}")
        load, arg, label = mujoco.MjSpec.from_file, path, path
    elif isinstance(source, str):
        load, arg, label = mujoco.MjSpec.from_string, source, "the XML string"
    else:
        raise ValueError(
            f"source must be a path, an XML string or a mujoco.MjSpec, got {type(source)}"
        )
    try:
        return load(arg), label
    except Exception as err:  # XML errors, unknown attributes and values
        raise ValueError(f"{label}: MuJoCo could not read the model: {err}") from None


def _add_loop(mujoco, spec, loop: Connect | Weld, index: int) -> None:
    if not isinstance(loop, Connect | Weld):
        raise ValueError(f"loops[{index}] must be a jaxmbs.io.Connect or Weld, got {loop!r}")
    eq = spec.add_equality()
    kind = "connect" if isinstance(loop, Connect) else "weld"
    eq.type = mujoco.mjtEq.mjEQ_CONNECT if kind == "connect" else mujoco.mjtEq.mjEQ_WELD
    eq.objtype = mujoco.mjtObj.mjOBJ_BODY
    eq.name1, eq.name2 = loop.body1, loop.body2
    eq.name = loop.name or f"{kind}:{loop.body1}-{loop.body2}"
    data = np.array(eq.data, dtype=float)  # MuJoCo's defaults: torquescale 1, relpose 0
    data[0:3] = loop.anchor  # (a zero relpose quaternion: the pose at qpos0)
    eq.data = data


def _name(mujoco, model, obj, i: int, fallback: str) -> str:
    return mujoco.mj_id2name(model, obj, i) or f"{fallback}{i}"


def _quat_matrix(mujoco, quat) -> np.ndarray:
    out = np.zeros(9)
    mujoco.mju_quat2Mat(out, np.asarray(quat, dtype=float))
    return out.reshape(3, 3)


def _tree_joints(model, joint_names: tuple[str, ...]) -> list[TreeJoint]:
    """The model's joints: kind, body, qpos/qvel addresses, position, axis, `qpos0` part."""
    joints = []
    for j in range(model.njnt):
        kind = _JOINT_KINDS[int(model.jnt_type[j])]
        qadr, vadr = int(model.jnt_qposadr[j]), int(model.jnt_dofadr[j])
        joints.append(
            TreeJoint(
                joint_names[j],
                kind,
                int(model.jnt_bodyid[j]),
                qadr,
                vadr,
                np.array(model.jnt_pos[j], dtype=float),
                np.array(model.jnt_axis[j], dtype=float),
                np.array(model.qpos0[qadr : qadr + NQ[kind]], dtype=float),
            )
        )
    return joints


def _inertial_and_joint_params(
    model, body_names: tuple[str, ...], joints: list[TreeJoint], off, D
) -> tuple[dict[str, Any], list[bool]]:
    """The parameters: every body's mass and principal inertia, every joint's `damping` and
    `armature` (damping zero where the model disables dampers), and the `stiffness` and
    `springref` of the joints that have a spring (hinges and slides always, so that a
    stiffness can be studied from zero; balls and free joints where it is non-zero); and
    which joints have one."""
    params: dict[str, Any] = {}
    for b in range(1, model.nbody):
        params[param_key(body_names[b], "mass")] = float(model.body_mass[b])
        params[param_key(body_names[b], "inertia")] = jnp.asarray(model.body_inertia[b], float)
    springs = []
    for index, j in enumerate(joints):
        dofs = slice(j.vadr, j.vadr + NV[j.kind])
        for field, values in (("damping", model.dof_damping), ("armature", model.dof_armature)):
            v = np.array(values[dofs], dtype=float)
            if field == "damping" and off(D.mjDSBL_DAMPER):
                v = np.zeros_like(v)
            params[param_key(j.name, field)] = float(v[0]) if v.size == 1 else jnp.asarray(v)
        k = 0.0 if off(D.mjDSBL_SPRING) else float(model.jnt_stiffness[index])
        spring = j.kind in (HINGE, SLIDE) or k != 0.0
        springs.append(spring)
        if spring:
            ref = np.array(model.qpos_spring[j.qadr : j.qadr + NQ[j.kind]], dtype=float)
            params[param_key(j.name, "stiffness")] = k
            params[param_key(j.name, "springref")] = (
                float(ref[0]) if ref.size == 1 else jnp.asarray(ref)
            )
    return params, springs


def _completion_inertias(model, joints: list[TreeJoint]) -> np.ndarray:
    """J̄ of every ball and free joint's quaternion completion term: the mean principal
    inertia of its body plus the mean armature of its rotational dofs (the largest body's
    where that is zero)."""
    inertia_scale = np.mean(model.body_inertia[1:], axis=1) if model.nbody > 1 else np.ones(1)
    fallback = float(np.max(inertia_scale, initial=0.0)) or 1.0
    completion = []
    for j in joints:
        if j.kind in (FREE, BALL):
            jbar = float(inertia_scale[j.body - 1]) + float(
                np.mean(model.dof_armature[j.vadr + NV[j.kind] - 3 : j.vadr + NV[j.kind]])
            )
            completion.append(jbar if jbar > 0 else fallback)
    return np.array(completion)


def _import(
    mujoco,
    model,
    label: str,
    keyframe,
    strict: bool,
    controls: Controls,
    coordinates: str,
    fused: tuple[str, ...] = (),
) -> ImportedModel:
    Obj = mujoco.mjtObj
    disabled = int(model.opt.disableflags)

    def off(flag) -> bool:
        return bool(disabled & int(flag))

    D = mujoco.mjtDisableBit
    body_names = tuple(_name(mujoco, model, Obj.mjOBJ_BODY, b, "body") for b in range(model.nbody))
    joint_names = tuple(
        _name(mujoco, model, Obj.mjOBJ_JOINT, j, "joint") for j in range(model.njnt)
    )
    if len(set(body_names)) != len(body_names) or len(set(joint_names)) != len(joint_names):
        raise ValueError(f"{label}: body and joint names must be unique")
    left_out: list[LeftOut] = []
    notes: list[str] = []

    joints = _tree_joints(model, joint_names)
    params, springs = _inertial_and_joint_params(model, body_names, joints, off, D)
    actuators = _actuators(mujoco, model, joints, params, left_out, off)
    gravity = np.zeros(3) if off(D.mjDSBL_GRAVITY) else np.array(model.opt.gravity, float)
    params["gravity"] = jnp.asarray(gravity)

    equality_off = off(D.mjDSBL_EQUALITY) or off(D.mjDSBL_CONSTRAINT)
    closures = _closures(mujoco, model, joints, left_out, notes, equality_off)
    _left_out_elements(mujoco, model, body_names, joint_names, off, left_out)
    geoms = _geoms(mujoco, model)
    if undrawn := [g for g in geoms if g.kind not in DRAWN]:
        notes.append(
            "geoms without a line drawing are not drawn: "
            + ", ".join(f"{g.name!r} ({g.kind})" for g in undrawn)
        )
    if fused:
        notes.append(
            "bodies without joints fused into their parents by MuJoCo's compiler (fusestatic) "
            "for absolute coordinates, their mass, inertia and geoms with them: "
            + ", ".join(repr(name) for name in fused)
        )
    report = ImportReport(label, tuple(left_out), tuple(notes))
    if strict and (refused := [e for e in left_out if e.changes_motion]):
        raise ValueError(
            f"{label}: strict=True refuses elements that the imported mechanism would leave "
            "out: " + "; ".join(str(e) for e in refused)
        )

    tree = Tree(
        body_names,
        tuple(int(p) for p in model.body_parentid),
        np.array(model.body_pos, dtype=float),
        np.stack([_quat_matrix(mujoco, qq) for qq in model.body_quat]),
        np.array(model.body_ipos, dtype=float),
        np.stack([_quat_matrix(mujoco, qq) for qq in model.body_iquat]),
        tuple(joints),
        tuple(closures),
        _completion_inertias(model, joints),
        tuple(springs),
        tuple(actuators),
        int(model.nq),
        int(model.nv),
    )
    qpos, qvel = _initial_state(mujoco, model, label, keyframe)
    q0 = jnp.asarray(qpos)
    qd0 = tree.rates(q0, jnp.asarray(qvel))
    control = _control_function(label, tree, controls)
    if coordinates == ABSOLUTE:
        q_ref = jnp.asarray(np.concatenate([j.ref for j in joints])) if joints else q0
        mech, moving, maps, extra = absolute_mechanism(tree, params, q_ref, label, control)
        q_abs, qd_abs = absolute_state(tree, moving, q0, qd0, extra=extra)
        geometry = Geometry(body_names, geoms, body_frames(tree, moving, q_ref))
        positions, velocities = maps if maps is not None else (None, None)
        return ImportedModel(
            mech.with_drawings(geometry), jnp.asarray(q_abs), jnp.asarray(qd_abs), report, tree,
            ABSOLUTE, moving, geometry, positions, velocities, tuple(int(a) for a in extra),
        )  # fmt: skip
    geometry = Geometry(body_names, geoms, tree.frames)
    mech = _mechanism(tree, params, q0, control, geometry)
    return ImportedModel(mech, q0, qd0, report, tree, geometry=geometry)


def _geoms(mujoco, model) -> tuple[Geom, ...]:
    """Every geom of the compiled model: name, type, body, size and frame in its body."""
    return tuple(
        Geom(
            _name(mujoco, model, mujoco.mjtObj.mjOBJ_GEOM, g, "geom"),
            mujoco.mjtGeom(int(model.geom_type[g])).name.removeprefix("mjGEOM_").lower(),
            int(model.geom_bodyid[g]),
            np.array(model.geom_size[g], dtype=float),
            np.array(model.geom_pos[g], dtype=float),
            _quat_matrix(mujoco, model.geom_quat[g]),
        )
        for g in range(model.ngeom)
    )


def _initial_state(mujoco, model, label: str, keyframe) -> tuple[np.ndarray, np.ndarray]:
    if keyframe is None:
        return np.array(model.qpos0, dtype=float), np.zeros(model.nv)
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_KEY, k) for k in range(model.nkey)]
    if isinstance(keyframe, str):
        if keyframe not in names:
            raise ValueError(f"{label}: no keyframe {keyframe!r}; keyframes: {names}")
        k = names.index(keyframe)
    else:
        k = int(keyframe)
        if not 0 <= k < model.nkey:
            raise ValueError(f"{label}: keyframe index {k} out of range ({model.nkey} keyframes)")
    return np.array(model.key_qpos[k], dtype=float), np.array(model.key_qvel[k], dtype=float)


def _closures(mujoco, model, joints, left_out, notes, equality_off) -> list[Closure]:
    """The loop-closing equalities as `Closure`s; the others into `left_out`."""
    Eq, Obj = mujoco.mjtEq, mujoco.mjtObj
    out: list[Closure] = []
    for i in range(model.neq):
        kind_id = int(model.eq_type[i])
        kind = {
            int(Eq.mjEQ_CONNECT): "connect",
            int(Eq.mjEQ_WELD): "weld",
            int(Eq.mjEQ_JOINT): "joint",
        }.get(kind_id)
        label_kind = Eq(kind_id).name.removeprefix("mjEQ_").lower()
        name = _name(mujoco, model, Obj.mjOBJ_EQUALITY, i, label_kind)
        if equality_off:
            left_out.append(
                LeftOut(
                    "equality",
                    name,
                    "equality constraints are disabled in the file's options",
                    False,
                )
            )
            continue
        if not model.eq_active0[i]:
            left_out.append(
                LeftOut("equality", name, 'inactive at the start (active="false")', False)
            )
            continue
        if kind is None:
            left_out.append(
                LeftOut("equality", name, f"{label_kind} equalities are not supported", True)
            )
            continue
        data = np.array(model.eq_data[i], dtype=float)
        id1, id2 = int(model.eq_obj1id[i]), int(model.eq_obj2id[i])
        if kind == "joint":
            kinds = [joints[j].kind for j in (id1, id2) if j >= 0]
            if any(k not in (HINGE, SLIDE) for k in kinds):
                left_out.append(
                    LeftOut(
                        "equality",
                        name,
                        "a joint equality couples hinge and slide joints only",
                        True,
                    )
                )
                continue
            out.append(Closure(name, "joint", joint1=id1, joint2=id2, coefficients=data[:5]))
            continue
        on_sites = int(model.eq_objtype[i]) == int(Obj.mjOBJ_SITE)
        if on_sites:
            b1, b2 = int(model.site_bodyid[id1]), int(model.site_bodyid[id2])
            p1, p2 = np.array(model.site_pos[id1]), np.array(model.site_pos[id2])
            f1, f2 = (_quat_matrix(mujoco, model.site_quat[s]) for s in (id1, id2))
            relative = np.eye(3)
        else:
            b1, b2, f1, f2 = id1, id2, np.eye(3), np.eye(3)
            if kind == "connect":
                p1, p2 = data[0:3], data[3:6]
            else:
                p1, p2 = data[3:6], data[0:3]
            relative = _quat_matrix(mujoco, data[6:10]) if kind == "weld" else np.eye(3)
        if kind == "weld" and data[10] == 0.0:
            kind = "connect"
            notes.append(f"weld {name!r} has torquescale 0: only its position is held")
        out.append(Closure(name, kind, b1, b2, p1, p2, f1, f2, relative))
    if out:
        notes.append(
            "equality constraints "
            + ", ".join(repr(c.name) for c in out)
            + " are held exactly as holonomic constraints: their solref/solimp (MuJoCo's soft "
            "constraint parameters) are ignored"
        )
    return out


def _left_out_elements(mujoco, model, body_names, joint_names, off, left_out) -> None:
    """Append every element the mechanism does not contain to `left_out`."""
    Obj, D = mujoco.mjtObj, mujoco.mjtDisableBit
    constraint_off = off(D.mjDSBL_CONSTRAINT)
    colliding = [
        g for g in range(model.ngeom) if model.geom_contype[g] or model.geom_conaffinity[g]
    ]
    if not (off(D.mjDSBL_CONTACT) or constraint_off) and (len(colliding) > 1 or model.npair):
        names = [_name(mujoco, model, Obj.mjOBJ_GEOM, g, "geom") for g in colliding]
        left_out.append(
            LeftOut(
                "contact",
                ", ".join(names),
                'contacts are not modelled (MuJoCo\'s <flag contact="disable"/> compares)',
                True,
            )
        )
    for j in range(model.njnt):
        if model.jnt_limited[j] and not (off(D.mjDSBL_LIMIT) or constraint_off):
            lo, hi = model.jnt_range[j]
            left_out.append(
                LeftOut(
                    "joint limit",
                    joint_names[j],
                    f"range [{lo:g}, {hi:g}] is not a stop here",
                    True,
                )
            )
        dofs = slice(
            int(model.jnt_dofadr[j]),
            int(model.jnt_dofadr[j]) + NV[_JOINT_KINDS[int(model.jnt_type[j])]],
        )
        if np.any(model.dof_frictionloss[dofs] > 0) and not (
            off(D.mjDSBL_FRICTIONLOSS) or constraint_off
        ):
            left_out.append(
                LeftOut("friction loss", joint_names[j], "dry friction is not modelled", True)
            )
    for kind, count, obj, reason, changes in (
        ("tendon", model.ntendon, Obj.mjOBJ_TENDON, "tendons are not modelled", True),
        ("sensor", model.nsensor, Obj.mjOBJ_SENSOR, "sensors are not computed", False),
    ):
        left_out += [
            LeftOut(kind, _name(mujoco, model, obj, i, kind), reason, changes) for i in range(count)
        ]
    for b in range(1, model.nbody):
        if model.body_gravcomp[b] != 0:
            left_out.append(
                LeftOut("gravity compensation", body_names[b], "gravcomp is not modelled", True)
            )
        if model.body_mocapid[b] >= 0:
            left_out.append(LeftOut("mocap", body_names[b], "a mocap body is fixed here", False))
    if model.opt.density > 0 or model.opt.viscosity > 0:
        left_out.append(
            LeftOut("fluid forces", "option", "density/viscosity forces are not modelled", True)
        )
    for f in range(model.nflex):
        left_out.append(
            LeftOut(
                "flex",
                _name(mujoco, model, Obj.mjOBJ_FLEX, f, "flex"),
                "flexes are not modelled",
                True,
            )
        )


def _actuators(mujoco, model, joints, params, left_out, off) -> list[Actuator]:
    """The actuators `Actuator` models (their gains and biases into `params`); the others
    into `left_out`."""
    D, Obj = mujoco.mjtDisableBit, mujoco.mjtObj
    out = []
    for a in range(model.nu):
        name = _name(mujoco, model, Obj.mjOBJ_ACTUATOR, a, "actuator")
        joint = int(model.actuator_trnid[a, 0])
        reason = None
        if off(D.mjDSBL_ACTUATION):
            left_out.append(LeftOut("actuator", name, "actuation is disabled", False))
            continue
        if int(model.actuator_trntype[a]) != int(mujoco.mjtTrn.mjTRN_JOINT):
            reason = "only joint transmissions are modelled"
        elif joints[joint].kind not in (HINGE, SLIDE):
            reason = "only actuators on hinge and slide joints are modelled"
        elif int(model.actuator_dyntype[a]) != int(mujoco.mjtDyn.mjDYN_NONE):
            reason = "activation dynamics (dyntype) are not modelled"
        elif int(model.actuator_gaintype[a]) != int(mujoco.mjtGain.mjGAIN_FIXED) or int(
            model.actuator_biastype[a]
        ) not in (int(mujoco.mjtBias.mjBIAS_NONE), int(mujoco.mjtBias.mjBIAS_AFFINE)):
            reason = "only a fixed gain and an affine bias are modelled"
        if reason is not None:
            left_out.append(LeftOut("actuator", name, reason, True))
            continue
        params[param_key(name, "gain")] = float(model.actuator_gainprm[a, 0])
        params[param_key(name, "bias")] = jnp.asarray(model.actuator_biasprm[a, :3], float)
        clamp = model.actuator_ctrllimited[a] and not off(D.mjDSBL_CLAMPCTRL)
        out.append(
            Actuator(
                name,
                joint,
                float(model.actuator_gear[a, 0]),
                tuple(map(float, model.actuator_ctrlrange[a])) if clamp else None,
                tuple(map(float, model.actuator_forcerange[a]))
                if model.actuator_forcelimited[a]
                else None,
            )
        )
    return out


def _control_function(label: str, tree: Tree, controls: Controls) -> Callable:
    """`(t, q, qd, p) -> u`, one control per modelled actuator, from `controls`."""
    names = [a.name for a in tree.actuators]
    if controls is None:
        return lambda t, q, qd, p: jnp.zeros(len(names))
    if not isinstance(controls, Mapping):
        if not callable(controls):
            raise ValueError(f"controls must be a mapping or a callable, got {controls!r}")
        return lambda t, q, qd, p: jnp.asarray(controls(t, q, qd, p)).reshape(len(names))
    if unknown := sorted(set(controls) - set(names)):
        raise ValueError(
            f"{label}: controls names actuators that are not modelled: {unknown}; "
            f"modelled actuators: {names}"
        )
    inputs = []
    for name in names:
        given = controls.get(name)
        if given is None:
            inputs.append(lambda t, q, qd, p: jnp.zeros(()))
        elif isinstance(given, Profile):
            inputs.append(lambda t, q, qd, p, profile=given: profile(t))
        elif callable(given):
            inputs.append(given)
        else:
            raise ValueError(f"controls[{name!r}] must be a jaxmbs.Profile or a callable")
    return lambda t, q, qd, p: jnp.stack([jnp.asarray(u(t, q, qd, p)) for u in inputs])


def _mechanism(
    tree: Tree, params: dict, q0: Array, control: Callable, geometry: Geometry
) -> Mechanism:
    constraints = None
    if tree.n_constraints:

        def constraints(t, q, p):
            return tree.constraints(q)

    def forces(t, q, qd, p):
        Q = tree.generalized_forces(q, qd, p)
        if tree.actuators:
            Q = Q + tree.actuator_forces(control(t, q, qd, p), q, qd, p)
        return Q

    # jitted: the constructor evaluates M at the reference configuration eagerly, which op
    # by op costs seconds; as one compiled call it costs a fraction of that.
    return Mechanism(
        jax.jit(tree.mass_matrix),
        forces,
        constraints,
        params=params,
        coordinate_names=tree.coordinate_names(),
        constraint_groups=tree.constraint_groups() if tree.n_constraints else None,
        potential_energy=tree.potential_energy,
        reference_q=q0,
        drawings=(geometry,),
    )
