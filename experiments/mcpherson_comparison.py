"""The comparison of Pękal–Frączek 2016 (§4, Figs. 2–5) on the two McPherson struts.

Every formulation in `jaxmbs.METHODS` × {simplified, redundant strut} × {no stabilisation,
Baumgarte α = β = 10, projection} × tolerances {1e-3, 1e-6, 1e-8, 1e-10} (rtol = atol),
10 s of motion from the design position at rest, explicit Runge–Kutta (Tsit5) with PID step
control. For each run: steady-state compute time (median of repeated calls of the compiled
solve; compilation measured apart, once per strut × stabilisation × method, since the
tolerance is traced), steps, RHS evaluations, and the largest position and velocity
constraint violation at 201 output times. The same QR method in NumPy + SciPy (RK45, the
hand-derived strut of `benchmarks/numpy_mcpherson.py`) is measured in the same run as the
baseline row (no stabilisation and Baumgarte).

Writes `results.md` (table and ratios), `results.json` and the figures `fig2_simplified.png`,
`fig3_redundant.png` (a: none, b: Baumgarte), `fig4_simplified_projection.png` and
`fig5_redundant_projection.png` to the results folder.

    python experiments/mcpherson_comparison.py --quick      # a small subset, a few minutes
    python experiments/mcpherson_comparison.py              # the full comparison
"""

from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import mcpherson  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "benchmarks"))
import numpy_mcpherson  # noqa: E402

STRUTS = {
    "simplified": mcpherson.mcpherson_simplified,
    "redundant": mcpherson.mcpherson_redundant,
}
STABILIZATIONS = {
    "none": jaxmbs.NoStabilization(),
    "baumgarte": jaxmbs.Baumgarte(alpha=10.0, beta=10.0),
    "projection": jaxmbs.Projection(),
}
TOLERANCES = (1e-3, 1e-6, 1e-8, 1e-10)
N_OUTPUT = 201


def compiled_solve(mech, q0, qd0, t1: float, method: str, stabilization):
    """AOT-compiled (tol) -> run summary; returns (executable, compile seconds)."""

    def run(tol):
        sol = jaxmbs.simulate(
            mech,
            q0,
            qd0,
            (0.0, t1),
            saveat=jnp.linspace(0.0, t1, N_OUTPUT),
            method=method,
            stabilization=stabilization,
            rtol=tol,
            atol=tol,
            max_steps=200_000,
            throw=False,
        )
        return {
            "steps": sol.stats["num_steps"],
            "rejected": sol.stats["num_rejected_steps"],
            "rhs": sol.stats["rhs_evaluations"],
            "position": jnp.nanmax(sol.position_residual),
            "velocity": jnp.nanmax(sol.velocity_residual),
            "result": sol.result,
            "final": sol.q[-1],
        }

    start = time.perf_counter()
    executable = jax.jit(run).lower(jnp.asarray(1e-6)).compile()
    return executable, time.perf_counter() - start


def timed(fn, repeats: int):
    """Median CPU time (this process, all threads) and median wall time of `repeats` calls
    after one warm-up call, and the last output. On a shared machine the CPU time is the
    steadier measure of the work done; both are reported."""
    out = jax.block_until_ready(fn())
    cpu, wall = [], []
    for _ in range(repeats):
        start_cpu, start_wall = time.process_time(), time.perf_counter()
        out = jax.block_until_ready(fn())
        cpu.append(time.process_time() - start_cpu)
        wall.append(time.perf_counter() - start_wall)
    return statistics.median(cpu), statistics.median(wall), out


