"""MJCF and URDF models imported through MuJoCo's compiler (`jaxmbs.io`, issue 41): trees
against MuJoCo's own RK4, a four-bar closed by `connect` against the hand-built one,
gradients against central differences, the report of what is left out, bad files."""

import os
import subprocess
import sys
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxmbs
from jaxmbs.cli import main
from jaxmbs.models.fourbar import fourbar, initial_state

mujoco = pytest.importorskip("mujoco")
import jaxmbs.io  # noqa: E402  (after the skip: the tests need mujoco)

MJCF = Path(__file__).resolve().parents[1] / "models" / "mjcf"


def mujoco_qpos(path: Path, dt: float, t1: float = 1.0, ctrl=()) -> np.ndarray:
    """MuJoCo's qpos at t1 from the keyframe "start", RK4 with step dt (float64), with
    constant controls."""
    model = mujoco.MjModel.from_xml_path(str(path))
    model.opt.timestep = dt
    model.opt.integrator = mujoco.mjtIntegrator.mjINT_RK4
    data = mujoco.MjData(model)
    mujoco.mj_resetDataKeyframe(model, data, 0)
    data.ctrl[:] = ctrl
    for _ in range(round(t1 / dt)):
        mujoco.mj_step(model, data)
    return data.qpos.copy()


# jaxmbs at rtol = atol = 1e-10 against MuJoCo RK4 after 1 s (measured: jaxmbs − MuJoCo at
# h/8; MuJoCo's step-halving error at h = 2e-3): double pendulum 4.8e-11 (1.8e-9), cart-pole
# 1.9e-11 (5.9e-11), ball arm 2.1e-10 (2.1e-6), free chain 1.5e-12 (2.4e-11).
@pytest.mark.parametrize("name", ["double_pendulum", "cartpole", "ball_arm", "free_chain"])
def test_tree_matches_mujoco_rk4(name):
    path = MJCF / f"{name}.xml"
    imported = jaxmbs.io.from_mjcf(path, keyframe="start")
    assert not imported.report.left_out
    sol = jaxmbs.simulate(
        imported.mechanism, imported.q0, imported.qd0, (0.0, 1.0), rtol=1e-10, atol=1e-10
    )
    assert sol.successful
    qpos = np.asarray(imported.to_qpos(sol.q[-1]))
    h = 2e-3
    coarse, half, fine = (mujoco_qpos(path, dt) for dt in (h, h / 2, h / 8))
    halving = np.max(np.abs(coarse - half))
    # the criterion: within MuJoCo's own step-halving error
    assert np.max(np.abs(qpos - half)) <= halving
    # and, tighter, with MuJoCo at h/8 (its error there ≤ 5e-10: halving / 16 / 16)
    assert np.max(np.abs(qpos - fine)) <= 2e-9
    if imported.mechanism.n_holonomic:  # the quaternions' normalisation
        assert float(jnp.max(jnp.abs(sol.position_residual))) <= 1e-12


KITCHEN_SINK = """
<mujoco model="kitchen sink">
  <option gravity="0.5 -1 -9.81"><flag contact="disable"/></option>
  <worldbody>
    <body name="root" pos="0 0 1" euler="10 0 20">
      <joint name="root" type="free" damping="0.03" armature="0.01" stiffness="1.5"/>
      <geom type="box" size="0.2 0.1 0.05" pos="0.02 0 0" euler="5 10 15"/>
      <body name="multi" pos="0.2 0.05 0" euler="0 20 0">
        <joint name="h1" type="hinge" axis="0 0 1" pos="0.01 0 0" damping="0.1" stiffness="2"
               springref="15" ref="5"/>
        <joint name="s1" type="slide" axis="1 0.2 0" pos="0 0.02 0" armature="0.05" stiffness="3"/>
        <joint name="h2" type="hinge" axis="0 1 0" pos="0.05 0 0.01" armature="0.02"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0.05" size="0.03"/>
        <geom type="sphere" size="0.04" pos="0.3 0.02 0.05"/>
      </body>
      <body name="limb" pos="-0.2 0 0" euler="30 0 0">
        <joint name="b1" type="ball" pos="-0.02 0.01 0" damping="0.04" armature="0.03"
               stiffness="0.5"/>
        <geom type="box" size="0.1 0.03 0.02" pos="-0.1 0 0" euler="0 0 25"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def _kitchen_sink_state():
    """MuJoCo's model and data of KITCHEN_SINK after `mj_forward` at a random state."""
    model = mujoco.MjModel.from_xml_string(KITCHEN_SINK)
    data = mujoco.MjData(model)
    rng = np.random.default_rng(0)
    qpos = model.qpos0 + 0.3 * rng.standard_normal(model.nq)
    for a in (3, 10):  # the root's and the ball's quaternions
        qpos[a : a + 4] /= np.linalg.norm(qpos[a : a + 4])
    data.qpos[:], data.qvel[:] = qpos, rng.standard_normal(model.nv)
    mujoco.mj_forward(model, data)
    return model, data


