"""`simulate(method="partitioned")` switches partitions through positions where a fixed one
degenerates, and matches `qr` to 1e-8: the redundant four-bar, a spatial single-loop
mechanism with redundant constraints; the McPherson struts in
`test_partitioning_switching_mcpherson.py` (split so that pytest-xdist's workers, each given
whole modules, balance)."""

import functools

import numpy as np
from switching_cases import compare_with_qr

import jaxmbs
from jaxmbs.model.joints import spatial
from jaxmbs.models import fourbar

#: Local axes of every link in the global frame at zero rotation: the local z axis lies
#: horizontal, so the ZXZ angle θ stays at π/2 (far from the gimbal lock) in planar motion.
FRAME = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])


def _rot_z(a):
    c, s = np.cos(a), np.sin(a)
    return np.array([[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]])


@functools.cache
def spatial_fourbar():
    """The four-bar's links as spatial bodies with four revolute joints about parallel axes:
    20 constraint rows, rank 17, redundancy 3 (the planar loop's classic redundancy)."""
    p = fourbar.DEFAULTS
    lengths = (p["l1"], p["l2"], p["l3"])
    masses = (p["m1"], p["m2"], p["m3"])
    bodies = [
        spatial.Body(name, m, (m * l**2 / 12, m * l**2 / 12, 1e-4), spatial.ZXZ)
        for name, m, l in zip(("crank", "coupler", "rocker"), masses, lengths, strict=True)
    ]

    def tip(body, sign):  # a link's end: local z is the planar link's x axis
        return (0.0, 0.0, sign * lengths[body] / 2)

    axis, vertical = (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)  # local y = global z for every link
    joints = [
        spatial.Revolute("A", 0, tip(0, -1), axis, None, (0.0, 0.0, 0.0), vertical),
        spatial.Revolute("B", 0, tip(0, 1), axis, 1, tip(1, -1), axis),
        spatial.Revolute("C", 1, tip(1, 1), axis, 2, tip(2, 1), axis),
        spatial.Revolute("D", 2, tip(2, -1), axis, None, (p["l0"], 0.0, 0.0), vertical),
    ]

    def pose(crank_angle):
        planar = fourbar._configuration(p, crank_angle).reshape(3, 3)
        return np.concatenate(
            [spatial.pose([x, y, 0.0], _rot_z(phi) @ FRAME, spatial.ZXZ) for x, y, phi in planar]
        )

    mech = spatial.spatial_mechanism(
        bodies, joints, gravity=(0.0, -9.81, 0.0), reference_q=pose(np.pi / 3)
    )
    omega = np.zeros(18)
    omega[3] = 3.0  # φ̇ of the crank: R_z(a) A(φ, θ, ψ) = A(φ + a, θ, ψ)
    q0, qd0 = jaxmbs.assemble(mech, pose(np.pi / 3), omega, fixed=(3,))
    return mech, q0, qd0


def test_redundant_fourbar_switches_away_from_the_rocker_angle():
    """The rocker angle as independent coordinate degenerates at the rocker's extreme
    positions (C_D singular); a full crank turn passes both."""
    mech = fourbar.fourbar(redundant=True)
    q0, qd0 = fourbar.initial_state(mech, crank_speed=4.0)
    sol = compare_with_qr(mech, q0, qd0, 1.6, ("rocker.phi",))
    assert int(sol.stats["num_switches"]) >= 1
    assert mech.structure.redundancy == 1


def test_spatial_single_loop_with_redundant_constraints():
    mech, q0, qd0 = spatial_fourbar()
    assert (mech.structure.rank, mech.structure.redundancy, mech.structure.dof) == (17, 3, 1)
    rocker = 2 * 6 + 3  # the rocker's φ
    sol = compare_with_qr(mech, q0, qd0, 2.0, (rocker,))
    assert int(sol.stats["num_switches"]) >= 1
