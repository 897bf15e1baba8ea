"""`from_mjcf(coordinates="absolute")` beyond one joint per body (`jaxmbs.io.absolute`, issue
41): several joints on one body (Universal, Cylindrical, three-hinge Spherical, and every
other combination in mixed coordinates), weld and joint equalities, springs and dampers on
slides, armature, actuators — trajectories and accelerations against the joint-coordinate
import of the same file, accelerations against MuJoCo's, constraints on MuJoCo's own
kinematics, kinetic energy against MuJoCo's, and the refusals."""

from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.model.joints.orientation import euler_parameters

mujoco = pytest.importorskip("mujoco")
import jaxmbs.io  # noqa: E402  (after the skip: the tests need mujoco)
from jaxmbs.io.absolute import rotation_vector  # noqa: E402

CARTPOLE = Path(__file__).resolve().parents[1] / "models" / "mjcf" / "cartpole.xml"

#: A universal joint to the world (two orthogonal hinges at one anchor, springs on both), a
#: cylindrical joint as a slide then a hinge (spring-dampers on both) and one as a hinge then
#: a slide, a gimbal of three hinges (a spherical joint), a slide with a spring-damper; the
#: armature of a universal's second hinge, a cylindrical's hinge and another's slide.
COMPOSED = """
<mujoco>
  <option gravity="0.5 -1 -9.81"/>
  <worldbody>
    <body name="base" pos="0 0 1" euler="10 0 20">
      <joint name="u1" axis="1 0 0" pos="0 0 0.05" damping="0.05" stiffness="1" springref="10"/>
      <joint name="u2" axis="0 1 0" pos="0 0 0.05" damping="0.02" stiffness="0.5" ref="5"
             armature="0.02"/>
      <geom type="box" size="0.2 0.1 0.05" pos="0.02 0 -0.1" euler="5 10 15"/>
      <body name="sleeve" pos="0.2 0.05 -0.1" euler="0 20 0">
        <joint name="push" type="slide" axis="0 0.3 1" damping="0.3" stiffness="4"
               springref="0.02"/>
        <joint name="turn" axis="0 0.3 1" pos="0.01 0 0" damping="0.1" stiffness="2"
               springref="15" ref="5" armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0.05" size="0.03"/>
        <body name="hand" pos="0.3 0 0.05">
          <joint name="gx" axis="1 0 0" pos="0 0.01 0"/>
          <joint name="gy" axis="0 1 1" pos="0 0.01 0"/>
          <joint name="gz" axis="0 0 1" pos="0 0.01 0"/>
          <geom type="box" size="0.05 0.04 0.03" pos="0.05 0 0"/>
        </body>
      </body>
      <body name="drill" pos="-0.1 0.1 -0.1" euler="30 0 0">
        <joint name="spin" axis="1 0 0" pos="0 0.02 0"/>
        <joint name="feed" type="slide" axis="1 0 0" armature="0.03"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/>
      </body>
      <body name="tail" pos="-0.2 0 0">
        <joint name="slide" type="slide" axis="1 0 0.2" damping="0.5" stiffness="3"
               springref="0.05"/>
        <geom type="sphere" size="0.05" pos="0.02 0.01 0"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""

#: A double pendulum a–b; c geared to a (θc = −θa / 2), a free box welded to c, a slider s
#: coupled to b (x_s = 0.1 θb): two degrees of freedom.
CLOSED = """
<mujoco>
  <option gravity="0.5 -1 -9.81"/>
  <worldbody>
    <body name="a" pos="0 0 1">
      <joint name="ja" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03"/>
      <body name="b" pos="0.4 0 0">
        <joint name="jb" axis="0 1 0.2" pos="0.01 0 0"/>
        <geom type="capsule" fromto="0 0 0 0.4 0 0.1" size="0.03"/>
      </body>
    </body>
    <body name="c" pos="0 0.3 1">
      <joint name="jc" axis="0 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03"/>
    </body>
    <body name="box" pos="0.5 0.3 1" euler="10 20 30">
      <freejoint name="float"/>
      <geom type="box" size="0.05 0.04 0.03" pos="0.01 0 0"/>
    </body>
    <body name="s" pos="0 -0.3 1">
      <joint name="js" type="slide" axis="1 0 0"/>
      <geom size="0.05"/>
    </body>
  </worldbody>
  <equality>
    <joint name="gear" joint1="jc" joint2="ja" polycoef="0 -0.5 0 0 0"/>
    <joint name="track" joint1="js" joint2="jb" polycoef="0 0.1 0 0 0"/>
    <weld name="glue" body1="c" body2="box"/>
  </equality>
</mujoco>
"""


def _pair(xml: str):
    return jaxmbs.io.from_mjcf(xml), jaxmbs.io.from_mjcf(xml, coordinates="absolute")


def _assert_same_motion(
    joint, absolute, qpos, qvel, t1: float = 0.5, *, tol: float = 1e-11,
    frames: float = 1e-8, residual_bound: float = 1e-13,
) -> None:  # fmt: skip
    """Both imports from MuJoCo's state (qpos, qvel) over [0, t1] at rtol = atol = `tol`:
    every body's frame (x and R) the same to `frames` (bodies moving by more than 0.1), the
    absolute run's constraints at round-off (`residual_bound`); each run in JAX's default
    precision."""
    ts = jnp.linspace(0.0, t1, 11)
    runs = []
    for imported in (joint, absolute):
        q0, qd0 = imported.from_qpos(qpos, qvel)
        sol = jaxmbs.simulate(imported.mechanism, q0, qd0, (0.0, t1), rtol=tol, atol=tol, saveat=ts)
        assert sol.successful and sol.q.dtype == jnp.zeros(()).dtype
        x, R = jax.jit(jax.vmap(imported.geometry.frames))(sol.q)
        runs.append((np.asarray(x), np.asarray(R), float(jnp.max(sol.position_residual))))
    (xj, Rj, _), (xa, Ra, residual) = runs
    motion = float(np.max(np.abs(xj - xj[0])))
    gap = max(np.max(np.abs(xa - xj)), np.max(np.abs(Ra - Rj)))
    print(f"frames {gap:.2g} of a motion of {motion:.2g}, residual {residual:.2g}")
    assert motion > 0.1
    assert gap <= frames
    assert residual <= residual_bound


def _frame_accelerations(
    imported, qpos, qvel, t: float = 0.0, changes: dict | None = None
) -> tuple[np.ndarray, ...]:
    """Every body's frame (x, R), its rate and its acceleration at MuJoCo's state (qpos,
    qvel) and time t, with q̈ from the import's own equations of motion (its parameters
    with `changes`): ẋ = ∂x/∂q q̇ and ẍ = ∂x/∂q q̈ + ∂²x/∂q²[q̇, q̇] (the same for R)."""
    q, qd = imported.from_qpos(qpos, qvel)
    # as arrays: a number would be static, and a changed one would compile anew
    params = jax.tree.map(jnp.asarray, {**imported.mechanism.params, **(changes or {})})
    parts = _kinematics(imported.mechanism, imported.geometry.frames, q, qd, t, params)
    return tuple(np.asarray(a) for part in parts for a in part)


@eqx.filter_jit
def _kinematics(mechanism, frames, q, qd, t, params):
    """`_frame_accelerations`, compiled once per model (other parameters reuse it)."""
    qdd = jaxmbs.accelerations(mechanism, q, qd, t, params)

    def rate(q):
        return jax.jvp(frames, (q,), (qd,))[1]

    (pose, velocity), (_, curvature) = jax.jvp(lambda q: (frames(q), rate(q)), (q,), (qd,))
    along = jax.jvp(frames, (q,), (qdd,))[1]
    return pose, velocity, jax.tree.map(jnp.add, curvature, along)


def _assert_same_accelerations(
    joint, absolute, qpos, qvel, t: float = 0.0, changes: dict | None = None
) -> float:
    """Both imports at MuJoCo's state (qpos, qvel) and time t (their parameters with
    `changes`): every body's frame (x and R), its rate and its acceleration the same to
    1e-10 of their scale; returns the largest difference of the accelerations over their
    scale."""
    j, a = (
        _frame_accelerations(imported, qpos, qvel, t, changes) for imported in (joint, absolute)
    )
    for kind, (vj, va) in zip(("x", "R", "ẋ", "Ṙ", "ẍ", "R̈"), zip(j, a, strict=True), strict=True):
        scale = max(float(np.max(np.abs(vj))), 1.0)
        assert np.max(np.abs(va - vj)) <= 1e-10 * scale, (kind, np.max(np.abs(va - vj)))
    scale = max(float(np.max(np.abs(j[4]))), float(np.max(np.abs(j[5]))))
    gap = max(float(np.max(np.abs(a[4] - j[4]))), float(np.max(np.abs(a[5] - j[5]))))
    print(f"accelerations {gap / scale:.2g} of their scale {scale:.2g}")
    assert scale > 0.1  # the state really accelerates: the check has something to compare
    return gap / scale


def _acceleration_change(imported, qpos, qvel, changes: dict, t: float = 0.0) -> float:
    """How far the bodies' accelerations ẍ move, over their largest, when the import's
    parameters take `changes` (`_frame_accelerations`)."""
    reference = _frame_accelerations(imported, qpos, qvel, t)[4]
    changed = _frame_accelerations(imported, qpos, qvel, t, changes)[4]
    return float(np.max(np.abs(changed - reference)) / np.max(np.abs(reference)))


def _random_state(imported, seed: int, spread: float, speed: float = 1.0):
    """MuJoCo's qpos0 moved by `spread` normal deviates (quaternions normalised) and a qvel of
    `speed` normal deviates."""
    rng = np.random.default_rng(seed)
    qpos = np.asarray(imported.q0) + spread * rng.standard_normal(imported.tree.nq)
    return np.asarray(imported.to_qpos(qpos)), speed * rng.standard_normal(imported.tree.nv)


def _mujoco_state(xml: str, qpos, qvel):
    """MuJoCo's model and data at (qpos, qvel) after `mj_forward`, kinetic energy enabled."""
    model = mujoco.MjModel.from_xml_string(xml)
    model.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, data)
    return model, data


