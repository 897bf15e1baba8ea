"""`python -m benchmarks [--quick] [--json out.json]`: the performance table, in one run.

Prints each case with its measured ratio next to the target, then the details (compile
times, steps, RHS evaluations, final-state errors), and writes everything as JSON.
"""

from __future__ import annotations

import argparse
import json
import os

import jax

jax.config.update("jax_enable_x64", True)
# Every core a CPU device, so that a batch can be sharded over them (`jaxmbs.monte_carlo`);
# single runs use the first one. Must precede the first JAX computation.
from .suite import suite_row, usable_cpus  # noqa: E402

jax.config.update("jax_num_cpu_devices", usable_cpus())

from . import core  # noqa: E402
from .compile import compile_budget  # noqa: E402
from .compile import rows as compile_rows  # noqa: E402

#: GPU results recorded by `benchmarks/mjx.py` (not measured by this command).
GPU_RECORD = os.path.join(os.path.dirname(__file__), "gpu_mjx_h200.json")


def gpu_rows() -> list[tuple[str, str, str, str]]:
    """The GPU target rows, read from the last recorded `benchmarks/mjx.py` run."""
    with open(GPU_RECORD) as f:
        record = json.load(f)
    rows = [r for run in record["runs"] for r in run["rows"]]

    def find(code, dtype, setting_start, size=None):
        return next(r for r in rows if r["code"] == code and r["dtype"] == dtype
                    and r["setting"].startswith(setting_start)
                    and (size is None or r["B"] == size))  # fmt: skip

    default = find("jaxmbs", "float64", "rtol = atol = 1e-08", 100_000)
    strut = next(r for r in rows if r["code"].startswith("jaxmbs (McPherson"))
    mjx = find("MJX", "float32", "RK4, dt = 1e-03")
    fast = find("jaxmbs", "float32", "rtol = atol = 1e-05")
    where = f"recorded on one {record['device']}, {record['date']} (`benchmarks/mjx.py`)"
    return [
        ("GPU: four-bar 10-s trajectories per minute, float64, defaults",
         f"{default['per_minute']:.3g}", "≥ 1e6",
         f"B = {default['B']}, crank error ≤ {default['max_error']:.0e}; {where}"),
        ("GPU: McPherson 1-s trajectories per minute, float64, defaults",
         f"{strut['per_minute']:.3g}", "≥ 1e5", f"B = {strut['B']}; {where}"),
        ("GPU: jaxmbs float32 (rtol 1e-5) vs MJX float32 (RK4, dt 1e-3), four-bar",
         f"{fast['per_minute'] / mjx['per_minute']:.0f}×", "faster at equal accuracy",
         f"crank error max {fast['max_error']:.1e} vs {mjx['max_error']:.1e}, median "
         f"{fast['median_error']:.1e} vs {mjx['median_error']:.1e}; {where}"),
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, batch of 256")
    parser.add_argument("--json", default="benchmarks.json", help="where to write the results")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    devices = jax.local_device_count()
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {devices} devices")
    runs = core.single_runs(links=(5, 50), methods=("qr", "banded"), repeats=repeats)
    by = {(r["case"], r["jax"]["method"]): r for r in runs}
    accuracy = core.work_precision(repeats=repeats)
    batch = core.batch_vs_loop(batch=256 if args.quick else 1024)
    gradients = {m: core.gradient_cost(method=m, repeats=repeats) for m in ("qr", "banded")}
    gradient = gradients["banded"]
    plain = core.plain_compile_times()
    budget = compile_budget(repeats=repeats, quarter_car=not args.quick)
    checks = core.checks_cost(repeats=repeats)

    four_qr, four_banded = by["four-bar", "qr"], by["four-bar", "banded"]
    chain50 = by["chain N=50", "banded"]
    growth = chain50["jax"]["time_s"] / by["chain N=5", "banded"]["jax"]["time_s"]
    np5 = by["chain N=5", "banded"]["numpy"]["time_s"]
    best = accuracy["best"]
    table = [
        ("four-bar 10 s vs NumPy+SciPy, QR null space both sides", f"{four_qr['speedup']:.1f}×",
         "≥ 40×", f"jaxmbs {four_qr['jax']['time_s'] * 1e3:.1f} ms, "
         f"NumPy {four_qr['numpy']['time_s'] * 1e3:.0f} ms"),
        ("four-bar 10 s vs NumPy+SciPy, range space both sides (`banded`)",
         f"{four_banded['speedup']:.1f}×", "≥ 40×",
         f"jaxmbs {four_banded['jax']['time_s'] * 1e3:.1f} ms, "
         f"NumPy {four_banded['numpy']['time_s'] * 1e3:.0f} ms; "
         f"vs NumPy QR {four_banded['speedup_vs_numpy_qr']:.1f}×"),
        (f"four-bar at equal accuracy (final error ≤ {accuracy['target_error']:.0e}), range "
         "space, each side's fastest solver and tolerance", f"{accuracy['speedup']:.1f}×",
         "≥ 40×", f"jaxmbs {best['jax']['solver']} at {best['jax']['tol']:.0e}: "
         f"{best['jax']['time_s'] * 1e3:.1f} ms, error {best['jax']['error']:.1e}; "
         f"NumPy {best['numpy']['solver']} at {best['numpy']['tol']:.0e}: "
         f"{best['numpy']['time_s'] * 1e3:.0f} ms, error {best['numpy']['error']:.1e}"),
        ("chain N = 50 vs NumPy+SciPy, range space both sides (`banded`)",
         f"{chain50['speedup']:.1f}×", "≥ 10×", f"jaxmbs {chain50['jax']['time_s']:.2f} s, "
         f"NumPy {chain50['numpy']['time_s']:.2f} s; vs NumPy QR "
         f"{chain50['speedup_vs_numpy_qr']:.1f}×; `qr` vs NumPy QR "
         f"{by['chain N=50', 'qr']['speedup']:.1f}×"),
        ("cost growth chain N = 5 → 50 (`banded`)", f"{growth:.1f}×", "≤ 15×",
         f"NumPy range space: {chain50['numpy']['time_s'] / np5:.1f}×, NumPy QR: "
         f"{chain50['numpy_qr']['time_s'] / by['chain N=5', 'banded']['numpy_qr']['time_s']:.1f}×"),
        ("chain N = 50 (`banded`) with the rank check / with the default options (rank check, "
         "projection), time relative to the bare solve",
         f"{checks['runs']['rank check']['ratio_to_bare']:.2f}× / "
         f"{checks['runs']['default']['ratio_to_bare']:.2f}×", "—",
         f"bare {checks['runs']['bare']['time_s']:.2f} s; compile "
         + ", ".join(f"{k} {v['compile_s']:.1f} s" for k, v in checks["runs"].items())),
        (f"vmap batch of {batch['batch']} four-bars vs single runs",
         f"{batch['speedup']:.1f}×", "≥ 10×",
         f"one chunk over {batch['devices']} devices (one device: "
         f"{batch['speedup_one_device']:.1f}×), {batch['batch_s']:.2f} s vs "
         f"{batch['loop_s']:.1f} s; max abs(batch − single) {batch['max_difference']:.0e}"),
        (f"gradient w.r.t. {gradient['parameters']} parameters / forward solve, `banded`",
         f"reverse {gradient['reverse_ratio']:.1f}×, "
         f"forward mode {gradient['forward_mode_ratio']:.1f}×", "≤ 4×",
         f"vs central differences {gradient['reverse_vs_central_difference']:.0e}"),
        ("same, `qr`",
         f"reverse {gradients['qr']['reverse_ratio']:.1f}×, "
         f"forward mode {gradients['qr']['forward_mode_ratio']:.1f}×", "≤ 4×",
         f"vs central differences {gradients['qr']['reverse_vs_central_difference']:.0e}"),
        ("compile time forward / gradient, plain path (`qr`)",
         f"{plain['compile_forward_s']:.1f} s / {plain['compile_reverse_s']:.1f} s",
         "≤ 2 s / ≤ 5 s",
         "no stabilisation, no rank check, as in the single-run rows"),
        ("compile time forward / gradient, `qr`",
         f"{gradients['qr']['compile_forward_s']:.1f} s / "
         f"{gradients['qr']['compile_reverse_s']:.1f} s "
         f"(forward mode {gradients['qr']['compile_forward_mode_s']:.1f} s)", "≤ 2 s / ≤ 5 s",
         "four-bar, in-jit assembly, projection"),
        ("compile time forward / gradient, `banded`",
         f"{gradient['compile_forward_s']:.1f} s / {gradient['compile_reverse_s']:.1f} s "
         f"(forward mode {gradient['compile_forward_mode_s']:.1f} s)", "≤ 2 s / ≤ 5 s",
         "four-bar, in-jit assembly, projection"),
    ]  # fmt: skip
    table += compile_rows(budget)
    table += [suite_row(), *gpu_rows()]
    print("\n| case | measured | target | detail |")
    print("|---|---|---|---|")
    for row in table:
        print("| " + " | ".join(row) + " |")

    print(
        f"\n{'case':<12} {'method':<7} {'n':>4} {'jax s':>9} {'numpy s':>9} {'ratio':>7} "
        f"{'compile s':>9} {'steps jax/np':>13} {'RHS jax/np':>13} {'err jax':>9} {'err np':>9}"
    )
    for r in runs:
        j, p = r["jax"], r["numpy"]
        print(
            f"{r['case']:<12} {j['method']:<7} {r['n']:>4} {j['time_s']:>9.4f} "
            f"{p['time_s']:>9.4f} {r['speedup']:>6.1f}x {j['compile_s']:>9.2f} "
            f"{j['steps']:>6}/{p['steps']:<6} {j['rhs_evaluations']:>6}/{p['rhs_evaluations']:<6} "
            f"{j['error']:>9.1e} {p['error']:>9.1e}"
        )
    print("\nwork-precision, four-bar (solver, tol: time ms, RHS, error):")
    for side, rs in accuracy["runs"].items():
        for r in rs:
            print(
                f"  {side:<6} {r['solver']:<7} {r['tol']:.0e}: {r['time_s'] * 1e3:8.1f} ms "
                f"{r['rhs_evaluations']:>7} RHS, error {r['error']:.1e}"
            )
    print(f"batch: {json.dumps(batch)}")
    print(f"gradients: {json.dumps(gradients)}")
    print(f"checks: {json.dumps(checks)}")
    with open(args.json, "w") as f:
        json.dump(
            {
                "single_runs": runs,
                "work_precision": accuracy,
                "batch": batch,
                "gradients": gradients,
                "plain": plain,
                "checks": checks,
                "compile_budget": budget,
            },
            f,
            indent=2,
        )
    print(f"wrote {args.json}")


main()
