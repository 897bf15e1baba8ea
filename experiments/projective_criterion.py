"""Four-bar projective criterion (Blajer, Schiehlen, Schirm 1994, Fig. 3 and §6).

The four-bar in relative coordinates q = [α1, α2, α3] (cut at O4) with a crank at O1, so that
α1 is never singular. Over α1 ∈ [0, 2π] it evaluates cos²α of every coordinate (eq 23a) and
checks the paper's statements: α3 is the worst choice and singular at α1 = π/2 and 3π/2; α1
and α2 take turns as the best; the projective criterion moves with the link masses while the
geometry-only SVD criterion does not. It then integrates the linkage whose short link sits at
O4 (α1 singular twice a turn) with switching, as the partitioned and the closing-condition
formulations, against the QR null-space method.

    python experiments/projective_criterion.py [--out results/projective_criterion]

Writes `fig3_projective_criterion.png` and `summary.md` into the output folder.
"""

from __future__ import annotations

import argparse
import pathlib
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import fourbar_relative as fr  # noqa: E402

NAMES = ("α1", "α2", "α3")
HEAVY_CRANK = {"m1": 6.0, "m2": 1.0, "m3": 0.2}  # the second mass distribution


def criteria(mech, alpha1: np.ndarray, params: dict):
    """Projective cos²α, cos²β and the SVD criterion at the assembled configurations."""
    qs = jnp.asarray(np.stack([fr.configuration(mech.params, a) for a in alpha1]))

    @jax.jit
    def run(qs, params):
        proj = jax.vmap(lambda q: jaxmbs.projective_criterion(mech, q, params=params))(qs)
        return proj, jax.vmap(lambda q: jaxmbs.svd_criterion(mech, q, params=params))(qs)

    (alpha, beta), svd = run(qs, params)
    return np.asarray(alpha), np.asarray(beta), np.asarray(svd)


def best_changes(alpha1: np.ndarray, values: np.ndarray) -> str:
    """Where the best coordinate changes, as text: "α1 value (from → to), …"."""
    best = np.argmax(values, axis=1)
    idx = np.flatnonzero(np.diff(best))
    if len(idx) == 0:
        return f"none ({NAMES[best[0]]} is best everywhere)"
    return ", ".join(
        f"{alpha1[i + 1]:.3f} rad ({NAMES[best[i]]} → {NAMES[best[i + 1]]})" for i in idx
    )


def simulations(mech) -> list[dict]:
    """The linkage with the short link at O4 (α1 singular twice a turn) for 3 s."""
    params = dict(fr.CRANK_AT_O4)
    q0, qd0 = fr.initial_state(mech.replace_params(params), 2.8, -4.0)
    ts = jnp.linspace(0.0, 3.0, 301)
    common = {"params": params, "saveat": ts, "rtol": 1e-12, "atol": 1e-12, "throw": False}
    runs = {
        "QR null space (q, q̇)": lambda: jaxmbs.simulate(mech, q0, qd0, (0.0, 3.0), **common),
        "partitioned, switching (q, v_I)": lambda: jaxmbs.simulate_partitioned(
            mech, q0, qd0, (0.0, 3.0), independent=("alpha1",), **common
        ),
        "partitioned, α1 fixed": lambda: jaxmbs.simulate_partitioned(
            mech, q0, qd0, (0.0, 3.0), independent=("alpha1",), switching=False, **common
        ),
        "closing conditions a/b, switching (q_I, v_I)": lambda: jaxmbs.simulate_closing(
            mech, fr.closing_variants(), q0, qd0, (0.0, 3.0), **common
        ),
        "closing condition a only": lambda: jaxmbs.simulate_closing(
            mech, fr.closing_variants()[0], q0, qd0, (0.0, 3.0), switching=False, **common
        ),
    }
    rows = []
    for name, run in runs.items():
        start = time.perf_counter()
        sol = run()
        jax.block_until_ready(sol.q)
        elapsed = time.perf_counter() - start
        finite = np.all(np.isfinite(np.asarray(sol.q)), axis=1)
        kinetic = jax.vmap(lambda q, qd: 0.5 * qd @ mech.mass_matrix(q, params) @ qd)(
            sol.q[finite], sol.qd[finite]
        )
        energy = np.asarray(sol.energy)[finite]
        rows.append(
            {
                "name": name,
                "result": jaxmbs.integrate.RESULT_NAMES[
                    int(jaxmbs.integrate.result_index(sol.result))
                ],
                "t_end": float(np.asarray(sol.ts)[finite][-1]),
                "steps": int(sol.stats["num_steps"]),
                "switches": int(sol.stats.get("num_switches", 0)),
                "phi": float(np.max(np.asarray(sol.position_residual)[finite])),
                "drift": float(np.max(np.abs(energy - energy[0])) / np.max(kinetic)),
                "seconds": elapsed,
            }
        )
    return rows