def numpy_run(strut_name: str, stabilization: str, tol: float, t1: float, q0, qd0):
    """The QR method in NumPy + SciPy RK45; Baumgarte via Γ̄ = Γ − 2αΦ̇ − β²Φ."""
    strut = numpy_mcpherson.Strut(redundant=strut_name == "redundant")
    if stabilization == "baumgarte":
        strut.baumgarte = (10.0, 10.0)
    start_cpu = time.process_time()
    res, wall = numpy_mcpherson.simulate(
        strut, np.asarray(q0), np.asarray(qd0), t1, tol, t_eval=np.linspace(0.0, t1, N_OUTPUT)
    )
    cpu = time.process_time() - start_cpu
    n = numpy_mcpherson.N
    position = max(np.abs(strut.rows(y[:n], y[n:])[0]).max() for y in res.y.T)
    velocity = max(np.abs(strut.rows(y[:n], y[n:])[1] @ y[n:]).max() for y in res.y.T)
    return {
        "strut": strut_name,
        "stabilization": stabilization,
        "method": "qr (NumPy+SciPy)",
        "tol": tol,
        "time": cpu,
        "wall": wall,
        "compile": 0.0,
        "steps": (int(res.nfev) - 2) // 6,  # RK45: 6 evaluations per attempted step, 2 to start
        "rhs": int(res.nfev),
        "position": float(position),
        "velocity": float(velocity),
        "result": "ok" if res.success else res.message,
    }


def run_all(args) -> list[dict]:
    rows = []
    for strut_name in args.struts:
        mech = STRUTS[strut_name]()
        q0, qd0 = mcpherson.initial_state(mech)
        for stab_name in args.stabilizations:
            for method in args.methods:
                executable, compile_s = compiled_solve(
                    mech, q0, qd0, args.t1, method, STABILIZATIONS[stab_name]
                )
                for tol in args.tolerances:
                    call = lambda tol=tol, run=executable: run(jnp.asarray(tol))  # noqa: E731
                    cpu, wall, out = timed(call, args.repeats)
                    code = out["result"]
                    row = {
                        "strut": strut_name,
                        "stabilization": stab_name,
                        "method": method,
                        "tol": tol,
                        "time": cpu,
                        "wall": wall,
                        "compile": compile_s,
                        "steps": int(out["steps"]),
                        "rhs": int(out["rhs"]),
                        "position": float(out["position"]),
                        "velocity": float(out["velocity"]),
                        "result": jaxmbs.RESULTS[code] or "ok",
                    }
                    rows.append(row)
                    print(_line(row), flush=True)
            if stab_name in args.numpy_stabilizations:
                for tol in args.numpy_tolerances:
                    row = numpy_run(strut_name, stab_name, tol, args.t1, q0, qd0)
                    rows.append(row)
                    print(_line(row), flush=True)
    return rows


def _line(row: dict) -> str:
    return (
        f"{row['strut']:10s} {row['stabilization']:10s} {row['method']:18s} tol {row['tol']:.0e}: "
        f"CPU {row['time'] * 1e3:8.1f} ms, wall {row['wall'] * 1e3:8.1f} ms "
        f"(compile {row['compile']:5.1f} s), steps {row['steps']:6d}, "
        f"RHS {row['rhs']:7d}, |Φ| {row['position']:.1e}, |Φ̇| {row['velocity']:.1e} {row['result']}"
    )


def write_table(rows: list[dict], path: pathlib.Path) -> None:
    header = (
        "| strut | stabilisation | method | tol | CPU time [ms] | wall [ms] | compile [s] | steps "
        "| RHS evals | max abs Φ | max abs Φ̇ | result |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['strut']} | {r['stabilization']} | {r['method']} | {r['tol']:.0e} | "
        f"{r['time'] * 1e3:.1f} | {r['wall'] * 1e3:.1f} | {r['compile']:.1f} | {r['steps']} | "
        f"{r['rhs']} | "
        f"{r['position']:.1e} | {r['velocity']:.1e} | {r['result']} |"
        for r in rows
    ]
    ratios = _ratios(rows)
    text = (
        "# McPherson strut comparison (Pękal–Frączek 2016, §4)\n\n"
        f"jax {jax.__version__}, {jax.devices()[0].platform}, float64. CPU time = median CPU "
        "time of this process for one steady-state call of the compiled 10 s solve (compilation "
        "apart, once per strut × stabilisation × method); wall = median wall time. Steps are "
        "attempted steps (accepted + rejected).\n\n"
        + header
        + "\n".join(lines)
        + "\n\n## Ratios measured in this run\n\n"
        + "\n".join(ratios)
        + "\n"
    )
    path.write_text(text)