def _assert_on_mujocos_kinematics(xml: str, absolute, qpos, qvel) -> None:
    """The absolute constraints at round-off at the bodies' poses of MuJoCo's
    `mj_kinematics` (centres of mass `xipos`, principal axes `ximat`; mixed coordinates'
    joint coordinates: their qpos), and ½ q̇ᵀ M q̇ equal to MuJoCo's kinetic energy (that of
    `mj_fullM`'s M, `data.energy[1]`) to 1e-13."""
    model, data = _mujoco_state(xml, qpos, qvel)
    poses = [
        np.concatenate([data.xipos[b], euler_parameters(data.ximat[b].reshape(3, 3))])
        for b in absolute.absolute_bodies
    ]
    poses.append(np.asarray(qpos)[np.array(absolute.absolute_joint_coordinates, dtype=int)])
    mech = absolute.mechanism
    qa = jnp.asarray(np.concatenate(poses))
    residual = eqx.filter_jit(lambda m, q: m.constraints(0.0, q, m.params))(mech, qa)
    M = np.zeros((model.nv, model.nv))
    mujoco.mj_fullM(model, data, M)
    assert abs(0.5 * qvel @ M @ qvel - data.energy[1]) <= 1e-12 * data.energy[1]
    qa, qda = absolute.from_qpos(qpos, qvel)
    Ma = eqx.filter_jit(lambda m, q: m.mass_matrix(q, m.params))(mech, qa)
    energy = abs(0.5 * float(qda @ Ma @ qda) - data.energy[1]) / data.energy[1]
    residual = float(jnp.max(jnp.abs(residual)))
    print(f"on MuJoCo's kinematics: residual {residual:.2g}, energy {energy:.2g}")
    assert residual <= 1e-14
    assert energy <= 1e-13


@pytest.fixture(scope="module")
def composed():
    return _pair(COMPOSED)


def test_several_joints_on_a_body_are_one_joint(composed):
    """Two orthogonal hinges at one anchor: a Universal (4 rows); a slide and a hinge along
    one axis, either order: a Cylindrical (4); three hinges at one anchor: a Spherical (3);
    each hinge and slide with its spring-damper along its own coordinate."""
    _, absolute = composed
    groups = dict(absolute.mechanism.constraint_groups)
    sizes = {g: len(groups[g]) for g in ("u1+u2", "push+turn", "gx+gy+gz", "spin+feed", "slide")}
    assert sizes == {"u1+u2": 4, "push+turn": 4, "gx+gy+gz": 3, "spin+feed": 4, "slide": 5}
    elements = {e.name: type(e).__name__ for e in absolute.mechanism.elements.elements}
    assert elements == {
        "u1": "RotationalSpringDamper",
        "u2": "RotationalSpringDamper",
        "push": "AxialSpringDamper",
        "turn": "RotationalSpringDamper",
        "spin": "RotationalSpringDamper",
        "feed": "AxialSpringDamper",
        "slide": "AxialSpringDamper",
    }
    assert absolute.mechanism.structure.dof == 10  # 2 + 2 + 3 + 2 + 1
    with pytest.raises(ValueError, match="to_qpos: the three hinges composed into a Spherical"):
        absolute.to_qpos(absolute.q0)


def test_composed_joints_and_slide_springs_move_as_the_joint_coordinates(composed):
    """From a random state, over 0.5 s: every body's frame as in joint coordinates (measured
    4.1e-10 of a motion of 0.9; with the universal's second angle of the wrong sign: 0.12),
    constraints at round-off (3.3e-16); on MuJoCo's own kinematics at that state the
    constraints hold to 5.6e-16 and the kinetic energy, armature included, is MuJoCo's to
    7.3e-16 (relative)."""
    joint, absolute = composed
    rng = np.random.default_rng(4)
    qpos = np.asarray(joint.q0) + 0.3 * rng.standard_normal(joint.tree.nq)
    qvel = rng.standard_normal(joint.tree.nv)
    _assert_on_mujocos_kinematics(COMPOSED, absolute, qpos, qvel)
    _assert_same_motion(joint, absolute, qpos, qvel)


def test_weld_and_joint_equalities_move_as_the_joint_coordinates():
    """A weld (Fixed, 6 rows) and two joint equalities (a hinge geared to a hinge, a slide
    to a hinge: 1 row each) in absolute coordinates. At a moving state that keeps the
    equalities, on MuJoCo's kinematics the constraints hold to 1.1e-16 and the kinetic
    energy is MuJoCo's to round-off (0); every body's frame, its rate and its acceleration
    are those of the joint coordinates (accelerations: measured 3.8e-15 of their scale 24).
    (A 0.5 s run of both imports from rest, 3.7e-11 apart, compiled two solves for 65 s.)"""
    joint, absolute = _pair(CLOSED)
    groups = dict(absolute.mechanism.constraint_groups)
    assert [len(groups[g]) for g in ("glue", "gear", "track")] == [6, 1, 1]
    assert absolute.mechanism.structure.dof == 2
    qpos, qvel = np.asarray(joint.q0), np.zeros(joint.tree.nv)
    # a state that keeps the equalities: ja, jb turned, jc = −ja / 2, js = 0.1 jb, the box on c
    model, data = _mujoco_state(CLOSED, qpos, qvel)
    names = {mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_JOINT, j): j for j in range(model.njnt)}
    angles = {"ja": 0.4, "jb": -0.7, "jc": -0.2, "js": -0.07}
    rates = {"ja": 1.3, "jb": 0.6, "jc": -0.65, "js": 0.06}
    for name, value in angles.items():
        data.qpos[model.jnt_qposadr[names[name]]] = value
        data.qvel[model.jnt_dofadr[names[name]]] = rates[name]
    mujoco.mj_kinematics(model, data)
    box, c = (mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, n) for n in ("box", "c"))
    # the weld holds the box's pose in c's frame: place it there, moving with c
    relative = model.body_pos[box] - model.body_pos[c]
    free = model.jnt_qposadr[names["float"]]
    data.qpos[free : free + 3] = data.xpos[c] + data.xmat[c].reshape(3, 3) @ relative
    mujoco.mju_mulQuat(data.qpos[free + 3 : free + 7], data.xquat[c], model.body_quat[box])
    omega = rates["jc"] * data.xmat[c].reshape(3, 3) @ np.array([0.0, 1.0, 0.0])
    dof = model.jnt_dofadr[names["float"]]
    anchor = data.xpos[c] + data.xmat[c].reshape(3, 3) @ model.jnt_pos[names["jc"]]
    data.qvel[dof : dof + 3] = np.cross(omega, data.qpos[free : free + 3] - anchor)
    box_rot = np.zeros(9)
    mujoco.mju_quat2Mat(box_rot, data.qpos[free + 3 : free + 7])
    data.qvel[dof + 3 : dof + 6] = box_rot.reshape(3, 3).T @ omega
    qpos, qvel = data.qpos.copy(), data.qvel.copy()
    held = jax.jit(joint.mechanism.constraints)(0.0, jnp.asarray(qpos), joint.mechanism.params)
    assert float(jnp.max(jnp.abs(held))) <= 1e-14  # the state keeps them in joint coordinates
    _assert_on_mujocos_kinematics(CLOSED, absolute, qpos, qvel)
    _assert_same_accelerations(joint, absolute, qpos, qvel)


