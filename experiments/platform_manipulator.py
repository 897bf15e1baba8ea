"""Platform manipulator of Attia 2005 (§7, Fig. 4) in three coordinate choices.

The planar 3-DOF manipulator (`jaxmbs.models.platform`: three RRR legs, Table 1 masses,
gravity and a 10 N horizontal force at the platform centre, start at rest) simulated in

- joint coordinates θ (7 coordinates, 4 cut-joint constraints; eqs 6.5–6.8),
- equivalent particles (16 coordinates, 13 constraints; §2–§5),
- absolute coordinates (x, y, φ) (21 coordinates, 18 constraints),

with the same solver, tolerance and formulation. It draws the platform's trajectory (the
oscillation under gravity and the force, Fig. 4) and writes a table: sizes, steps, RHS
evaluations, compile time, steady-state time (median of repeated runs, all in this one
process) and its ratio to the absolute coordinates, the deviation of the platform pose from
the joint-coordinate solution, the constraint residual and the energy balance
E(t) − E(0) − F (x(t) − x(0)).

    python experiments/platform_manipulator.py [--t1 10] [--tol 1e-10] [--repeats 5]
        [--out results/platform_manipulator]

Writes `fig4_platform_trajectory.png` and `comparison.md` into the output folder.
"""

from __future__ import annotations

import argparse
import pathlib
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import platform as pf  # noqa: E402

KINDS = {"joint": "joint coordinates θ", "particles": "particles", "absolute": "absolute (x, y, φ)"}


def prepare(kind: str, t1: float, tol: float, points: int) -> dict:
    """Build one coordinate choice and its solve; the first call compiles it."""
    mech = getattr(pf, kind)()
    q0, qd0 = pf.initial_state(mech)
    ts = jnp.linspace(0.0, t1, points)

    def solve():
        sol = jaxmbs.simulate(mech, q0, qd0, (0.0, t1), saveat=ts, rtol=tol, atol=tol)
        return jax.block_until_ready(sol)

    start = time.perf_counter()
    sol = solve()
    first = time.perf_counter() - start
    pose = np.asarray(pf.platform_pose(mech, sol.q))
    energy = np.asarray(sol.energy)
    work = float(mech.params["F"]) * (pose[:, 0] - pose[0, 0])
    return {
        "kind": kind,
        "solve": solve,
        "first": first,
        "times": [],
        "n": mech.n,
        "m": mech.n_holonomic,
        "dof": mech.structure.dof,
        "steps": int(sol.stats["num_steps"]),
        "rejected": int(sol.stats["num_rejected_steps"]),
        "rhs": int(sol.stats["rhs_evaluations"]),
        "residual": float(np.max(np.asarray(sol.position_residual))),
        "energy_balance": float(np.max(np.abs(energy - energy[0] - work))),
        "ts": np.asarray(ts),
        "pose": pose,
    }


def time_interleaved(rows: list[dict], repeats: int) -> None:
    """Steady-state times, the coordinate choices taking turns so that a changing machine
    load affects them alike; median per choice, compile time = first call − median."""
    for _ in range(repeats):
        for r in rows:
            start = time.perf_counter()
            r["solve"]()
            r["times"].append(time.perf_counter() - start)
    for r in rows:
        r["steady"] = statistics.median(r["times"])
        r["compile"] = r["first"] - r["steady"]


def pose_deviation(pose: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """max |Δx|, |Δy|, |Δφ| (angle wrapped) at each output time."""
    dev = np.abs(pose - reference)
    dev[:, 2] = np.abs(np.angle(np.exp(1j * (pose[:, 2] - reference[:, 2]))))
    return dev.max(axis=1)


def table(rows: list[dict], t1: float, tol: float) -> str:
    base = next(r for r in rows if r["kind"] == "absolute")
    reference = next(r for r in rows if r["kind"] == "joint")
    half = reference["ts"] <= t1 / 2
    lines = [
        f"Platform manipulator, {t1:g} s, Tsit5, rtol = atol = {tol:g}, QR null space, "
        f"projection; times measured in one process (median of {len(rows[0]['times'])} "
        "interleaved runs).",
        "",
        "| coordinates | n | constraints | dof | steps | rejected | RHS evals | compile (s) "
        f"| steady (s) | time / absolute | pose dev. from θ, t ≤ {t1 / 2:g} s "
        f"| pose dev. from θ, t ≤ {t1:g} s | max abs(Φ) | energy balance error (J) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        dev = pose_deviation(r["pose"], reference["pose"])
        lines.append(
            f"| {KINDS[r['kind']]} | {r['n']} | {r['m']} | {r['dof']} | {r['steps']} "
            f"| {r['rejected']} | {r['rhs']} | {r['compile']:.1f} | {r['steady']:.3f} "
            f"| {r['steady'] / base['steady']:.2f} | {dev[half].max():.1e} | {dev.max():.1e} "
            f"| {r['residual']:.1e} | {r['energy_balance']:.1e} |"
        )
    lines += [
        "",
        "The motion is sensitive to small perturbations (a large-amplitude passive linkage): "
        "differences of the order of the integration error grow by about three orders of "
        "magnitude between 5 s and 10 s, in any one coordinate choice as between them.",
    ]
    return "\n".join(lines) + "\n"


def figure(rows: list[dict], path: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_path, ax_time) = plt.subplots(1, 2, figsize=(11, 4.5))
    styles = {"joint": "-", "particles": "--", "absolute": ":"}
    for r in rows:
        x, y = r["pose"][:, 0], r["pose"][:, 1]
        ax_path.plot(x, y, styles[r["kind"]], label=KINDS[r["kind"]], lw=1.2)
    reference = next(r for r in rows if r["kind"] == "joint")
    ax_path.plot(*reference["pose"][0, :2], "ko", label="start (rest)")
    ax_path.set(xlabel="x of platform centre (m)", ylabel="y (m)", title="platform trajectory")
    ax_path.set_aspect("equal", adjustable="datalim")
    ax_path.legend(fontsize=8)
    ts, pose = reference["ts"], reference["pose"]
    for i, label in enumerate(("x (m)", "y (m)", "φ (rad)")):
        ax_time.plot(ts, pose[:, i], label=label)
    ax_time.set(xlabel="t (s)", title="platform pose (joint coordinates)")
    ax_time.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--t1", type=float, default=10.0, help="end time in s (default 10)")
    parser.add_argument("--tol", type=float, default=1e-10, help="rtol = atol (default 1e-10)")
    parser.add_argument("--points", type=int, default=1001, help="output points (default 1001)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs (default 5)")
    parser.add_argument("--out", default="results/platform_manipulator", help="output folder")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [prepare(kind, args.t1, args.tol, args.points) for kind in KINDS]
    time_interleaved(rows, args.repeats)
    text = table(rows, args.t1, args.tol)
    (out / "comparison.md").write_text(text)
    figure(rows, out / "fig4_platform_trajectory.png")
    print(text)
    print(f"wrote {out / 'comparison.md'} and {out / 'fig4_platform_trajectory.png'}")


if __name__ == "__main__":
    main()