def test_accelerations_equal_mujocos_at_a_random_state():
    """q̈ against MuJoCo's `mj_forward` qacc at a random state of a model with a free root
    (spring, damping, armature), three joints in one body (hinge, slide, hinge with their own
    anchors, a `ref`, springs) and an offset ball joint (spring, damping, armature), under a
    skew gravity: M, the gyroscopic terms, springs, dampers and armature at once (measured
    5.8e-14 of 21)."""
    imported = jaxmbs.io.from_mjcf(KITCHEN_SINK)
    _, data = _kitchen_sink_state()
    q, qd = imported.from_qpos(data.qpos, data.qvel)
    qdd = eqx.filter_jit(jaxmbs.accelerations)(imported.mechanism, q, qd)
    qacc = imported.to_qvel(q, qdd)  # ω̇ = 2 G(e) ë, as G(ė) ė = 0
    np.testing.assert_allclose(qacc, data.qacc, rtol=0, atol=1e-12 * np.max(np.abs(data.qacc)))


ABSOLUTE = """
<mujoco>
  <option gravity="0.5 -1 -9.81"/>
  <worldbody>
    <body name="root" pos="0 0 1" euler="10 0 20">
      <freejoint name="root"/>
      <geom type="box" size="0.2 0.1 0.05" pos="0.02 0 0" euler="5 10 15"/>
      <body name="arm" pos="0.2 0.05 0" euler="0 20 0">
        <joint name="hinge" axis="0 0.3 1" pos="0.01 0 0" damping="0.1" stiffness="2"
               springref="15" ref="5"/>
        <geom type="capsule" fromto="0 0 0 0.3 0 0.05" size="0.03"/>
        <body name="hand" pos="0.3 0 0.05">
          <joint name="wrist" type="slide" axis="1 0 0"/>
          <geom type="sphere" size="0.04"/>
        </body>
      </body>
      <body name="limb" pos="-0.2 0 0" euler="30 0 0">
        <joint name="ball" type="ball" pos="-0.02 0.01 0"/>
        <geom type="box" size="0.1 0.03 0.02" pos="-0.1 0 0" euler="0 0 25"/>
      </body>
    </body>
  </worldbody>
</mujoco>
"""