#: Slides on one body: three orthogonal slides (a block: springs, a damper, armature), on it a
#: hinge then two slides turning with it (a tray: a planar joint), a spring, armature and a
#: motor on one of them.
SLIDING = """
<mujoco>
  <option gravity="0.5 -1 -9.81"/>
  <worldbody>
    <body name="block" pos="0 0 1" euler="10 20 30">
      <joint name="bx" type="slide" axis="1 0 0" damping="0.2" stiffness="3" springref="0.05"/>
      <joint name="by" type="slide" axis="0 1 0"/>
      <joint name="bz" type="slide" axis="0 0 1" armature="0.02"/>
      <geom type="box" size="0.1 0.08 0.06" pos="0.01 0 0"/>
      <body name="tray" pos="0.2 0 0" euler="0 30 15">
        <joint name="tr" axis="0 0 1" pos="0.05 0 0" damping="0.05" stiffness="1"
               springref="10"/>
        <joint name="tx" type="slide" axis="1 0 0" stiffness="2" springref="-0.02"
               armature="0.03"/>
        <joint name="ty" type="slide" axis="0 1 0" damping="0.3"/>
        <geom type="box" size="0.1 0.1 0.02" pos="0.03 0.02 0"/>
      </body>
    </body>
  </worldbody>
  <actuator><motor name="reach" joint="tx" gear="3"/></actuator>
</mujoco>
"""


def test_slides_and_a_hinge_on_one_body_move_as_the_joint_coordinates():
    """Three orthogonal slides keep the rotation (a Fixed's 3 rotation rows); a hinge then
    two slides across it (turning with the body) is planar (a Revolute's 2 parallel rows and
    the offset along the hinge's axis). At a random moving state with the motor on a
    turning slide driven, on MuJoCo's kinematics the constraints hold to round-off and the
    kinetic energy (armature included) is MuJoCo's; every body's frame, its rate and its
    acceleration are those of the joint coordinates (accelerations: measured 3.4e-15 of
    their scale 14; with the motor reversed in absolute coordinates, 0.16)."""
    controls = {"reach": lambda t, q, qd, p: 0.7}
    joint, absolute = (
        jaxmbs.io.from_mjcf(SLIDING, controls=controls, coordinates=c)
        for c in ("joints", "absolute")
    )
    groups = dict(absolute.mechanism.constraint_groups)
    assert [len(groups[g]) for g in ("bx+by+bz", "tr+tx+ty")] == [3, 3]
    assert absolute.mechanism.structure.dof == 6
    qpos, qvel = _random_state(joint, 3, 0.3)
    _assert_on_mujocos_kinematics(SLIDING, absolute, qpos, qvel)
    assert _assert_same_accelerations(joint, absolute, qpos, qvel) <= 1e-13
    # the turning slide's offset is read negated (the block's point from the tray's): a sign
    # error there would reverse its motor, which moves the accelerations by O(1)
    change = _acceleration_change(absolute, qpos, qvel, {"reach.gain": -1.0})
    print(f"the motor reversed: accelerations move by {change:.2g} of their scale")
    assert change >= 0.1


def test_planar_and_crossed_slides_hold_on_mujocos_kinematics():
    """Two slides then a hinge normal to them (a puck, slides fixed in the parent) and on it
    a hinge then a slide across it (4 rows): on MuJoCo's kinematics at a random state the
    constraints hold to round-off and the kinetic energy is MuJoCo's, and the potential
    energy, springs with their references on every coordinate included, is the joint
    coordinates' (measured 8.9e-16 of 6.2 J; with the turning slide's offset not negated,
    0.11 J): each coordinate is read with its sign."""
    xml = """
    <mujoco><worldbody>
      <body name="puck" pos="0 0 1" euler="10 20 30">
        <joint name="px" type="slide" axis="1 0 0" stiffness="2" springref="0.1"/>
        <joint name="pz" type="slide" axis="0 0 1" stiffness="3" springref="-0.05"/>
        <joint name="pr" axis="0 1 0" pos="0.02 0 0.01" stiffness="1" springref="10"
               armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0.03" size="0.03"/>
        <body name="arm" pos="0.2 0 0.03" euler="0 0 15">
          <joint name="ar" axis="0 0 1" pos="0.01 0.02 0" stiffness="0.5" springref="-20"/>
          <joint name="as" type="slide" axis="1 0 0" stiffness="4" springref="0.03"
                 armature="0.03"/>
          <geom type="capsule" fromto="0 0 0 0.15 0.02 0" size="0.02"/>
        </body>
      </body>
    </worldbody></mujoco>"""
    joint, absolute = _pair(xml)
    groups = dict(absolute.mechanism.constraint_groups)
    assert [len(groups[g]) for g in ("px+pz+pr", "ar+as")] == [3, 4]
    assert absolute.mechanism.structure.dof == 5
    qpos, qvel = _random_state(joint, 5, 0.4)
    _assert_on_mujocos_kinematics(xml, absolute, qpos, qvel)
    energies = []
    for imported in (joint, absolute):
        q, _ = imported.from_qpos(qpos, qvel)
        mech = imported.mechanism
        energies.append(float(jax.jit(mech.potential_energy)(q, mech.params)))
    print(f"potential energy {abs(energies[1] - energies[0]):.2g} of {abs(energies[0]):.2g} J")
    assert abs(energies[1] - energies[0]) <= 1e-13 * abs(energies[0])


#: A hinge to the world carrying a ball joint, and a free body: the ball and the free joint
#: with damping and armature (on MuJoCo's `qvel`: ω in the body's frame, the free body's
#: origin velocity in the world's).
ROTORS = """
<mujoco>
  <option gravity="0.5 -1 -9.81"/>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="lower" pos="0.3 0 0" euler="10 20 30">
        <joint name="elbow" type="ball" pos="0.01 0 0" damping="0.2" armature="0.01"/>
        <geom type="capsule" fromto="0 0 0 0.25 0.05 0" size="0.025"/>
      </body>
    </body>
    <body name="drone" pos="0.5 0.5 1" euler="5 10 15">
      <joint name="float" type="free" damping="0.3" armature="0.02"/>
      <geom type="box" size="0.1 0.05 0.02" pos="0.02 0.01 0"/>
    </body>
  </worldbody>
</mujoco>
"""


