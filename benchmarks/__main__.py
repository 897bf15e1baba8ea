"""`python -m benchmarks [--quick] [--json out.json]`: run the ratio benchmarks, print a table."""

from __future__ import annotations

import argparse
import json

import jax

jax.config.update("jax_enable_x64", True)

from . import core  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, smaller batch")
    parser.add_argument("--json", default="benchmarks.json", help="where to write the results")
    args = parser.parse_args()
    repeats = 3 if args.quick else 5
    rows = core.single_runs(links=(5, 20) if args.quick else (5, 20, 50), repeats=repeats)
    print(
        f"{'case':<12} {'n':>4} {'jax s':>9} {'numpy s':>9} {'ratio':>7} {'compile s':>9} "
        f"{'steps jax/np':>13} {'RHS jax/np':>13} {'err jax':>9} {'err np':>9}"
    )
    for r in rows:
        j, p = r["jax"], r["numpy"]
        print(
            f"{r['case']:<12} {r['n']:>4} {j['time_s']:>9.4f} {p['time_s']:>9.4f} "
            f"{r['speedup']:>6.1f}x {j['compile_s']:>9.2f} {j['steps']:>6}/{p['steps']:<6} "
            f"{j['rhs_evaluations']:>6}/{p['rhs_evaluations']:<6} {j['error']:>9.1e} "
            f"{p['error']:>9.1e}"
        )
    if len(rows) > 1:
        growth = rows[-1]["jax"]["time_s"] / rows[1]["jax"]["time_s"]
        print(f"cost growth {rows[1]['case']} -> {rows[-1]['case']}: {growth:.1f}x")
    batch = core.batch_vs_loop(batch=256 if args.quick else 1024)
    print(
        f"batch of {batch['batch']} four-bars: vmap {batch['batch_s']:.2f} s, loop "
        f"{batch['loop_s']:.2f} s, ratio {batch['speedup']:.2f}x, batch compile "
        f"{batch['compile_batch_s']:.2f} s, max |vmap - loop| {batch['max_difference']:.1e}"
    )
    with open(args.json, "w") as f:
        json.dump({"single_runs": rows, "batch": batch}, f, indent=2)
    print(f"wrote {args.json}")


main()