def test_absolute_coordinates_move_the_bodies_as_the_joint_coordinates_do():
    """coordinates="absolute" (an Euler-parameter body per moving body, the joints as
    constraints, the hinge's damper and spring as a RotationalSpringDamper): at a random
    state the centres of mass accelerate as in joint coordinates (measured 3.6e-15 of 9.9),
    and `to_qpos` and `to_qvel` read that state's qpos and qvel back."""
    joint = jaxmbs.io.from_mjcf(ABSOLUTE)
    absolute = jaxmbs.io.from_mjcf(ABSOLUTE, coordinates="absolute")
    groups = dict(absolute.mechanism.constraint_groups)
    assert [len(groups[g]) for g in ("normalization", "hinge", "wrist", "ball")] == [4, 5, 5, 3]
    rng = np.random.default_rng(1)
    qpos = np.asarray(joint.q0) + 0.3 * rng.standard_normal(joint.tree.nq)
    q, qd = joint.from_qpos(qpos, rng.standard_normal(joint.tree.nv))
    q = joint.to_qpos(q)
    qa, qda = absolute.from_qpos(q, joint.to_qvel(q, qd))
    mech = absolute.mechanism
    residual = eqx.filter_jit(lambda m, q_: m.constraints(0.0, q_, m.params))(mech, qa)
    assert float(jnp.max(jnp.abs(residual))) <= 1e-14
    accelerations = eqx.filter_jit(jaxmbs.accelerations)
    qdd_abs = accelerations(mech, qa, qda)

    @jax.jit
    def centre_accelerations(q, qd):
        """ẍ = J q̈ + J̇ q̇ of every centre of mass, in joint coordinates."""
        qdd = jaxmbs.accelerations(joint.mechanism, q, qd)

        def com(q_):
            return joint.tree.inertial_frames(q_)[0]

        _, (_, bias) = jax.jvp(lambda q_: jax.jvp(com, (q_,), (qd,)), (q,), (qd,))
        return jax.jvp(com, (q,), (qdd,))[1] + bias

    expected = centre_accelerations(q, qd)[np.array(absolute.absolute_bodies)]
    actual = np.asarray(qdd_abs).reshape(-1, 7)[:, :3]
    np.testing.assert_allclose(actual, expected, rtol=0, atol=1e-12 * np.max(np.abs(expected)))
    back, q = np.array(absolute.to_qpos(qa)), np.asarray(q)
    for j in joint.tree.quaternion_joints:  # a quaternion and its negative: one rotation
        w = j.qadr + (3 if j.kind == "free" else 0)
        back[w : w + 4] *= np.sign(back[w] * q[w])
    np.testing.assert_allclose(back, q, rtol=0, atol=1e-14)
    qvel = np.asarray(joint.to_qvel(q, qd))  # MuJoCo's qvel, read back off the bodies
    np.testing.assert_allclose(absolute.to_qvel(qa, qda), qvel, rtol=0, atol=1e-14)
    with pytest.raises(ValueError, match="this model has absolute ones"):
        absolute.closure_forces(jnp.zeros(absolute.mechanism.n_holonomic))


def test_absolute_coordinates_map_the_kitchen_sink_and_the_fivebar():
    """The kitchen sink's hinge, oblique slide and hinge on one body in mixed coordinates
    (`jaxmbs.io.absolute`: the body's pose and the joints' qpos, 6 rows): at the random
    state of `test_accelerations_equal_mujocos_at_a_random_state` MuJoCo's qacc is the rate
    of `to_qvel` (measured 2.4e-14 of 21; MuJoCo with s1's axis turned by 1e-3 rad moves by
    0.0057). The five-bar's connect is a Spherical (two degrees of freedom)."""
    imported = jaxmbs.io.from_mjcf(KITCHEN_SINK, coordinates="absolute")
    assert len(dict(imported.mechanism.constraint_groups)["h1+s1+h2"]) == 6
    model, data = _kitchen_sink_state()
    q, qd = imported.from_qpos(data.qpos, data.qvel)

    @eqx.filter_jit
    def rates(imported, q, qd):
        qdd = jaxmbs.accelerations(imported.mechanism, q, qd)
        return jax.jvp(imported.to_qvel, (q, qd), (qd, qdd))[1]

    scale = float(np.max(np.abs(data.qacc)))
    gap = float(np.max(np.abs(rates(imported, q, qd) - data.qacc)))
    turned = mujoco.MjModel.from_xml_string(KITCHEN_SINK.replace('"1 0.2 0"', '"1 0.201 0"'))
    other = mujoco.MjData(turned)
    other.qpos[:], other.qvel[:] = data.qpos, data.qvel
    mujoco.mj_forward(turned, other)
    change = float(np.max(np.abs(other.qacc - data.qacc)))
    print(f"absolute qacc {gap:.2g} of {scale:.2g}; an axis turned in MuJoCo: {change:.2g}")
    assert gap <= 1e-12 * scale
    assert change >= 1e-5 * scale
    fivebar = jaxmbs.io.from_mjcf(MJCF / "fivebar.xml", coordinates="absolute")
    assert fivebar.mechanism.structure.dof == 2  # the five-bar's connect: a Spherical