def test_ball_and_free_joint_dampers_and_armature_as_in_joint_coordinates():
    """A ball's and a free joint's damping (a generalized force from Rayleigh's dissipation
    function of their `qvel`) and armature (its kinetic energy) in absolute coordinates: at
    a random moving state the kinetic energy is MuJoCo's (armature included) and every
    body's frame, its rate and its acceleration are those of the joint coordinates
    (accelerations: measured 6.3e-16 of their scale 73; with the two dampers doubled in
    absolute coordinates, 0.092). `to_qpos` gives MuJoCo's qpos back along a sequence of
    states whose hinge turns on to 7 rad, unwrapped (measured 4.4e-16)."""
    joint, absolute = _pair(ROTORS)
    qpos, qvel = _random_state(joint, 8, 0.3, speed=2.0)
    _assert_on_mujocos_kinematics(ROTORS, absolute, qpos, qvel)
    assert _assert_same_accelerations(joint, absolute, qpos, qvel) <= 1e-13
    params = absolute.mechanism.params
    doubled = {k: 2 * params[k] for k in ("elbow.damping", "float.damping")}
    change = _acceleration_change(absolute, qpos, qvel, doubled)
    print(f"the ball's and free joint's dampers doubled: accelerations move by {change:.2g}")
    assert change >= 0.01
    # to_qpos: MuJoCo's qpos read back, the shoulder turning on past π and 2π (steps < π)
    states = np.tile(qpos, (4, 1))
    states[:, 0] = (0.0, 2.5, 5.0, 7.0)
    back = np.array(absolute.to_qpos(jnp.stack([absolute.from_qpos(x)[0] for x in states])))
    for w in (1, 8):  # a quaternion and its negative are one rotation
        back[:, w : w + 4] *= np.sign(back[:, w : w + 1] * states[:, w : w + 1])
    gap = float(np.max(np.abs(back - states)))
    print(f"to_qpos: {gap:.2g} from MuJoCo's qpos, the hinge at up to 7 rad")
    assert gap <= 1e-13


#: Springs on ball and free joints: a hinge to the world carrying a ball (spring, damper,
#: armature), a ball under a static mount (spring; the mount massless: an absolute import
#: leaves a static body's constant gravity potential out), a free body (spring, damper,
#: armature; its geom off its frame's origin); contacts off, so `mj_forward` is the dynamics.
SPRUNG = """
<mujoco>
  <option gravity="0.5 -1 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="upper" pos="0 0 1">
      <joint name="shoulder" axis="0 1 0" damping="0.1" stiffness="1" springref="20"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="lower" pos="0.3 0 0" euler="10 20 30">
        <joint name="elbow" type="ball" pos="0.01 0 0" damping="0.2" armature="0.01"
               stiffness="3"/>
        <geom type="capsule" fromto="0 0 0 0.25 0.05 0" size="0.025"/>
      </body>
    </body>
    <body name="mount" pos="0 -0.3 1" euler="20 0 10">
      <body name="pendant" pos="0.05 0 0" euler="0 30 0">
        <joint name="neck" type="ball" pos="0 0 0.05" stiffness="2"/>
        <geom type="box" size="0.04 0.03 0.15" pos="0 0.01 -0.1"/>
      </body>
    </body>
    <body name="drone" pos="0.5 0.5 1" euler="5 10 15">
      <joint name="float" type="free" damping="0.3" armature="0.02" stiffness="2"/>
      <geom type="box" size="0.1 0.05 0.02" pos="0.02 0.01 0"/>
    </body>
  </worldbody>
</mujoco>
"""


def _axis_angle_quaternion(axis, angle: float) -> np.ndarray:
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    return np.concatenate([[np.cos(angle / 2)], np.sin(angle / 2) * axis])


@eqx.filter_jit
def _mujoco_rates(imported, q, qd, params):
    """MuJoCo's (qvel, qacc) read off an import's state (q, q̇) and its q̈ with `params`:
    `to_qvel` and its rate along (q̇, q̈)."""
    qdd = jaxmbs.accelerations(imported.mechanism, q, qd, 0.0, params)
    return jax.jvp(imported.to_qvel, (q, qd), (qd, qdd))


def test_rotation_vector_is_mujocos_subquat():
    """`jaxmbs.io.absolute.rotation_vector` of qb⁻¹ ⊗ qa is MuJoCo's `mju_subQuat(qa, qb)`
    (the shorter rotation, |θ| ≤ π) for random pairs, either quaternion negated, pairs a
    hair's breadth from π apart (w of either sign) and 1e-9 rad apart (measured 8.9e-16; the
    rotation vector of qa ⊗ qb⁻¹, the other order, is up to 5.7 off), and ½|θ|² has a
    finite gradient, zero, where qa = qb."""
    rng = np.random.default_rng(11)
    pairs = []
    for _ in range(60):
        qa, qb = (x / np.linalg.norm(x) for x in rng.standard_normal((2, 4)))
        pairs += [(qa, qb), (-qa, qb), (qa, -qb)]
    for angle in (np.pi - 1e-7, np.pi + 1e-7, 1e-9, -1e-9):
        qb = rng.standard_normal(4)
        qb /= np.linalg.norm(qb)
        turn = _axis_angle_quaternion(rng.standard_normal(3), angle)
        qa = np.zeros(4)
        mujoco.mju_mulQuat(qa, qb, turn)
        pairs += [(qa, qb), (-qa, qb)]
    ours, theirs, swapped = [], [], []
    for qa, qb in pairs:
        res, d, e = np.zeros(3), np.zeros(4), np.zeros(4)
        mujoco.mju_subQuat(res, qa, qb)
        mujoco.mju_mulQuat(d, qb * np.array([1.0, -1, -1, -1]), qa)
        mujoco.mju_mulQuat(e, qa, qb * np.array([1.0, -1, -1, -1]))
        ours.append(d)
        swapped.append(e)
        theirs.append(res)
    vectors = jax.jit(jax.vmap(rotation_vector))
    gap = float(np.max(np.abs(vectors(jnp.asarray(np.array(ours))) - np.array(theirs))))
    other = float(np.max(np.abs(vectors(jnp.asarray(np.array(swapped))) - np.array(theirs))))
    print(f"rotation vectors {gap:.2g} from mju_subQuat's (the other order: {other:.2g})")
    assert gap <= 1e-14
    assert other >= 0.1
    identity = jnp.array([1.0, 0.0, 0.0, 0.0])
    grad = jax.grad(lambda d: 0.5 * jnp.sum(rotation_vector(d) ** 2))(identity)
    assert np.all(np.isfinite(np.asarray(grad))) and float(jnp.max(jnp.abs(grad))) <= 1e-15


