"""Pictures of a mechanism's motion: `animate` (GIF or MP4) and `snapshot` (a still figure).

Each body is drawn as the line through its joint points: the points where its joints attach
(`point_i` on `body_i`, `point_j` on `body_j`, a knife edge's contact point), joined in
order around their centre (a closed polygon from three points on); a body with fewer than
two joint points is drawn to (or as a dot at) its centre of mass. Ground points are drawn
as markers. Mechanisms built by the planar and spatial builders carry their joints
(`Mechanism.joints`), so nothing extra is needed; for a hand-written mechanism pass them
(`joints=`), without them only the centres of mass are drawn.

A drawing of the mechanism (`Mechanism.drawings`), an object with a method
`outlines(q) -> ((name, points), …)` (q of shape (T, n),
points (T, k, d) with NaN rows between pieces) adds those outlines, thin lines in its body's
colour: an imported model (`jaxmbs.io.from_mjcf`) carries its geoms that way
(`jaxmbs.io.geometry.Geometry`), and is drawn by them alone where its coordinates are not a
builder's (joint coordinates).

matplotlib (`pip install 'jaxmbs[figures]'`) is imported only when a picture is made.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import numpy as np

from .._internal.types import Params
from ..integrate.solution import Solution
from ..model.joints import planar, spatial
from ..model.joints._common import value

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from ..model import Mechanism

#: File suffixes `animate` writes, and the matplotlib writer of each.
WRITERS = {".gif": "pillow", ".mp4": "ffmpeg"}


class Drawing(NamedTuple):
    """What is drawn of a mechanism along a trajectory (NumPy arrays, T output times).

    - `names`: the body names.
    - `bodies`: per body, its drawn points, shape (T, k, d) (d = 2 planar, 3 spatial).
    - `ground`: the fixed ground points, shape (g, d).
    - `outlines`: (body name, points (T, k, d) with NaN rows between pieces) of the joints'
      `outlines` (module docstring).
    """

    names: tuple[str, ...]
    bodies: tuple[np.ndarray, ...]
    ground: np.ndarray
    outlines: tuple[tuple[str, np.ndarray], ...] = ()


def require_matplotlib():
    """Import matplotlib.pyplot on the file-writing Agg backend, or raise an ImportError
    that says how to install it."""
    try:
        import matplotlib
    except ImportError as err:
        raise ImportError(
            "pictures of the mechanism need matplotlib: pip install 'jaxmbs[figures]'"
        ) from err
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _attachments(joints: Sequence[Any]) -> list[tuple[int | None, Any]]:
    """(body, local point spec) of every joint point: both ends of a two-body joint, the
    contact point of a knife edge; joints without points (driving) add none."""
    out = []
    for j in joints:
        for body, local in (
            (getattr(j, "body_i", None), getattr(j, "point_i", None)),
            (getattr(j, "body_j", None), getattr(j, "point_j", None)),
            (getattr(j, "body", None), getattr(j, "point", None)),
        ):
            if local is not None:
                out.append((body, local))
    return out


def _distinct(points: Sequence[np.ndarray]) -> np.ndarray:
    """The points without repeats (to round-off), in their first order."""
    unique: list[np.ndarray] = []
    for p in points:
        if not any(np.allclose(p, u, rtol=0.0, atol=1e-12) for u in unique):
            unique.append(p)
    return np.asarray(unique)


def _ordered(points: np.ndarray) -> np.ndarray:
    """Distinct points, ordered around their centre and closed from three on."""
    pts = _distinct(points)
    if len(pts) < 3:
        return pts
    centred = pts - pts.mean(axis=0)
    if pts.shape[1] == 3:  # order within the best-fitting plane
        basis = np.linalg.svd(centred)[2][:2]
        centred = centred @ basis.T
    order = np.argsort(np.arctan2(centred[:, 1], centred[:, 0]))
    return np.concatenate([pts[order], pts[order[:1]]])


def _layout(mechanism: Mechanism):
    """The body names and a point function `(q, body, local) -> global` (planar: bodies own
    `name.x, name.y, name.phi`; else the spatial builder's layout), or None for neither."""
    names = mechanism.coordinate_names
    bodies = tuple(n.rpartition(".")[0] for n in names[::3])
    if names == tuple(f"{b}.{c}" for b in bodies for c in ("x", "y", "phi")):
        return bodies, planar.point
    try:
        layout = spatial.Layout.from_mechanism(mechanism)
    except ValueError:
        return None
    return layout.names, lambda q, b, s: layout.frames(q).point(b, s)


def drawing(
    mechanism: Mechanism,
    solution: Solution,
    *,
    joints: Sequence[Any] | None = None,
    params: Params | None = None,
) -> Drawing:
    """The points drawn for every body at every output time (see the module docstring).

    **Arguments:** the mechanism, one unbatched solution, the joints (default: those the
    builder recorded, `Mechanism.joints`) and the parameters (default: the mechanism's).
    """
    if np.ndim(solution.ts) != 1:
        raise ValueError("pictures take one unbatched solution (ts of shape (T,))")
    joints = tuple(mechanism.joints if joints is None else joints)
    q = np.asarray(solution.q)
    outlines = tuple(o for d in mechanism.drawings for o in d.outlines(q))
    layout = _layout(mechanism)
    if layout is None:
        if not outlines:
            raise ValueError(
                "pictures need a mechanism built by jaxmbs.joints.planar.planar_mechanism or "
                "jaxmbs.joints.spatial.spatial_mechanism (coordinates name.x, name.y, …), or "
                "drawings with outlines (an imported model with geoms to draw)"
            )
        return Drawing((), (), np.zeros((0, outlines[0][1].shape[-1])), outlines)
    names, point = layout
    p = mechanism.params if params is None else params
    dim = 2 if point is planar.point else 3
    local: list[list[np.ndarray]] = [[] for _ in names]
    ground = []
    for body, spec in _attachments(joints):
        s = np.broadcast_to(np.asarray(value(spec, p), dtype=float), (dim,))
        if body is None:
            ground.append(s)
        else:
            local[body].append(s)
    bodies = []
    for k, pts in enumerate(local):
        if len(_distinct(pts)) < 2:  # add the centre of mass (the local origin)
            pts = [*pts, np.zeros(dim)]
        pts = _ordered(pts)
        at = jax.vmap(lambda qt, k=k, pts=pts: jax.vmap(lambda s: point(qt, k, s))(pts))
        bodies.append(np.asarray(at(q)))
    ground = _distinct(ground) if ground else np.zeros((0, dim))
    return Drawing(tuple(names), tuple(bodies), ground, outlines)


def _limits(d: Drawing) -> np.ndarray:
    """(d, 2) axis limits covering every finite point, with a margin, equal in extent."""
    drawn = [*d.bodies, *(points for _, points in d.outlines)]
    stacked = np.concatenate([b.reshape(-1, b.shape[-1]) for b in drawn] + [d.ground])
    finite = stacked[np.all(np.isfinite(stacked), axis=1)]
    lo, hi = finite.min(axis=0), finite.max(axis=0)
    centre, half = (lo + hi) / 2, max(float(np.max(hi - lo)) / 2, 1e-3) * 1.1
    return np.stack([centre - half, centre + half], axis=1)


def _axes(fig, d: Drawing, where: tuple[int, int, int] = (1, 1, 1)):
    dim = d.ground.shape[1]
    ax = fig.add_subplot(*where, projection="3d" if dim == 3 else None)
    limits = _limits(d)
    ax.set_xlim(*limits[0])
    ax.set_ylim(*limits[1])
    if dim == 3:
        ax.set_zlim(*limits[2])
        ax.set_box_aspect((1, 1, 1))
    else:
        ax.set_aspect("equal")
    if len(d.ground):
        ax.scatter(*d.ground.T, marker="^", color="k", s=40, zorder=3)
    return ax


def _lines(ax, d: Drawing) -> list:
    """One line per body (empty data), labelled with the body's name, then one thin line per
    outline, in its body's colour (labelled with the name where no body line has it)."""
    dim = d.ground.shape[1]
    empty = [[]] * dim
    lines = [ax.plot(*empty, "o-", lw=3, ms=4, label=name)[0] for name in d.names]
    colours = {name: line.get_color() for name, line in zip(d.names, lines, strict=True)}
    for name, _ in d.outlines:
        style = {"color": colours[name]} if name in colours else {"label": name}
        lines.append(ax.plot(*empty, "-", lw=1, **style)[0])
    return lines


def _draw(lines: list, d: Drawing, i: int) -> None:
    drawn = [*d.bodies, *(points for _, points in d.outlines)]
    for line, pts in zip(lines, drawn, strict=True):
        xyz = pts[i].T
        line.set_data(xyz[0], xyz[1])
        if len(xyz) == 3:
            line.set_3d_properties(xyz[2])


def check_animation_path(path) -> tuple[Path, str]:
    """The path and the matplotlib writer for it; raises for an unknown suffix, a missing
    folder, or an MP4 without the ffmpeg program."""
    path = Path(path)
    writer = WRITERS.get(path.suffix.lower())
    if writer is None:
        raise ValueError(f"animate writes {' or '.join(WRITERS)} files, got {path.name!r}")
    if writer == "ffmpeg" and shutil.which("ffmpeg") is None:
        raise RuntimeError("writing MP4 needs the ffmpeg program on PATH; write a .gif instead")
    if not path.parent.is_dir():
        raise ValueError(f"cannot write {path}: {path.parent} is not a folder")
    return path, writer


def animate(
    mechanism: Mechanism,
    solution: Solution,
    path,
    *,
    fps: float = 10.0,
    joints: Sequence[Any] | None = None,
    params: Params | None = None,
    title: str | None = None,
) -> Path:
    """Write an animation of the motion, one frame per output time of `solution`.

    **Arguments:**

    - `mechanism`, `solution`: the mechanism and one unbatched solution of it.
    - `path`: a `.gif` (Pillow) or `.mp4` (needs the `ffmpeg` program) file.
    - `fps`: frames per second.
    - `joints`: the joints whose points are drawn (default: the builder's,
      `Mechanism.joints`; give them for a hand-written mechanism).
    - `params`: the parameters of the run (default: the mechanism's).
    - `title`: a title above the time.

    **Returns:** the path written. Raises before any work for an unknown suffix, a missing
    matplotlib or (MP4) a missing ffmpeg.
    """
    path, writer = check_animation_path(path)
    plt = require_matplotlib()
    from matplotlib.animation import FuncAnimation

    d = drawing(mechanism, solution, joints=joints, params=params)
    ts = np.asarray(solution.ts)
    fig = plt.figure(figsize=(5, 5))
    ax = _axes(fig, d)
    lines = _lines(ax, d)
    ax.legend(loc="upper right", fontsize=7)
    label = ax.set_title("")

    def frame(i: int):
        _draw(lines, d, i)
        label.set_text(f"{title + ': ' if title else ''}t = {ts[i]:.3f} s")
        return [*lines, label]

    try:
        movie = FuncAnimation(fig, frame, frames=len(ts), blit=False)
        movie.save(str(path), writer=writer, fps=fps)
    finally:
        plt.close(fig)
    return path


def snapshot(
    mechanism: Mechanism,
    solution: Solution,
    times: Sequence[float] | None = None,
    *,
    joints: Sequence[Any] | None = None,
    params: Params | None = None,
) -> Figure:
    """A still figure: the mechanism at the output times nearest to `times` (default: the
    first, middle and last), one panel per time with one line per body.

    **Returns:** the matplotlib figure (save it with `fig.savefig(...)`; close it with
    `matplotlib.pyplot.close(fig)`).
    """
    plt = require_matplotlib()
    ts = np.asarray(solution.ts)
    if times is None:
        times = ts[[0, len(ts) // 2, -1]]
    times = np.atleast_1d(np.asarray(times, dtype=float))
    if times.size == 0 or np.any(times < ts[0]) or np.any(times > ts[-1]):
        raise ValueError(f"snapshot times must lie in [{ts[0]:g}, {ts[-1]:g}], got {times}")
    d = drawing(mechanism, solution, joints=joints, params=params)
    fig = plt.figure(figsize=(4 * times.size, 4))
    for k, t in enumerate(times):
        i = int(np.argmin(np.abs(ts - t)))
        ax = _axes(fig, d, (1, times.size, k + 1))
        _draw(_lines(ax, d), d, i)
        ax.set_title(f"t = {ts[i]:.3f} s")
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    return fig