def test_state_maps_round_trip():
    """qvel → (q, q̇) → qvel is the identity; qpos keeps MuJoCo's order, quaternions unit."""
    imported = jaxmbs.io.from_mjcf(MJCF / "free_chain.xml", keyframe="start")
    model = mujoco.MjModel.from_xml_path(str(MJCF / "free_chain.xml"))
    q, qd = imported.from_qpos(model.key_qpos[0], model.key_qvel[0])
    np.testing.assert_allclose(imported.to_qvel(q, qd), model.key_qvel[0], rtol=0, atol=1e-14)
    np.testing.assert_allclose(qd, imported.qd0, rtol=0, atol=1e-15)
    # ė is tangent to the unit sphere: eᵀė = 0 for the root's and the tail's quaternions
    for a in (3, 8):
        assert abs(float(q[a : a + 4] @ qd[a : a + 4])) <= 1e-15
    scaled = q.at[3:7].multiply(2.0)
    np.testing.assert_allclose(imported.to_qpos(scaled), q, rtol=0, atol=1e-15)
    batch = imported.to_qvel(jnp.stack([q, q]), jnp.stack([qd, 2 * qd]))
    np.testing.assert_allclose(batch[1], 2 * model.key_qvel[0], rtol=0, atol=1e-14)
    assert imported.mechanism.coordinate_names[:7] == (
        *("root.x", "root.y", "root.z"),
        *("root.qw", "root.qx", "root.qy", "root.qz"),
    )


# --- the four-bar closed by a connect ------------------------------------------------------


@pytest.fixture(scope="module")
def fourbar_pair():
    """The hand-built four-bar's state and the MJCF one's in joint angles (MJCF qpos = 0 is
    the hand-built configuration at crank angle π/3: the file is written there)."""
    hand = fourbar()
    q0, qd0 = initial_state(hand)
    imported = jaxmbs.io.from_mjcf(MJCF / "fourbar.xml")
    phi, phi_dot = np.asarray(q0)[[2, 5, 8]], np.asarray(qd0)[[2, 5, 8]]
    theta_dot = jnp.asarray([phi_dot[0], phi_dot[1] - phi_dot[0], phi_dot[2] - phi_dot[1]])
    return hand, q0, qd0, imported, phi, theta_dot


def test_fourbar_connect_is_exact_and_matches_the_hand_built(fourbar_pair):
    hand, q0, qd0, imported, phi, theta_dot = fourbar_pair
    mech = imported.mechanism
    assert dict(mech.constraint_groups) == {"D": (0, 1, 2)}
    s = mech.structure
    assert (s.rank, s.redundancy, s.dof) == (2, 1, 1)  # the connect's z row is redundant
    ts = jnp.linspace(0.0, 2.0, 41)
    options = dict(saveat=ts, rtol=1e-12, atol=1e-12)
    ref = jaxmbs.simulate(hand, q0, qd0, (0.0, 2.0), **options)
    sol = jaxmbs.simulate(mech, jnp.zeros(3), theta_dot, (0.0, 2.0), **options)
    assert ref.successful and sol.successful
    assert float(jnp.max(jnp.abs(sol.position_residual))) <= 1e-10
    # absolute link angles φ₀ + θA, φ₀ + θA + θB, φ₀ + θA + θB + θC (the rocker's frame
    # points from C to D, the hand-built one's from D to C: both turn alike)
    angles = np.cumsum(np.asarray(sol.q), axis=1) + phi
    expected = np.asarray(ref.q)[:, [2, 5, 8]]
    wrapped = (angles - expected + np.pi) % (2 * np.pi) - np.pi
    assert np.max(np.abs(wrapped)) <= 1e-9  # measured 1.2e-11


def test_fourbar_connect_force_is_the_hand_built_pin_reaction(fourbar_pair):
    """The connect's force on the rocker equals the hand-built pin D's reaction (both rows
    p_rocker − p_ground, so both −λ) at the same state; its out-of-plane row carries none."""
    hand, q0, qd0, imported, _, theta_dot = fourbar_pair
    multipliers = eqx.filter_jit(jaxmbs.accelerations_and_multipliers)
    _, lam_hand = multipliers(hand, q0, qd0)
    _, lam = multipliers(imported.mechanism, jnp.zeros(3), theta_dot)
    force = imported.closure_forces(lam)["D"]
    expected = -np.asarray(lam_hand)[list(hand.group_rows("D"))]
    np.testing.assert_allclose(force[:2], expected, rtol=1e-10)
    assert abs(float(force[2])) <= 1e-12 * float(np.max(np.abs(expected)))