def test_ball_and_free_joint_springs_are_mujocos():
    """MuJoCo's ball and free joint springs in absolute coordinates (a force element of the
    rotation vector of qpos_spring⁻¹ ⊗ quat, the free joint's x − x_ref before it), with
    springrefs other than qpos0 (the elbow's turned 2.5 rad, the neck's 1 rad, in MuJoCo's
    `qpos_spring` and in both imports' parameters; at the state they are 2.0 and 1.4 rad
    off, the free body 0.8 rad). At a random moving state: the potential energy is MuJoCo's
    `mj_energyPos` (gravity and springs) in both imports (measured 0 of 45 J, the springs'
    share 9 J); MuJoCo's qacc, read off the absolute state's q̈ by the rate of `to_qvel`,
    equals `mj_forward`'s (measured 2.8e-13 of its scale 380; the joint coordinates'
    3.4e-13); every body's frame, its rate and its acceleration are those of the joint
    coordinates (accelerations 8.6e-16 of their scale). One spring negated in absolute
    coordinates moves qacc by 2.1 (elbow), 0.78 (neck), 0.31 (free body) of its scale."""
    joint, absolute = _pair(SPRUNG)
    assert {type(e).__name__ for e in absolute.mechanism.elements.elements} == {
        "RotationalSpringDamper",
        "_QuaternionSpring",
    }
    references = {
        "elbow": _axis_angle_quaternion([1.0, 2.0, -0.5], 2.5),
        "neck": _axis_angle_quaternion([0.3, -1.0, 0.2], 1.0),
    }
    model = mujoco.MjModel.from_xml_string(SPRUNG)
    model.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    changes = {}
    for name, r in references.items():
        j = mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_JOINT, name)
        model.qpos_spring[model.jnt_qposadr[j] : model.jnt_qposadr[j] + 4] = r
        changes[f"{name}.springref"] = jnp.asarray(r)
    qpos, qvel = _random_state(joint, 2, 0.4, speed=2.0)
    data = mujoco.MjData(model)
    data.qpos[:], data.qvel[:] = qpos, qvel
    mujoco.mj_forward(model, data)
    scale = float(np.max(np.abs(data.qacc)))
    stiffness = {k: joint.mechanism.params[f"{k}.stiffness"] for k in ("elbow", "neck", "float")}
    for imported in (joint, absolute):
        q, qd = imported.from_qpos(qpos, qvel)
        params = jax.tree.map(jnp.asarray, {**imported.mechanism.params, **changes})
        energy = jax.jit(imported.mechanism.potential_energy)
        V = float(energy(q, params))
        unsprung = {**params, **{f"{k}.stiffness": jnp.asarray(0.0) for k in stiffness}}
        springs = V - float(energy(q, unsprung))
        print(f"{imported.coordinates}: V {abs(V - data.energy[0]):.2g} of {V:.2g} J")
        assert abs(V - data.energy[0]) <= 1e-13 * abs(data.energy[0])
        assert springs >= 1.0  # the springs' share, far above the tolerance
        qvel_back, qacc = _mujoco_rates(imported, q, qd, params)
        gap = float(np.max(np.abs(qacc - data.qacc)))
        print(f"{imported.coordinates}: qacc {gap:.2g} of {scale:.2g}, springs {springs:.2g} J")
        assert np.max(np.abs(qvel_back - qvel)) <= 1e-14 * np.max(np.abs(qvel))
        assert gap <= 1e-12 * scale
    assert _assert_same_accelerations(joint, absolute, qpos, qvel, changes=changes) <= 1e-13
    q, qd = absolute.from_qpos(qpos, qvel)
    params = jax.tree.map(jnp.asarray, {**absolute.mechanism.params, **changes})
    for name, k in stiffness.items():
        negated = {**params, f"{name}.stiffness": jnp.asarray(-k)}
        change = float(np.max(np.abs(_mujoco_rates(absolute, q, qd, negated)[1] - data.qacc)))
        print(f"{name}'s spring negated: qacc moves by {change / scale:.2g} of its scale")
        assert change >= 0.01 * scale


def test_armature_is_the_kinetic_energy_of_the_joint_rate():
    """cartpole.xml: the cart's slide has armature (and a damper), the pole's hinge a spring
    and a damper. At the keyframe the kinetic energy is MuJoCo's to round-off (0; the
    armature's share of it: 0.043), the constraints hold on MuJoCo's kinematics to 2.2e-16,
    and every body's frame, its rate and its acceleration are those of the joint coordinates
    (accelerations: measured 7.2e-16 of their scale 6.1; with the slide's damper doubled in
    absolute coordinates, 0.26). (A 0.5 s run of both, 9.1e-12 apart, took 24 s.)"""
    joint, absolute = (
        jaxmbs.io.from_mjcf(CARTPOLE, keyframe="start", coordinates=c)
        for c in ("joints", "absolute")
    )
    xml = CARTPOLE.read_text()
    model, data = _mujoco_state(xml, *_keyframe(CARTPOLE))
    qpos, qvel = data.qpos.copy(), data.qvel.copy()
    assert 0.5 * model.dof_armature[0] * qvel[0] ** 2 >= 0.04 * data.energy[1]
    _assert_on_mujocos_kinematics(xml, absolute, qpos, qvel)
    _assert_same_accelerations(joint, absolute, qpos, qvel)


#: A cart on an inclined rail, a pole on it (a hinge with a reference angle), a wrist at the
#: pole's tip (a universal joint): a geared, clamped motor on the slide, a position servo
#: (kp, kv, a force range) on the hinge and a motor of negative gear on the universal's
#: second hinge (whose angle is read with a sign, `jaxmbs.io.absolute`).
ACTUATED = """
<mujoco>
  <option gravity="0.5 -1 -9.81"/>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0.1" damping="0.1"/>
      <geom type="box" size="0.2 0.1 0.05" mass="1"/>
      <body name="pole" euler="0 10 0">
        <joint name="hinge" axis="0 1 0" pos="0 0 0.02" ref="5"/>
        <geom type="capsule" fromto="0 0 0 0.001 0 0.6" size="0.03" mass="0.3"/>
        <body name="wrist" pos="0 0 0.6">
          <joint name="u1" axis="1 0 0"/>
          <joint name="u2" axis="0 1 0"/>
          <geom type="capsule" fromto="0 0 0 0.2 0 0.05" size="0.02"/>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slider" gear="2" ctrlrange="-0.2 0.2" ctrllimited="true"/>
    <position name="servo" joint="hinge" kp="5" kv="0.5" forcerange="-1 1"
              forcelimited="true"/>
    <motor name="twist" joint="u2" gear="-1.5"/>
  </actuator>
</mujoco>
"""


def test_actuators_drive_the_bodies_as_in_joint_coordinates():
    """Actuators in absolute coordinates: each one's generalized force pulled back from its
    joint's coordinate. At a moving state at t = 0.3, with a Profile (push, past its
    control range), a constant (servo) and a time ramp (twist) as controls, every body's
    frame, its rate and its acceleration are those of the joint coordinates (accelerations:
    measured 5.6e-14 of their scale 95). With a motor's gain negated in the absolute model
    alone (as a reversed gear would), the bodies' accelerations ẍ move by 0.11 (the slide's
    motor) and 0.84 (the universal's hinge's) of their largest: the check sees a sign
    error."""
    controls = {
        "push": jaxmbs.Profile(np.linspace(0.0, 1.0, 5), np.array([0.1, 0.3, 0.1, -0.1, 0.0])),
        "servo": lambda t, q, qd, p: 0.4 + 0.0 * t,
        "twist": lambda t, q, qd, p: 0.2 + t,
    }
    joint, absolute = (
        jaxmbs.io.from_mjcf(ACTUATED, controls=controls, coordinates=c)
        for c in ("joints", "absolute")
    )
    assert absolute.report.left_out_names("actuator") == ()  # all three modelled
    # slider, hinge (its qpos 0.3 against the servo's target 0.4: no force clamp), u1, u2
    qpos, qvel = np.array([0.1, 0.3, -0.4, 0.6]), np.array([0.5, -0.2, 1.1, -0.7])
    assert _assert_same_accelerations(joint, absolute, qpos, qvel, t=0.3) <= 1e-13
    for motor, least in (("push", 0.05), ("twist", 0.5)):
        negated = {f"{motor}.gain": -absolute.mechanism.params[f"{motor}.gain"]}
        change = _acceleration_change(absolute, qpos, qvel, negated, t=0.3)
        print(f"{motor}'s gain negated: accelerations move by {change:.2g} of their scale")
        assert change >= least