def _ratios(rows: list[dict]) -> list[str]:
    """NumPy/JAX QR time ratio, and each method's time relative to QR, per case."""
    out = []
    by_case = {}
    for r in rows:
        by_case.setdefault((r["strut"], r["stabilization"], r["tol"]), {})[r["method"]] = r
    for (strut, stab, tol), methods in sorted(by_case.items()):
        qr = methods.get("qr")
        if qr is None:
            continue
        parts = [
            f"{m} {r['time'] / qr['time']:.2f}"
            for m, r in methods.items()
            if m != "qr" and r["time"] > 0
        ]
        out.append(
            f"- {strut}, {stab}, tol {tol:.0e}: CPU time / CPU time(qr, JAX): " + ", ".join(parts)
        )
    return out


def plot(rows: list[dict], folder: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figures = {
        "fig2_simplified.png": ("simplified", ("none", "baumgarte")),
        "fig3_redundant.png": ("redundant", ("none", "baumgarte")),
        "fig4_simplified_projection.png": ("simplified", ("projection",)),
        "fig5_redundant_projection.png": ("redundant", ("projection",)),
    }
    for filename, (strut, stabs) in figures.items():
        fig, axes = plt.subplots(1, len(stabs), figsize=(5.5 * len(stabs), 4.2), squeeze=False)
        drawn = False
        for ax, stab in zip(axes[0], stabs, strict=True):
            case = [r for r in rows if r["strut"] == strut and r["stabilization"] == stab]
            for method in dict.fromkeys(r["method"] for r in case):
                pts = sorted((r["tol"], r["time"]) for r in case if r["method"] == method)
                style = "--" if "NumPy" in method else "-o"
                ax.loglog(*zip(*pts, strict=True), style, label=method, markersize=4)
                drawn = True
            ax.invert_xaxis()
            ax.set_xlabel("tolerance (rtol = atol)")
            ax.set_ylabel("CPU time for 10 s of motion [s]")
            ax.set_title(f"{strut} strut, {stab}")
            ax.grid(True, which="both", alpha=0.3)
            if case:
                ax.legend(fontsize=7)
        if drawn:
            fig.tight_layout()
            fig.savefig(folder / filename, dpi=120)
        plt.close(fig)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small subset (both struts, none and projection, tolerances 1e-6 and 1e-8)",
    )
    parser.add_argument("--out", default="experiments/results/mcpherson", help="results folder")
    parser.add_argument("--t1", type=float, default=10.0, help="simulated time (s)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls per run")
    parser.add_argument("--methods", nargs="+", default=list(jaxmbs.METHODS))
    args = parser.parse_args(argv)
    args.struts = list(STRUTS)
    if args.quick:
        args.stabilizations = ["none", "projection"]
        args.tolerances = (1e-6, 1e-8)
        args.numpy_stabilizations, args.numpy_tolerances = ("none",), (1e-6,)
        args.repeats = min(args.repeats, 2)
    else:
        args.stabilizations = list(STABILIZATIONS)
        args.tolerances = TOLERANCES
        args.numpy_stabilizations, args.numpy_tolerances = ("none", "baumgarte"), TOLERANCES
    folder = pathlib.Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    rows = run_all(args)
    (folder / "results.json").write_text(json.dumps(rows, indent=1))
    write_table(rows, folder / "results.md")
    plot(rows, folder)
    elapsed = time.perf_counter() - start
    print(f"wrote {folder}/results.md, results.json and figures in {elapsed:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