def test_a_welds_wrench_holds_a_body_against_gravity():
    """A box welded to the world at rest: the weld's force and couple on the box balance
    its weight about the anchor (the box's frame origin; its centre of mass is off it)."""
    xml = """
    <mujoco>
      <worldbody>
        <body name="box" pos="0.3 0.1 1" euler="10 20 30">
          <freejoint/><geom type="box" size="0.1 0.2 0.3" pos="0.2 -0.1 0.05" mass="2"/>
        </body>
      </worldbody>
      <equality><weld name="glue" body1="world" body2="box"/></equality>
    </mujoco>
    """
    imported = jaxmbs.io.from_mjcf(xml)
    mech = imported.mechanism
    qdd, lam = eqx.filter_jit(jaxmbs.accelerations_and_multipliers)(mech, imported.q0, imported.qd0)
    assert float(jnp.max(jnp.abs(qdd))) <= 1e-12
    weight = 2.0 * np.asarray(mech.params["gravity"])
    com = np.asarray(imported.tree.inertial_frames(imported.q0)[0][1])
    anchor = np.asarray(imported.q0[:3])
    force = -imported.closure_forces(lam)["glue"]  # on the box: the opposite
    torque = -imported.closure_torques(imported.q0, lam)["glue"]
    np.testing.assert_allclose(force, -weight, rtol=0, atol=1e-12)
    np.testing.assert_allclose(torque, -np.cross(com - anchor, weight), rtol=0, atol=1e-12)


def test_fourbar_from_urdf_with_a_connect_by_link_name(tmp_path, fourbar_pair):
    """The same four-bar written as URDF, closed with `loops=[Connect(...)]`, is the same
    mechanism: M, Q and Φ agree with the MJCF import at a state off the reference."""
    *_, imported, phi, _ = fourbar_pair
    angles = (phi[0], phi[1] - phi[0], phi[2] + np.pi - phi[1])
    links, joints = [], []
    specs = (("crank", 1.0, 0.2), ("coupler", 2.0, 0.5), ("rocker", 1.5, 0.4))
    parent, offset = "base", 0.0
    for (name, m, length), angle in zip(specs, map(float, angles), strict=True):
        J = m * length**2 / 12
        links.append(
            f'<link name="{name}"><inertial><origin xyz="{length / 2!r} 0 0"/>'
            f'<mass value="{m!r}"/><inertia ixx="1e-6" iyy="{J!r}" izz="{J!r}" ixy="0" '
            'ixz="0" iyz="0"/></inertial></link>'
        )
        joints.append(
            f'<joint name="{name}_joint" type="continuous"><parent link="{parent}"/>'
            f'<child link="{name}"/><origin xyz="{offset!r} 0 0" rpy="0 0 {angle!r}"/>'
            '<axis xyz="0 0 1"/></joint>'
        )
        parent, offset = name, length
    urdf = tmp_path / "fourbar.urdf"
    urdf.write_text(f'<robot name="fourbar"><link name="base"/>{"".join(links + joints)}</robot>')
    loop = jaxmbs.io.Connect("rocker", "world", anchor=(0.4, 0.0, 0.0), name="D")
    from_urdf = jaxmbs.io.from_urdf(urdf, loops=[loop])
    a, b = from_urdf.mechanism, imported.mechanism
    a = a.replace_params({**a.params, "gravity": b.params["gravity"]})  # URDF: along −z
    assert dict(a.constraint_groups) == {"D": (0, 1, 2)}
    q, qd = jnp.array([0.1, -0.2, 0.3]), jnp.array([1.0, -0.5, 0.2])
    np.testing.assert_allclose(a.mass_matrix(q, a.params), b.mass_matrix(q, b.params), atol=1e-15)
    forces = eqx.filter_jit(lambda m: m.forces(0.0, q, qd, m.params))
    np.testing.assert_allclose(forces(a), forces(b), rtol=0, atol=1e-13)
    np.testing.assert_allclose(
        a.constraints(0.0, q, a.params), b.constraints(0.0, q, b.params), rtol=0, atol=1e-15
    )


