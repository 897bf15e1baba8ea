"""Pictures of imported models: each geom of the file drawn as a wire outline moved with its
body (`jaxmbs.io.geometry`), in joint and in absolute coordinates."""

from types import SimpleNamespace

import numpy as np
import pytest

import jaxmbs

mujoco = pytest.importorskip("mujoco")
pytest.importorskip("matplotlib")
Image = pytest.importorskip("PIL.Image")
import jaxmbs.io  # noqa: E402  (after the skip: the tests need mujoco)

#: The pendulum, written out: its body at BODY, the hinge about the y axis through ANCHOR
#: (body frame), a box (half-sizes BOX, rotated by 40° about (1, 1, 0)), a capsule from the
#: hinge to CAPSULE_END (radius 0.05) and a sphere (radius 0.1) at SPHERE.
BODY, ANCHOR = np.array([0.0, 0.0, 1.0]), np.array([0.1, 0.0, 0.0])
BOX, BOX_AT = np.array([0.1, 0.2, 0.3]), np.array([0.1, 0.0, -0.5])
CAPSULE_END, CAPSULE_R = np.array([0.3, 0.0, -0.4]), 0.05
SPHERE, SPHERE_R = np.array([0.0, 0.0, -1.0]), 0.1
PENDULUM = f"""
<mujoco>
  <option><flag contact="disable"/></option>
  <worldbody>
    <body name="pendulum" pos="{" ".join(map(str, BODY))}">
      <joint name="hinge" type="hinge" axis="0 1 0" pos="{" ".join(map(str, ANCHOR))}"/>
      <geom name="box" type="box" size="{" ".join(map(str, BOX))}"
            pos="{" ".join(map(str, BOX_AT))}" axisangle="1 1 0 40"/>
      <geom name="capsule" type="capsule" size="{CAPSULE_R}"
            fromto="0 0 0 {" ".join(map(str, CAPSULE_END))}"/>
      <geom name="sphere" type="sphere" size="{SPHERE_R}" pos="{" ".join(map(str, SPHERE))}"/>
    </body>
  </worldbody>
</mujoco>
"""
ANGLES = np.array([0.7, -1.3])


def rotation(axis, angle: float) -> np.ndarray:
    """Rodrigues: I + sin θ ã + (1 − cos θ) ã² about the unit vector along `axis`."""
    a = np.asarray(axis, dtype=float) / np.linalg.norm(axis)
    K = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
    return np.eye(3) + np.sin(angle) * K + (1 - np.cos(angle)) * K @ K


def moved(angle: float, local: np.ndarray) -> np.ndarray:
    """Points of the pendulum's frame in the world at hinge angle `angle`: the body turns by
    the angle about the y axis through its anchor, x = BODY + ANCHOR − R ANCHOR."""
    R = rotation([0, 1, 0], angle)
    return BODY + ANCHOR - R @ ANCHOR + local @ R.T


def pieces(line) -> list[np.ndarray]:
    """A drawn 3-D line's polylines (split where matplotlib breaks it: rows of NaN)."""
    points = np.stack([np.asarray(c, dtype=float) for c in line.get_data_3d()], axis=-1)
    breaks = np.flatnonzero(np.isnan(points[:, 0]))
    finite = (p[np.isfinite(p[:, 0])] for p in np.split(points, breaks))
    return [p for p in finite if len(p)]


def outline_lines(fig) -> list:
    """The outline lines of each panel (those broken by NaN rows)."""
    return [line for ax in fig.axes for line in ax.lines if np.isnan(line.get_data_3d()[0]).any()]


def run(model, angles) -> SimpleNamespace:
    """A stand-in for a solution through the given hinge angles (the drawings read ts, q)."""
    if model.coordinates == "joints":
        q = np.asarray(angles)[:, None]
    else:
        q = np.stack([np.asarray(model.from_qpos(np.array([a]))[0]) for a in angles])
    return SimpleNamespace(ts=np.arange(len(angles), dtype=float), q=q)


@pytest.fixture(scope="module", params=["joints", "absolute"])
def pendulum(request):
    return jaxmbs.io.from_mjcf(PENDULUM, coordinates=request.param)