def plot(path, alpha1, base, heavy, svd_base, svd_heavy):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    deg = np.degrees(alpha1)
    for i, colour in enumerate(("C0", "C1", "C2")):
        axes[0].plot(deg, base[:, i], colour, label=f"{NAMES[i]}, m = 1, 1, 1")
        axes[0].plot(deg, heavy[:, i], colour, ls="--", label=f"{NAMES[i]}, m = 6, 1, 0.2")
        axes[1].plot(deg, svd_base[:, i], colour, label=f"{NAMES[i]}, m = 1, 1, 1")
        axes[1].plot(deg, svd_heavy[:, i], colour, ls=":", lw=3, alpha=0.6,
                     label=f"{NAMES[i]}, m = 6, 1, 0.2")  # fmt: skip
    axes[0].set_title("projective criterion cos²α (eq 23a)")
    axes[1].set_title("SVD criterion (geometry only)")
    for ax in axes:
        ax.set_xlabel("α1 [deg]")
        ax.set_xticks(range(0, 361, 90))
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("criterion")
    axes[0].legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=130)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results/projective_criterion", type=pathlib.Path)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    mech = fr.fourbar_relative()
    alpha1 = np.linspace(0.0, 2 * np.pi, 721)
    base, beta, svd_base = criteria(mech, alpha1, mech.params)
    heavy, _, svd_heavy = criteria(mech, alpha1, {**mech.params, **HEAVY_CRANK})
    plot(args.out / "fig3_projective_criterion.png", alpha1, base, heavy, svd_base, svd_heavy)

    quarter = [np.argmin(np.abs(alpha1 - a)) for a in (np.pi / 2, 3 * np.pi / 2)]
    worst = np.mean(np.argmin(base, axis=1) == 2)
    rows = simulations(mech)
    p = mech.params
    lines = [
        "# Four-bar projective criterion (Blajer, Schiehlen, Schirm 1994, Fig. 3)",
        "",
        f"Links l0 = {p['l0']}, l1 = {p['l1']}, l2 = {p['l2']}, l3 = {p['l3']} (crank at O1, "
        "α1 never singular); uniform rods. Grid: 721 values of α1 in [0, 2π].",
        "",
        "| | α1 | α2 | α3 |",
        "|---|---|---|---|",
        "| min cos²α (m = 1, 1, 1) | " + " | ".join(f"{v:.4f}" for v in base.min(0)) + " |",
        "| max cos²α (m = 1, 1, 1) | " + " | ".join(f"{v:.4f}" for v in base.max(0)) + " |",
        "| cos²α at α1 = π/2 | " + " | ".join(f"{v:.2e}" for v in base[quarter[0]]) + " |",
        "| cos²α at α1 = 3π/2 | " + " | ".join(f"{v:.2e}" for v in base[quarter[1]]) + " |",
        "| min cos²α (m = 6, 1, 0.2) | " + " | ".join(f"{v:.4f}" for v in heavy.min(0)) + " |",
        "| max cos²α (m = 6, 1, 0.2) | " + " | ".join(f"{v:.4f}" for v in heavy.max(0)) + " |",
        "",
        f"- α3 is the worst coordinate at {100 * worst:.1f} % of the grid points and vanishes "
        "at α1 = π/2 and 3π/2 (singular choice).",
        f"- max |cos²α + cos²β − 1| = {np.max(np.abs(base + beta - 1)):.1e} (β from eq 23b).",
        f"- best coordinate changes (m = 1, 1, 1): {best_changes(alpha1, base)}",
        f"- best coordinate changes (m = 6, 1, 0.2): {best_changes(alpha1, heavy)}",
        f"- changing the masses moves cos²α by up to {np.max(np.abs(heavy - base)):.3f}; "
        f"the SVD criterion moves by {np.max(np.abs(svd_heavy - svd_base)):.1e}.",
        f"- SVD criterion best-coordinate changes (any masses): {best_changes(alpha1, svd_base)}",
        "",
        "## Integration through configurations singular for α1",
        "",
        "Links l0 = 1, l1 = 0.8, l2 = 1, l3 = 0.3 (the short link at O4 turns fully, so links "
        "2 and 3 line up twice a turn: sin α3 = 0); start α1 = 2.8, α̇1 = −4; 3 s; Tsit5, "
        "rtol = atol = 1e-12. Energy drift relative to the largest kinetic energy. Seconds "
        "include compilation.",
        "",
        "| formulation | result | reached t | steps | switches | max abs(Φ) | energy drift | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['result']} | {r['t_end']:.3f} | "
            f"{r['steps']} | {r['switches']} | {r['phi']:.1e} | {r['drift']:.1e} | "
            f"{r['seconds']:.1f} |"
        )
    (args.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