SERVO = """
<mujoco model="servoed cart-pole">
  <option integrator="RK4"><flag contact="disable"/></option>
  <worldbody>
    <body name="cart">
      <joint name="slider" type="slide" axis="1 0 0" damping="0.1"/>
      <geom type="box" size="0.2 0.1 0.05" mass="1"/>
      <body name="pole">
        <joint name="hinge" type="hinge" axis="0 1 0"/>
        <geom type="capsule" fromto="0 0 0 0.001 0 0.6" size="0.03" mass="0.3"/>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="push" joint="slider" gear="2" ctrlrange="-0.2 0.2" ctrllimited="true"/>
    <position name="servo" joint="hinge" kp="5" kv="0.5" forcerange="-1 1" forcelimited="true"/>
  </actuator>
  <keyframe><key name="start" qpos="0 0.1" ctrl="0.3 0.4"/></keyframe>
</mujoco>
"""


def test_actuators_are_inputs_and_match_mujoco(tmp_path):
    """A motor (gear 2, its control 0.3 clamped to 0.2) and a position servo (kp, kv, force
    clamped to ±1 at first) with constant controls, against MuJoCo RK4 after 1 s; the
    controls given as a callable and as a jaxmbs.Profile."""
    controls = {
        "push": lambda t, q, qd, p: 0.3 + 0.0 * t,
        "servo": jaxmbs.Profile(np.linspace(0.0, 2.0, 5), np.full(5, 0.4)),
    }
    imported = jaxmbs.io.from_mjcf(SERVO, keyframe="start", controls=controls)
    assert not imported.report.left_out
    assert imported.mechanism.params["servo.bias"][1] == pytest.approx(-5.0, rel=1e-15)
    sol = jaxmbs.simulate(
        imported.mechanism, imported.q0, imported.qd0, (0.0, 1.0), rtol=1e-10, atol=1e-10
    )
    path = tmp_path / "servo.xml"
    path.write_text(SERVO)
    coarse, half = (mujoco_qpos(path, dt, ctrl=(0.3, 0.4)) for dt in (2e-3, 1e-3))
    deviation = np.max(np.abs(np.asarray(sol.q[-1]) - half))
    assert deviation <= max(np.max(np.abs(coarse - half)), 1e-9)
    with pytest.raises(ValueError, match="not modelled: \\['pull'\\]"):
        jaxmbs.io.from_mjcf(SERVO, controls={"pull": lambda t, q, qd, p: 0.0})


def test_fivebar_with_springs_is_closed_at_its_reference():
    """The five-bar's connect leaves two degrees of freedom (its out-of-plane row is
    redundant), holds at qpos0, and its springs' references are in radians (MJCF degrees).
    Over 10 s at 1e-10 it keeps |Φ| ≤ 2.8e-16 and its energy to 4.6e-9 J of 12 J
    (docs/io.md; not run here: compile time)."""
    imported = jaxmbs.io.from_mjcf(MJCF / "fivebar.xml")
    mech = imported.mechanism
    s = mech.structure
    assert (s.rank, s.redundancy, s.dof) == (2, 1, 2)
    assert float(jnp.max(jnp.abs(mech.constraints(0.0, imported.q0, mech.params)))) <= 1e-15
    np.testing.assert_allclose(mech.params["A.springref"], np.radians(20.0), rtol=1e-15)
    assert mech.params["E.stiffness"] == pytest.approx(4.0, rel=1e-15)


# --- gradients -----------------------------------------------------------------------------