def test_a_hinge_spring_is_mujocos_within_pi_of_qpos0():
    """The documented limit of a hinge's spring in absolute coordinates: its angle is read
    off the bodies' poses, the same at q and q + 2π, so it holds in (q_ref − π, q_ref + π]
    (q_ref = `qpos0`, here a `ref` of 30°, the spring's rest at 100°). Just inside the
    window the potential energy is MuJoCo's `mj_energyPos`; just past it, it is MuJoCo's
    at q − 2π (measured 0 and 0, of 11 and 19 J), 2π k (π − (q − q_spring)) = 7.6 J from
    MuJoCo's at q (7.7 J, 2π k |q_spring − q_ref|, as q → q_ref + π), and the spring's
    torque has jumped by 2π k less the step across."""
    xml = """
    <mujoco><worldbody><body name="arm" pos="0 0 1">
      <joint name="h" axis="0 1 0" ref="30" stiffness="1" springref="100"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
    </body></worldbody></mujoco>"""
    absolute = jaxmbs.io.from_mjcf(xml, coordinates="absolute")
    model = mujoco.MjModel.from_xml_string(xml)
    model.opt.enableflags |= int(mujoco.mjtEnableBit.mjENBL_ENERGY)
    data = mujoco.MjData(model)
    q_ref, q_spring = model.qpos0[0], model.qpos_spring[0]

    def mujocos(qpos: float) -> float:
        data.qpos[0] = qpos
        mujoco.mj_forward(model, data)
        return float(data.energy[0])

    mech = absolute.mechanism
    energy = jax.jit(lambda q: mech.potential_energy(q, mech.params))
    torque = jax.jit(lambda q: mech.elements.forces(0.0, q, jnp.zeros_like(q), mech.params)["h"])
    inside, past = q_ref + np.pi - 0.01, q_ref + np.pi + 0.01
    (qi, _), (qp, _) = (absolute.from_qpos(np.array([x])) for x in (inside, past))
    gaps = (
        abs(float(energy(qi)) - mujocos(inside)),
        abs(float(energy(qp)) - mujocos(past - 2 * np.pi)),
    )
    off = abs(float(energy(qp)) - mujocos(past))
    jump = abs(float(torque(qp)) - float(torque(qi)))
    print(
        f"V inside {gaps[0]:.2g}, past (MuJoCo's at q − 2π) {gaps[1]:.2g}; off {off:.2g} J, "
        f"torque jump {jump:.2g}"
    )
    assert max(gaps) <= 1e-13 * abs(mujocos(inside))
    k = float(model.jnt_stiffness[0])  # ½ k ((x − 2π)² − x²) at x = past − q_spring
    np.testing.assert_allclose(off, 2 * np.pi * k * (np.pi - (past - q_spring)), rtol=1e-12)
    np.testing.assert_allclose(jump, k * (2 * np.pi - (past - inside)), rtol=1e-12)


def test_to_qvel_reads_mujocos_qvel_off_the_bodies(composed):
    """`to_qvel` in absolute coordinates: at a random MuJoCo state of the actuated cart (a
    slide on an inclined rail, a hinge with a `ref`, a universal joint whose second angle is
    read with a sign) and of the slides (three on a block, a hinge then two turning slides
    on a tray), `to_qvel(from_qpos(qpos, qvel))` is qvel (measured 4.4e-16 in both, qvel's
    components each at least 0.18 in size: a rate of the wrong sign or in the wrong frame
    would be that far off), one state or a batch; a ball's and a free joint's qvel and its
    rate, qacc, are checked against MuJoCo in `test_ball_and_free_joint_springs_are_mujocos`.
    A three-hinge Spherical's hinges have no single rates: refused."""
    for xml in (ACTUATED, SLIDING):
        absolute = jaxmbs.io.from_mjcf(xml, coordinates="absolute")
        rng = np.random.default_rng(6)
        nq, nv = absolute.tree.nq, absolute.tree.nv
        qpos = np.asarray(absolute.to_qpos(absolute.q0)) + 0.3 * rng.standard_normal(nq)
        qvel = rng.standard_normal((2, nv))
        assert np.min(np.abs(qvel)) >= 0.1  # every rate counts
        q, qd = zip(*(absolute.from_qpos(qpos, v) for v in qvel), strict=True)
        back = np.asarray(absolute.to_qvel(jnp.stack(q), jnp.stack(qd)))
        assert back.shape == (2, nv)
        gap = float(np.max(np.abs(back - qvel)))
        print(f"to_qvel: {gap:.2g} from MuJoCo's qvel")
        assert gap <= 1e-14 * np.max(np.abs(qvel))
        np.testing.assert_allclose(absolute.to_qvel(q[0], qd[0]), back[0], rtol=0, atol=1e-15)
    with pytest.raises(ValueError, match="to_qvel: the three hinges composed into a Spherical"):
        composed[1].to_qvel(composed[1].q0, composed[1].qd0)


def _keyframe(path: Path) -> tuple[np.ndarray, np.ndarray]:
    model = mujoco.MjModel.from_xml_path(str(path))
    return model.key_qpos[0], model.key_qvel[0]


