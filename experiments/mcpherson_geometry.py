"""3-D drawing of the two McPherson struts (`jaxmbs.models.mcpherson`), with the path of the
wheel centre over the 10 s of the comparison.

The paper's Fig. 1 is missing; this is the geometry designed from its Table 1 (see the model's
docstring). Left: the simplified strut (revolute joint A); right: the redundant strut (ball
joints at the bushings A_a, A_b and the second piston-rod guide at D).

    python experiments/mcpherson_geometry.py [--out experiments/results/mcpherson] [--no-motion]
"""

from __future__ import annotations

import argparse
import pathlib
import sys

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import mcpherson  # noqa: E402

#: Polylines of hardpoints drawn for each body (paper numbering in the legend).
BODY_LINES = {
    "1 arm": [("A", "B"), ("A_a", "A_b")],
    "2 strut + knuckle": [("B", "C"), ("C", "D"), ("E", "H"), ("F", "G"), ("G", "I")],
    "3 piston rod": [("J", "K")],
    "4 tie rod": [("I", "L")],
    "5 rack": [("L", "N")],
}


def wheel_path(mech) -> np.ndarray:
    q0, qd0 = mcpherson.initial_state(mech)
    sol = jaxmbs.simulate(mech, q0, qd0, (0.0, 10.0), saveat=jnp.linspace(0.0, 10.0, 401))
    return np.asarray(jax.vmap(lambda q: mcpherson.wheel_centre(mech, q))(sol.q))


def draw(path: pathlib.Path, motion: bool) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = mcpherson.design_hardpoints()
    fig = plt.figure(figsize=(12, 6))
    for k, redundant in enumerate((False, True)):
        ax = fig.add_subplot(1, 2, k + 1, projection="3d")
        for (label, lines), color in zip(BODY_LINES.items(), plt.cm.tab10.colors, strict=False):
            for i, (a, b) in enumerate(lines):
                xyz = np.array([points[a], points[b]]).T
                ax.plot(*xyz, color=color, lw=3, label=label if i == 0 else None)
        ground = ["A_a", "A_b", "K", "L"] if redundant else ["A", "K", "L"]
        for name, p in points.items():
            ax.text(*p, f" {name}", fontsize=7)
        g = np.array([points[n] for n in ground]).T
        ax.scatter(*g, color="k", marker="s", s=30, label="chassis (ground) joints")
        if redundant:
            ax.scatter(*points["D"], color="r", s=30, label="second rod guide (redundant)")
        if motion:
            mech = mcpherson.mcpherson(redundant)
            ax.plot(*wheel_path(mech).T, "k:", lw=1, label="wheel centre H, 10 s")
        ax.set_title(
            "redundant strut (Fig. 1b): A_a, A_b ball joints + guide"
            if redundant
            else "simplified strut (Fig. 1a): revolute A"
        )
        ax.set_xlabel("x (forward) [m]")
        ax.set_ylabel("y (outboard) [m]")
        ax.set_zlabel("z (up) [m]")
        ax.set_box_aspect((1, 1, 1))
        ax.view_init(elev=18, azim=-60)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Draw the McPherson strut geometry.")
    parser.add_argument("--out", default="experiments/results/mcpherson")
    parser.add_argument("--no-motion", action="store_true", help="skip the wheel-centre path")
    args = parser.parse_args(argv)
    folder = pathlib.Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fig1_geometry.png"
    draw(path, motion=not args.no_motion)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