def test_gradient_and_monte_carlo_of_an_imported_model():
    """The gradient of the final elbow angle with respect to a body mass and a joint damping
    against central differences (measured 1.3e-9 relative with steps of 1e-4); the same
    perturbed runs as one `monte_carlo` batch over the mass."""
    imported = jaxmbs.io.from_mjcf(MJCF / "double_pendulum.xml", keyframe="start")
    mech = imported.mechanism
    keys = ("lower.mass", "shoulder.damping")
    options = dict(rtol=1e-12, atol=1e-12)

    @eqx.filter_jit
    def final_angle(theta):
        p = {**mech.params, **dict(zip(keys, theta, strict=True))}
        sol = jaxmbs.simulate(mech, imported.q0, imported.qd0, (0.0, 0.5), params=p, **options)
        return sol.q[-1, 1]

    theta = jnp.array([mech.params[k] for k in keys])
    grad = np.asarray(jax.grad(final_angle)(theta))
    steps = 1e-4 * np.maximum(1.0, np.abs(np.asarray(theta)))
    ends = [[float(final_angle(theta + s * e)) for s in (-1, 1)] for e in np.diag(steps)]
    central = [(plus - minus) / (2 * h) for (minus, plus), h in zip(ends, steps, strict=True)]
    np.testing.assert_allclose(grad, central, rtol=1e-6)

    masses = jnp.asarray(theta[0] + steps[0] * np.array([-1.0, 1.0]))
    study = jaxmbs.monte_carlo(
        mech,
        {"params": {"lower.mass": masses}},
        (0.0, 0.5),
        q0=imported.q0,
        qd0=imported.qd0,
        response=lambda sol: sol.q[-1, 1],
        keep_solutions=False,
        **options,
    )
    assert np.all(study.result == 0)
    np.testing.assert_allclose(study.responses, ends[0], rtol=0, atol=1e-10)


# --- what is left out, and bad input --------------------------------------------------------

EVERYTHING = """
<mujoco model="everything">
  <option density="1.2"/>
  <worldbody>
    <geom name="floor" type="plane" size="1 1 0.1"/>
    <body name="arm" pos="0 0 1" gravcomp="0.5">
      <joint name="shoulder" type="hinge" axis="0 1 0" range="-1 1" limited="true"
             frictionloss="0.1"/>
      <geom name="arm_geom" type="capsule" fromto="0 0 0 0 0 -0.5" size="0.05"/>
      <site name="tip" pos="0 0 -0.5"/>
    </body>
    <body name="target" mocap="true" pos="1 0 0"/>
  </worldbody>
  <tendon><fixed name="cable"><joint joint="shoulder" coef="1"/></fixed></tendon>
  <actuator><motor name="motor" tendon="cable"/></actuator>
  <sensor><jointpos name="angle" joint="shoulder"/></sensor>
  <equality>
    <joint name="parked" joint1="shoulder" active="false"/>
    <tendon name="taut" tendon1="cable"/>
  </equality>
</mujoco>
"""

LEFT_OUT = {
    "contact": "floor, arm_geom",
    "joint limit": "shoulder",
    "friction loss": "shoulder",
    "tendon": "cable",
    "actuator": "motor",
    "sensor": "angle",
    "gravity compensation": "arm",
    "mocap": "target",
    "fluid forces": "option",
}


@pytest.fixture(scope="module")
def everything():
    return jaxmbs.io.from_mjcf(EVERYTHING)


@pytest.mark.parametrize("element, name", LEFT_OUT.items())
def test_every_left_out_element_is_in_the_report(everything, element, name):
    assert name in everything.report.left_out_names(element)
    assert f"{element} {name!r}" in str(everything.report)


def test_inactive_and_unsupported_equalities_are_reported(everything):
    reasons = {e.name: e.reason for e in everything.report.left_out if e.element == "equality"}
    assert "inactive" in reasons["parked"]
    assert "not supported" in reasons["taut"]
    assert everything.mechanism.n_holonomic == 0


def test_strict_refuses_and_names_what_changes_the_motion():
    with pytest.raises(ValueError, match="strict=True") as err:
        jaxmbs.io.from_mjcf(EVERYTHING, strict=True)
    message = str(err.value)
    for element in ("joint limit 'shoulder'", "tendon 'cable'", "actuator 'motor'", "contact"):
        assert element in message
    assert "sensor" not in message  # a sensor does not change the motion