#: Mixed coordinates (`jaxmbs.io.absolute._MixedJoint`), checked against MuJoCo: a ball then an
#: oblique slide (springs, dampers, armature on both), on it two oblique slides with a hinge
#: between them (springs with references, a damper, armature, a `ref`).
MIXED = """
<mujoco>
  <option gravity="0.5 -1 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="arm" pos="0 0 1" euler="10 20 30">
      <joint name="b" type="ball" pos="0.02 0 0.01" damping="0.1" stiffness="2" armature="0.01"/>
      <joint name="s" type="slide" axis="1 0.2 0" damping="0.3" stiffness="3" springref="0.1"
             armature="0.02"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="fore" pos="0.3 0 0" euler="0 15 0">
        <joint name="s1" type="slide" axis="1 0 0.3" armature="0.03"/>
        <joint name="h" axis="0 1 0.2" pos="0.01 0.02 0" stiffness="1" springref="30"
               damping="0.05" ref="10"/>
        <joint name="s2" type="slide" axis="1 1 0" stiffness="2" springref="-0.05"/>
        <geom type="capsule" fromto="0 0 0 0.2 0.05 0" size="0.02"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _mujoco_qacc(xml: str, qpos, qvel) -> np.ndarray:
    return _mujoco_state(xml, qpos, qvel)[1].qacc.copy()


def test_a_ball_with_a_slide_and_a_hinge_between_oblique_slides_are_mujocos():
    """Mixed coordinates: each body keeps its centre and Euler parameters, its joints' qpos
    (the ball's quaternion, the slides' and the hinge's values) are coordinates too, and one
    group of rows (6, and a ball's normalisation) makes the body's frame the parent's composed
    with the joints. At a random moving state, with the hinge turned 4 rad past `qpos0` (its
    spring past the π window of a hinge read off the bodies): `mj_forward`'s qacc is the rate
    of `to_qvel` (measured 1.2e-16 of its scale 2.0e3; MuJoCo itself with the fore slide
    s2's axis turned by 1e-3 rad moves by 6.5e-4 of it, with the ball's spring negated by
    0.15), `to_qvel` and `to_qpos` give MuJoCo's state back, the potential energy is
    MuJoCo's `mj_energyPos` (measured 0 of 18 J, the springs' share 5.3 J), on MuJoCo's
    kinematics the rows hold to 4.4e-16 and the kinetic energy is MuJoCo's to 5.1e-16, and
    every body's frame, its rate and its acceleration are those of the joint coordinates
    (measured 2.2e-15 of their scale 1.6e3)."""
    joint, absolute = _pair(MIXED)
    groups = dict(absolute.mechanism.constraint_groups)
    assert {g: len(groups[g]) for g in ("b+s", "s1+h+s2")} == {"b+s": 7, "s1+h+s2": 6}
    joints = ("b.qw", "b.qx", "b.qy", "b.qz", "s", "s1", "h", "s2")
    assert absolute.mechanism.coordinate_names[14:] == joints
    assert absolute.mechanism.structure.dof == 7
    qpos, qvel = _random_state(joint, 3, 0.4)
    qpos = qpos.copy()
    qpos[joint.tree.joints[3].qadr] += 4.0  # the hinge h
    model, data = _mujoco_state(MIXED, qpos, qvel)
    q, qd = absolute.from_qpos(qpos, qvel)
    params = absolute.mechanism.params
    qvel_back, qacc = _mujoco_rates(absolute, q, qd, params)
    scale = float(np.max(np.abs(data.qacc)))
    gap = float(np.max(np.abs(qacc - data.qacc)))
    print(f"qacc {gap:.2g} of {scale:.2g}")
    assert gap <= 1e-13 * scale
    np.testing.assert_allclose(qvel_back, qvel, rtol=0, atol=1e-14 * np.max(np.abs(qvel)))
    back = np.array(absolute.to_qpos(q))
    back[:4] *= np.sign(back[0] * qpos[0])  # a quaternion and its negative: one rotation
    np.testing.assert_allclose(back, qpos, rtol=0, atol=1e-14)
    V = float(jax.jit(absolute.mechanism.potential_energy)(q, params))
    unsprung = {**params, **{f"{k}.stiffness": 0.0 for k in ("b", "s", "h", "s2")}}
    springs = V - float(jax.jit(absolute.mechanism.potential_energy)(q, unsprung))
    print(f"V {abs(V - data.energy[0]):.2g} of {V:.2g} J, springs {springs:.2g} J")
    assert abs(V - data.energy[0]) <= 1e-14 * abs(data.energy[0])
    assert springs >= 1.0
    _assert_on_mujocos_kinematics(MIXED, absolute, qpos, qvel)
    assert _assert_same_accelerations(joint, absolute, qpos, qvel) <= 1e-13
    # what MuJoCo itself makes of an axis turned by a milliradian, a spring negated
    turned = MIXED.replace('axis="1 1 0"', 'axis="1 1.002 0"')
    negated = MIXED.replace('stiffness="2" armature', 'stiffness="-2" armature')
    for what, xml in (("s2's axis turned", turned), ("the ball's spring negated", negated)):
        change = float(np.max(np.abs(_mujoco_qacc(xml, qpos, qvel) - data.qacc)))
        print(f"MuJoCo with {what}: qacc moves by {change / scale:.2g} of its scale")
        assert change >= 1e-5 * scale


#: Every other kind of combination in mixed coordinates: two hinges, neither orthogonal nor at
#: one anchor (a spring with a reference, armature, a damper); on them a hinge then a ball
#: (springs, a position servo on the hinge; MuJoCo refuses a ball followed by a rotation);
#: three hinges at one anchor with a damper and a motor (a gimbal something acts on: mixed,
#: not a Spherical); a slide then a ball; a hinge and a slide across it, not normal (a joint
#: equality ties the slide to the first hinge).
COMBINED = """
<mujoco>
  <option gravity="0.5 -1 -9.81"/>
  <worldbody>
    <body name="fork" pos="0 0 1" euler="10 0 20">
      <joint name="k1" axis="1 0 0" pos="0 0 0.05" stiffness="1" springref="30" armature="0.02"/>
      <joint name="k2" axis="1 1 0" pos="0.02 0 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.3 0 0" size="0.03"/>
      <body name="wrist" pos="0.3 0 0" euler="20 0 0">
        <joint name="wh" axis="0 0 1" pos="0.02 0.01 0" stiffness="0.5" ref="20"/>
        <joint name="w" type="ball" pos="0.01 0 0" stiffness="2" damping="0.1"/>
        <geom type="box" size="0.05 0.04 0.03" pos="0.05 0 0"/>
      </body>
    </body>
    <body name="gimbal" pos="0.6 0 1">
      <joint name="g1" axis="1 0 0"/>
      <joint name="g2" axis="0 1 0" damping="0.2"/>
      <joint name="g3" axis="0 0 1"/>
      <geom type="box" size="0.1 0.05 0.02" pos="0.05 0 0"/>
    </body>
    <body name="rail" pos="-0.5 0 1" euler="0 10 0">
      <joint name="rs" type="slide" axis="1 0 0.3" stiffness="3" armature="0.05"/>
      <joint name="rb" type="ball" pos="0 0.02 0" armature="0.01"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0.05" size="0.02"/>
    </body>
    <body name="drill" pos="0 0.5 1">
      <joint name="dh" axis="1 0 0" pos="0 0.02 0"/>
      <joint name="ds" type="slide" axis="1 1 0"/>
      <geom type="capsule" fromto="0 0 0 0.2 0 0" size="0.02"/>
    </body>
  </worldbody>
  <equality><joint name="tie" joint1="ds" joint2="k1" polycoef="0 0.1 0 0 0"/></equality>
  <actuator>
    <motor name="spin" joint="g3" gear="2"/>
    <position name="servo" joint="wh" kp="3" kv="0.2"/>
  </actuator>
</mujoco>
"""


def test_every_combination_of_joints_on_a_body_moves_as_the_joint_coordinates():
    """Two skew hinges at two anchors, a hinge then a ball, a gimbal with a damper and a motor
    (mixed: its hinges have coordinates), a slide then a ball, a hinge and a slide across it
    not normal to it, tied to a hinge by a joint equality: at a random moving state with the
    inputs on, the first hinge 4 rad past `qpos0`, every body's frame, its rate and its
    acceleration are those of the joint coordinates (measured 1.1e-15 of their scale 3.4e3),
    the total energy ½ q̇ᵀMq̇ + V the joint coordinates' (measured 0 of 37 J, the springs'
    share 7 J), `to_qvel` is MuJoCo's qvel; on MuJoCo's kinematics the rows hold to 3.3e-16
    and the kinetic energy is MuJoCo's to 4.2e-16. In the absolute model alone, with k1's
    spring negated or the servo's gain the bodies' accelerations move by 0.11 and 2.3 of
    their scale, with the gimbal's motor reversed its R̈ by 0.064."""
    controls = {"spin": lambda t, q, qd, p: 0.3, "servo": lambda t, q, qd, p: 0.5}
    joint, absolute = (
        jaxmbs.io.from_mjcf(COMBINED, controls=controls, coordinates=c)
        for c in ("joints", "absolute")
    )
    groups = dict(absolute.mechanism.constraint_groups)
    sizes = {g: len(groups[g]) for g in ("k1+k2", "wh+w", "g1+g2+g3", "rs+rb", "dh+ds", "tie")}
    assert sizes == {"k1+k2": 6, "wh+w": 7, "g1+g2+g3": 6, "rs+rb": 7, "dh+ds": 6, "tie": 1}
    assert absolute.mechanism.structure.dof == 14  # 2 + 4 + 3 + 4 + 2 − 1
    qpos, qvel = _random_state(joint, 12, 0.3)
    qpos = qpos.copy()
    qpos[0] += 4.0  # k1
    ds = next(j for j in joint.tree.joints if j.name == "ds")  # the tie held: ds = 0.1 k1
    qpos[ds.qadr], qvel[ds.vadr] = 0.1 * qpos[0], 0.1 * qvel[0]
    _assert_on_mujocos_kinematics(COMBINED, absolute, qpos, qvel)
    assert _assert_same_accelerations(joint, absolute, qpos, qvel) <= 1e-13
    energy = eqx.filter_jit(lambda m, q, qd, p: m.energy(q, qd, p))
    energies = []
    for imported in (joint, absolute):
        q, qd = imported.from_qpos(qpos, qvel)
        energies.append(float(energy(imported.mechanism, q, qd, imported.mechanism.params)))
    params = absolute.mechanism.params
    zero = jnp.asarray(0.0)
    unsprung = {**params, **{f"{k}.stiffness": zero for k in ("k1", "w", "wh", "rs")}}
    springs = energies[1] - float(energy(absolute.mechanism, q, qd, unsprung))
    print(
        f"energy {abs(energies[1] - energies[0]):.2g} of {energies[0]:.2g} J, springs {springs:.2g}"
    )
    assert abs(energies[1] - energies[0]) <= 1e-13 * abs(energies[0])
    assert springs >= 1.0
    back = np.asarray(absolute.to_qvel(q, qd))
    np.testing.assert_allclose(back, qvel, rtol=0, atol=1e-14 * np.max(np.abs(qvel)))
    for changes in (
        {"k1.stiffness": -params["k1.stiffness"]},
        {"servo.gain": -params["servo.gain"]},
    ):
        change = _acceleration_change(absolute, qpos, qvel, changes)
        print(f"{changes}: accelerations move by {change:.2g} of their scale")
        assert change >= 0.01
    # the gimbal turns about its frame's origin: its motor shows in R̈
    turning = [
        _frame_accelerations(absolute, qpos, qvel, changes=c)[5] for c in ({}, {"spin.gain": -1.0})
    ]
    change = float(np.max(np.abs(turning[1] - turning[0])) / np.max(np.abs(turning[0])))
    print(f"the gimbal's motor reversed: R̈ moves by {change:.2g} of its scale")
    assert change >= 0.01


