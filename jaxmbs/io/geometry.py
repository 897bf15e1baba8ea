"""Line drawings of an imported model's geoms, moved with their bodies (`jaxmbs.snapshot`,
`jaxmbs.animate`).

Each geom of MuJoCo's compiled model (`geom_type`, `geom_size`, `geom_pos`, `geom_quat`,
`geom_bodyid`) is drawn as a wire outline: points pₖ in its geom frame, its pieces separated
by rows of NaN (where matplotlib breaks a line), carried into its body's frame,

    sₖ = geom_pos + A(geom_quat) pₖ,

and at a configuration q, with (x_b, R_b) the body's frame from the model's forward
kinematics (`Tree.frames` in joint coordinates), drawn at x_b + R_b sₖ.

Outlines in the geom frame, with MuJoCo's `geom_size` and circles of `SEGMENTS` chords:

- sphere (r) and ellipsoid (a, b, c): the three principal sections (ellipses in the planes
  xy, yz, zx);
- capsule (r, h, its half-length along z): the rims (radius r at z = ±h) and, in the planes
  xz and yz, the profile: the sides at ±r from z = −h to h joined by half circles of
  radius r about z = ±h;
- cylinder (r, h): the rims at z = ±h and four sides;
- box (a, b, c, half-sizes): its twelve edges.

Planes (infinite), height fields, meshes and SDFs are not drawn (the import's report notes
them).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from .._internal.compile import quick_jit
from .._internal.types import Array

#: Chords per full circle of an outline.
SEGMENTS = 32
_BREAK = np.full((1, 3), np.nan)
_EX, _EY, _EZ = np.eye(3)


def _arc(u: np.ndarray, v: np.ndarray, centre: np.ndarray, t0: float, t1: float) -> np.ndarray:
    """Points centre + cos t u + sin t v for t from t0 to t1 (a full turn: SEGMENTS chords)."""
    t = np.linspace(t0, t1, round(SEGMENTS * (t1 - t0) / (2 * np.pi)) + 1)
    return centre + np.cos(t)[:, None] * u + np.sin(t)[:, None] * v


def _pieces(*pieces: np.ndarray) -> np.ndarray:
    """The polylines joined into one array, a NaN row between two."""
    out = [pieces[0]]
    for p in pieces[1:]:
        out += [_BREAK, p]
    return np.concatenate(out)


def _sections(a: float, b: float, c: float) -> np.ndarray:
    return _pieces(
        _arc(a * _EX, b * _EY, 0 * _EZ, 0, 2 * np.pi),
        _arc(b * _EY, c * _EZ, 0 * _EZ, 0, 2 * np.pi),
        _arc(c * _EZ, a * _EX, 0 * _EZ, 0, 2 * np.pi),
    )


def _rims(r: float, h: float) -> tuple[np.ndarray, np.ndarray]:
    return (_arc(r * _EX, r * _EY, z * h * _EZ, 0, 2 * np.pi) for z in (-1, 1))


def _capsule(r: float, h: float) -> np.ndarray:
    profiles = [
        np.concatenate(
            [
                _arc(r * u, r * _EZ, h * _EZ, 0, np.pi),  # over the top, +u to −u
                _arc(r * u, r * _EZ, -h * _EZ, np.pi, 2 * np.pi),  # under the bottom, −u to +u
                [r * u + h * _EZ],  # up the side at +u, closed
            ]
        )
        for u in (_EX, _EY)
    ]
    return _pieces(*_rims(r, h), *profiles)


def _cylinder(r: float, h: float) -> np.ndarray:
    sides = [np.stack([r * u - h * _EZ, r * u + h * _EZ]) for u in (_EX, _EY, -_EX, -_EY)]
    return _pieces(*_rims(r, h), *sides)


def _box(a: float, b: float, c: float) -> np.ndarray:
    square = np.array([[1, 1], [-1, 1], [-1, -1], [1, -1], [1, 1]]) * (a, b)
    loops = [np.column_stack([square, np.full(5, z * c)]) for z in (-1, 1)]
    edges = [np.array([[x, y, -c], [x, y, c]]) for x, y in square[:4]]
    return _pieces(*loops, *edges)


#: The outline of each drawn geom type (MuJoCo's `mjtGeom` name, lower case, without
#: `mjGEOM_`) from the three entries of its `geom_size`.
_SHAPES = {
    "sphere": lambda r, _, __: _sections(r, r, r),
    "ellipsoid": _sections,
    "capsule": lambda r, h, _: _capsule(r, h),
    "cylinder": lambda r, h, _: _cylinder(r, h),
    "box": _box,
}
#: The geom types drawn.
DRAWN = tuple(_SHAPES)


def outline(kind: str, size: np.ndarray) -> np.ndarray:
    """The wire outline of a drawn geom type (`DRAWN`) in its geom frame, shape (k, 3),
    pieces separated by NaN rows (module docstring)."""
    if kind not in _SHAPES:
        raise ValueError(f"no outline for geom type {kind!r}; drawn: {DRAWN}")
    return _SHAPES[kind](*(float(s) for s in size))


@dataclasses.dataclass(frozen=True, eq=False)
class Geom:
    """One geom of the compiled model: its name, type (`mjtGeom` lower case: `"box"`), body
    (MuJoCo's index, 0 the world), `size` (`geom_size`), and its frame in the body's:
    `pos` (`geom_pos`) and `rot` = A(`geom_quat`)."""

    name: str
    kind: str
    body: int
    size: np.ndarray
    pos: np.ndarray
    rot: np.ndarray

    def points(self) -> np.ndarray:
        """The outline in the body's frame, sₖ = pos + rot pₖ, shape (k, 3)."""
        return self.pos + outline(self.kind, self.size) @ self.rot.T


@dataclasses.dataclass(frozen=True, eq=False)
class Geometry:
    """What `jaxmbs.snapshot` and `jaxmbs.animate` draw of an imported model: its geoms and
    the map `frames: q ↦ (x, R)` from the mechanism's coordinates to every MuJoCo body's
    frame, shapes (nbody, 3) and (nbody, 3, 3) (`Tree.frames` in joint coordinates). An
    imported mechanism carries it among its `drawings`, so the pictures find it there."""

    body_names: tuple[str, ...]
    geoms: tuple[Geom, ...]
    frames: Callable[[Array], tuple[Array, Array]]

    def outlines(self, q: np.ndarray) -> tuple[tuple[str, np.ndarray], ...]:
        """Per body with drawn geoms, its name and its geoms' outlines at each configuration
        of q (T, n): x_b + R_b sₖ, shape (T, k, 3), the geoms separated by NaN rows."""
        local: dict[int, list[np.ndarray]] = {}
        for g in self.geoms:
            if g.kind in DRAWN:
                local.setdefault(g.body, []).append(g.points())
        if not local:
            return ()
        x, R = (np.asarray(a) for a in quick_jit(jax.vmap(self.frames))(jnp.asarray(q)))
        return tuple(
            (self.body_names[b], x[:, b, None, :] + np.einsum("tij,kj->tki", R[:, b], s))
            for b, s in ((b, _pieces(*parts)) for b, parts in sorted(local.items()))
        )