def test_held_equalities_are_noted_and_exact_at_qpos0():
    """A weld, a connect on sites and a joint coupling: rows zero at qpos0, soft parameters
    noted as ignored, ranks as expected (a free body welded to the world has no freedom)."""
    xml = """
    <mujoco>
      <worldbody>
        <body name="box" pos="0.3 0.1 1" euler="10 20 30">
          <freejoint name="float"/><geom type="box" size="0.1 0.2 0.3"/>
          <site name="corner"/>
        </body>
        <site name="fixed" pos="0.3 0.1 1"/>
        <body name="a"><joint name="ja" axis="0 1 0"/><geom size="0.1" pos="0.2 0 0"/></body>
        <body name="b"><joint name="jb" axis="0 1 0"/><geom size="0.1" pos="0.2 0 0"/></body>
      </worldbody>
      <equality>
        <weld name="glue" body1="world" body2="box" solref="0.05 1"/>
        <connect name="pin" site1="corner" site2="fixed"/>
        <joint name="gear" joint1="ja" joint2="jb" polycoef="0 -2 0 0 0"/>
      </equality>
    </mujoco>
    """
    imported = jaxmbs.io.from_mjcf(xml)
    mech = imported.mechanism
    groups = dict(mech.constraint_groups)
    assert [len(groups[g]) for g in ("normalization", "glue", "pin", "gear")] == [1, 6, 3, 1]
    residual = mech.constraints(0.0, imported.q0, mech.params)
    assert float(jnp.max(jnp.abs(residual))) <= 1e-15
    off = imported.q0.at[0].add(0.01).at[-1].add(0.1)  # box moved, jb turned
    rows = np.asarray(mech.constraints(0.0, off, mech.params))
    np.testing.assert_allclose(rows[groups["glue"][0]], -0.01, rtol=1e-12)  # world − box, x
    np.testing.assert_allclose(rows[groups["gear"][0]], 0.2, rtol=1e-12)  # ja + 2 jb
    assert mech.structure.dof == 1  # the box fixed, a and b geared
    assert "'glue', 'pin', 'gear'" in " ".join(imported.report.notes)
    assert "solref/solimp" in " ".join(imported.report.notes)


@pytest.mark.parametrize(
    "source, message",
    [
        ("<mujoco><worldbody><body><joint/>", "could not read"),
        ("<mujoco><worldbody><body><joint type='screw'/></body></worldbody></mujoco>", "screw"),
        (
            "<mujoco><worldbody><body><joint/></body></worldbody></mujoco>",
            "compiler refused",  # a moving body without mass
        ),
        ("no/such/model.xml", "no model file"),
        (42, "must be a path"),
    ],
)
def test_bad_files_are_clear_errors(source, message):
    with pytest.raises(ValueError, match=message):
        jaxmbs.io.from_mjcf(source)


def test_a_weld_added_by_name_locks_the_cart():
    """`loops=[Weld(...)]` (as for a URDF): the cart welded to the world at qpos0 leaves the
    pole's hinge only; its six rows hold at qpos0 and move with the cart."""
    imported = jaxmbs.io.from_mjcf(
        MJCF / "cartpole.xml", loops=[jaxmbs.io.Weld("world", "cart", name="lock")]
    )
    mech = imported.mechanism
    assert dict(mech.constraint_groups) == {"lock": (0, 1, 2, 3, 4, 5)}
    assert mech.structure.dof == 1
    rows = np.asarray(mech.constraints(0.0, imported.q0.at[0].add(0.1), mech.params))
    np.testing.assert_allclose(rows, [-0.1, 0, 0, 0, 0, 0], rtol=0, atol=1e-15)


def test_unknown_keyframe_and_bad_loop_are_refused():
    with pytest.raises(ValueError, match="no keyframe 'begin'; keyframes: \\['start'\\]"):
        jaxmbs.io.from_mjcf(MJCF / "cartpole.xml", keyframe="begin")
    with pytest.raises(ValueError, match="loops\\[0\\] must be"):
        jaxmbs.io.from_mjcf(MJCF / "cartpole.xml", loops=[("cart", "pole")])
    with pytest.raises(ValueError, match="compiler refused"):
        jaxmbs.io.from_mjcf(MJCF / "cartpole.xml", loops=[jaxmbs.io.Connect("cart", "nobody")])


def test_command_line_simulates_an_mjcf_file(capsys):
    code = main(
        [
            "simulate",
            str(MJCF / "cartpole.xml"),
            "--keyframe",
            "start",
            "--t1",
            "0.2",
            "--points",
            "3",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "result           successful" in out
    assert "model            " in out and "(n = 2" in out


def test_the_core_package_does_not_import_mujoco():
    code = "import sys, jaxmbs, jaxmbs.io, jaxmbs.cli; print('mujoco' in sys.modules)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "JAX_PLATFORMS": "cpu"},
        check=True,
    )
    assert out.stdout.strip() == "False"