@pytest.mark.parametrize(
    "xml, refused",
    [
        (  # MuJoCo refuses a free joint with others (more than 6 dofs on one body)
            """<mujoco><worldbody><body name="a"><freejoint/><joint name="h" axis="1 0 0"/>
            <geom size="0.1"/></body></worldbody></mujoco>""",
            "more than 6 dofs in body 'a'",
        ),
        (  # a body without joints that an equality refers to is not fused
            """<mujoco><worldbody><body name="a"><joint name="h" axis="1 0 0"/>
            <geom size="0.1"/><body name="stuck" pos="0.2 0 0"><geom size="0.1"/></body>
            </body><body name="b" pos="0 1 0"><joint name="k" axis="1 0 0"/><geom size="0.1"/>
            </body></worldbody><equality><connect body1="stuck" body2="b" anchor="0 0 0"/>
            </equality></mujoco>""",
            "body 'stuck' has none, and MuJoCo's compiler does not fuse it into its parent",
        ),
    ],
)
def test_what_absolute_coordinates_refuse(xml, refused):
    with pytest.raises(ValueError, match=refused):
        jaxmbs.io.from_mjcf(xml, coordinates="absolute")


def test_weld_rows_are_mujocos_on_sites_and_with_a_given_relative_pose():
    """A weld of a free box to the world on sites and one of two free bodies with a given
    `relpose` (not held at qpos0): at a random state the Fixed joint's rows equal the joint
    coordinates' weld rows (MuJoCo's p₁ − p₂ and vee(½(E − Eᵀ))): measured 2.2e-16 of 0.84."""
    xml = """
    <mujoco><worldbody>
      <site name="fixed" pos="0.3 0.1 1" euler="10 20 30"/>
      <body name="box" pos="0.3 0.1 1" euler="10 20 30"><freejoint name="float"/>
        <geom type="box" size="0.1 0.2 0.3" pos="0.05 0 0"/><site name="corner"/></body>
      <body name="p" pos="1 0 0" euler="0 40 0"><freejoint name="fp"/>
        <geom type="box" size="0.1 0.05 0.02" pos="0 0.02 0"/></body>
      <body name="r" pos="1 0.5 0"><freejoint name="fr"/>
        <geom type="capsule" fromto="0 0 0 0.2 0 0.1" size="0.02"/></body>
    </worldbody><equality>
      <weld name="glue" site1="fixed" site2="corner"/>
      <weld name="pair" body1="p" body2="r" anchor="0.1 0 0" relpose="0 0.3 0.1 1 0.2 0 0"/>
    </equality></mujoco>"""
    joint, absolute = _pair(xml)
    assert absolute.mechanism.structure.dof == 6  # the box held, the pair one free body
    rng = np.random.default_rng(7)
    qpos = np.asarray(joint.q0) + 0.2 * rng.standard_normal(joint.tree.nq)
    qpos = np.asarray(joint.to_qpos(qpos))
    qa, _ = absolute.from_qpos(qpos)
    rows = {}
    for imported, q in ((joint, jnp.asarray(qpos)), (absolute, qa)):
        mech = imported.mechanism
        residual = eqx.filter_jit(lambda m, q_: m.constraints(0.0, q_, m.params))(mech, q)
        groups = dict(mech.constraint_groups)
        rows[imported.coordinates] = np.concatenate(
            [residual[np.array(groups[g])] for g in ("glue", "pair")]
        )
    gap = np.max(np.abs(rows["absolute"] - rows["joints"]))
    print(f"weld rows {gap:.2g} of {np.max(np.abs(rows['joints'])):.2g}")
    assert np.max(np.abs(rows["joints"])) > 0.05
    np.testing.assert_allclose(rows["absolute"], rows["joints"], rtol=0, atol=1e-15)


#: Bodies without joints under moving ones: a tool bolted (offset, turned) to a forearm, with
#: a hinged finger under it, and a weight on a slider.
BOLTED = """
<mujoco>
  <worldbody>
    <body name="arm" pos="0 0 1">
      <joint name="shoulder" axis="0 1 0" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.04"/>
      <body name="tool" pos="0.4 0 0" euler="0 30 10">
        <geom type="box" size="0.08 0.03 0.02" pos="0.06 0.01 0"/>
        <body name="finger" pos="0.12 0 0">
          <joint name="knuckle" axis="0 0 1" stiffness="2"/>
          <geom type="capsule" fromto="0 0 0 0.1 0 0" size="0.015"/>
        </body>
      </body>
    </body>
    <body name="carriage" pos="0 0.5 1">
      <joint name="rail" type="slide" axis="1 0 0"/>
      <geom type="box" size="0.05 0.05 0.05"/>
      <body name="weight" pos="0 0 -0.2"><geom type="sphere" size="0.05"/></body>
    </body>
  </worldbody>
</mujoco>
"""


def test_bodies_without_joints_under_moving_ones_are_fused_into_their_parents():
    """In absolute coordinates the bolted tool and the weight are fused into their parents by
    MuJoCo's compiler (the report says so; the joint coordinates keep them): at a random
    moving state `mj_forward`'s qacc of the file as written is the rate of `to_qvel`
    (measured 2.0e-15 of its scale 4.1e3, the light finger's), and with the tool's geom left
    out MuJoCo's own qacc of the shoulder moves by 0.04 of itself."""
    joint, absolute = _pair(BOLTED)
    assert absolute.absolute_bodies == (1, 2, 3)  # arm+tool, finger, carriage+weight
    note = next(n for n in absolute.report.notes if "fused" in n)
    assert "'tool'" in note and "'weight'" in note
    assert "tool.mass" in joint.mechanism.params and "tool.mass" not in absolute.mechanism.params
    qpos, qvel = _random_state(joint, 5, 0.5, speed=2.0)
    scale = float(np.max(np.abs(_mujoco_qacc(BOLTED, qpos, qvel))))
    q, qd = absolute.from_qpos(qpos, qvel)
    qvel_back, qacc = _mujoco_rates(absolute, q, qd, absolute.mechanism.params)
    gap = float(np.max(np.abs(qacc - _mujoco_qacc(BOLTED, qpos, qvel))))
    print(f"qacc {gap:.2g} of {scale:.2g}")
    assert gap <= 1e-13 * scale
    np.testing.assert_allclose(qvel_back, qvel, rtol=0, atol=1e-14 * np.max(np.abs(qvel)))
    toolless = BOLTED.replace('<geom type="box" size="0.08 0.03 0.02" pos="0.06 0.01 0"/>', "")
    shoulder = _mujoco_qacc(BOLTED, qpos, qvel)[0]
    change = abs(_mujoco_qacc(toolless, qpos, qvel)[0] - shoulder) / abs(shoulder)
    print(f"MuJoCo without the tool's geom: the shoulder's qacc moves by {change:.2g}")
    assert change >= 1e-2


#: A pendulum on a hinge with an armature carrying a slide: small enough to compile fast.
SWING = """
<mujoco>
  <option gravity="0 0 -9.81"/>
  <worldbody>
    <body name="arm" pos="0 0 1" euler="0 10 0">
      <joint name="pivot" axis="0 1 0" armature="0.05" damping="0.1"/>
      <geom type="capsule" fromto="0 0 0 0.4 0 0" size="0.03"/>
      <body name="slider" pos="0.2 0 0">
        <joint name="rail" type="slide" axis="1 0 0" stiffness="20" armature="0.02"/>
        <geom type="box" size="0.04 0.03 0.02" euler="5 10 15"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def test_the_absolute_import_runs_in_float32(float32):
    """With float64 off, `from_mjcf(coordinates="absolute")` imports (the principal frames'
    Euler parameters from float32 rotations, orthogonal to 1e-7) and `simulate` accepts its
    mass matrix (M by autodiff, armature included, symmetric to float32 round-off, not to
    1e-10): over 0.3 s at rtol = atol = 1e-5 the frames follow the joint-coordinate import's
    to 1e-4 of a motion of 0.1 or more and the constraints hold to 1e-5. Before, the import
    raised "euler_parameters needs a 3×3 rotation matrix" and the run "the mass matrix M(q0)
    is not symmetric"."""
    joint, absolute = _pair(SWING)
    assert jnp.asarray(absolute.q0).dtype == jnp.float32
    qpos, qvel = np.asarray(joint.q0, np.float32), np.array([2.0, 0.5], np.float32)
    _assert_same_motion(
        joint, absolute, qpos, qvel, 0.3, tol=1e-5, frames=1e-4, residual_bound=1e-5
    )