def test_outlines_are_the_geoms_moved_by_the_hinge(pendulum):
    """At each hinge angle, the box's outline has exactly its eight corners, the capsule's
    every point at its radius from its segment and its tips on the axis, the sphere's every
    point at its radius from its centre and its extremes symmetric about it — each moved by
    the body's rotation about the hinge as written out here (and MuJoCo's `mj_kinematics`
    puts the box's corners there too)."""
    import matplotlib.pyplot as plt

    fig = jaxmbs.snapshot(pendulum.mechanism, run(pendulum, ANGLES), [0.0, 1.0])
    model = mujoco.MjModel.from_xml_string(PENDULUM)
    data = mujoco.MjData(model)
    box_rotation = rotation([1, 1, 0], np.radians(40))
    signs = np.array(np.meshgrid([-1, 1], [-1, 1], [-1, 1])).reshape(3, -1).T
    try:
        lines = outline_lines(fig)
        assert len(lines) == len(ANGLES)
        for line, angle in zip(lines, ANGLES, strict=True):
            parts = pieces(line)
            assert len(parts) == 6 + 4 + 3  # box: 2 loops, 4 edges; capsule: 2 rims, 2
            box, capsule, sphere = (  # profiles; sphere: 3 sections
                np.concatenate(p) for p in (parts[:6], parts[6:10], parts[10:])
            )
            corners = moved(angle, BOX_AT + (signs * BOX) @ box_rotation.T)
            distinct = np.unique(box.round(9), axis=0)
            assert len(distinct) == 8
            nearest = np.min(np.linalg.norm(box[:, None] - corners[None], axis=-1), axis=1)
            assert np.max(nearest) < 1e-12
            data.qpos[:] = angle
            mujoco.mj_kinematics(model, data)
            theirs = data.geom_xpos[0] + (signs * BOX) @ data.geom_xmat[0].reshape(3, 3).T
            assert np.max(np.abs(np.sort(theirs, axis=0) - np.sort(corners, axis=0))) < 1e-12

            start, end = moved(angle, np.zeros(3)), moved(angle, CAPSULE_END)
            d = (end - start) / np.linalg.norm(end - start)
            s = np.clip((capsule - start) @ d, 0.0, np.linalg.norm(end - start))
            distance = np.linalg.norm(capsule - (start + s[:, None] * d), axis=1)
            assert np.max(np.abs(distance - CAPSULE_R)) < 1e-12
            along = (capsule - start) @ d
            tips = capsule[[np.argmin(along), np.argmax(along)]]
            expected = np.stack([start - CAPSULE_R * d, end + CAPSULE_R * d])
            assert np.max(np.abs(tips - expected)) < 1e-12

            centre = moved(angle, SPHERE)
            radius = np.linalg.norm(sphere - centre, axis=1)
            assert np.max(np.abs(radius - SPHERE_R)) < 1e-12
            middle = (sphere.max(axis=0) + sphere.min(axis=0)) / 2
            assert np.max(np.abs(middle - centre)) < 1e-12
    finally:
        plt.close(fig)


def test_planes_and_meshes_are_noted_and_not_drawn():
    """A plane and a static box on the world, a mesh and a sphere on the pendulum: the
    sphere and the box (fixed) are drawn, the plane and the mesh are named in the report."""
    import matplotlib.pyplot as plt

    xml = """
    <mujoco>
      <asset><mesh name="tetrahedron" vertex="0 0 0  0.2 0 0  0 0.2 0  0 0 0.2"/></asset>
      <worldbody>
        <geom name="floor" type="plane" size="2 2 0.1"/>
        <geom name="post" type="box" size="0.05 0.05 0.5" pos="0 0 0.5"/>
        <body name="pendulum" pos="0 0 1">
          <joint type="hinge" axis="0 1 0"/>
          <geom name="bob" type="sphere" size="0.1" pos="0 0 -1"/>
          <geom name="tag" type="mesh" mesh="tetrahedron"/>
        </body>
      </worldbody>
    </mujoco>
    """
    model = jaxmbs.io.from_mjcf(xml)
    assert "'floor' (plane), 'tag' (mesh)" in " ".join(model.report.notes)
    fig = jaxmbs.snapshot(model.mechanism, run(model, [0.0, 0.4, 0.8]))
    try:
        (ax, *_) = fig.axes
        assert [line.get_label() for line in ax.lines] == ["world", "pendulum"]
        post, bob = (np.concatenate(pieces(line)) for line in ax.lines)
        assert np.max(np.abs(post[:, :2])) == pytest.approx(0.05, abs=1e-15)
        assert np.ptp(post[:, 2]) == pytest.approx(1.0, abs=1e-15)
        assert np.max(np.abs(np.linalg.norm(bob - [0.0, 0.0, 0.0], axis=1) - 0.1)) < 1e-12
    finally:
        plt.close(fig)


def test_animate_writes_a_frame_per_time(pendulum, tmp_path):
    path = jaxmbs.animate(pendulum.mechanism, run(pendulum, [0.0, 0.5, 1.0]), tmp_path / "p.gif")
    with Image.open(path) as gif:
        assert gif.n_frames == 3
