"""Every formulation of Pękal–Frączek 2016 on the four-bar and a planar chain.

For each model and method: the compile time of the jitted `simulate` (first call minus the
steady time), the steady-state time (median of `--repeats` calls, taken round-robin over the
methods), steps, RHS evaluations, the largest |Φ| at the output times, the time reached (a
run stops early at a singular configuration), and the time relative to `qr`, all in one run.
With `--gradient`, the same for the reverse-mode gradient of the final crank/tip coordinate
with respect to a mass, plus `qr` differentiated through its QR factors (`qr-through`)
instead of implicitly, to show what the implicit derivative saves.

    python benchmarks/formulations.py [--t1 10] [--links 10] [--model all] [--gradient]
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import chain, fourbar  # noqa: E402


class QRThroughFactors(jaxmbs.NullSpaceFormulation):
    """`qr` differentiated through jnp.linalg.qr instead of implicitly (comparison only)."""

    def accelerations(self, M, Q, C, gamma, mechanism):
        return self.solve(self.factor(M, C, mechanism), Q, gamma, mechanism)


def models(links: int):
    """(name, mechanism, q0, qd0, differentiated parameter, output coordinate, extra methods)."""
    four = fourbar.fourbar()
    chain_mech = chain.chain(links)
    # The chain's partition chosen by pivoting at its reference configuration degenerates
    # within the run (a y coordinate is independent); with the link angles independent the
    # dependent block is triangular and never singular.
    angles = jaxmbs.CoordinatePartitioning(
        dependent=tuple(i for i in range(chain_mech.n) if i % 3 != 2)
    )
    return [
        ("fourbar", four, *fourbar.initial_state(four), "m2", 2, {}),
        (
            f"chain-{links}",
            chain_mech,
            *chain.initial_state(chain_mech),
            "g",
            chain_mech.n - 1,
            {"partitioning (angles v)": angles},
        ),
    ]


def interleaved_medians(fns: dict, arg, repeats: int) -> tuple[dict, dict, dict]:
    """First-call times, outputs, and median steady times of every fn(arg); the steady runs
    go round-robin over the functions so that load changes on a shared machine hit all."""
    first, outputs, times = {}, {}, {name: [] for name in fns}
    for name, fn in fns.items():
        start = time.perf_counter()
        outputs[name] = jax.block_until_ready(fn(arg))
        first[name] = time.perf_counter() - start
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            jax.block_until_ready(fn(arg))
            times[name].append(time.perf_counter() - start)
    return first, outputs, {name: statistics.median(t) for name, t in times.items()}


def bench_model(args, model, mech, q0, qd0, param, coordinate, extra) -> list[dict]:
    """Rows of the table for one model: every method (and its gradient with --gradient)."""

    def solve(params, method):
        return jaxmbs.simulate(
            mech,
            q0,
            qd0,
            (0.0, args.t1),
            params=params,
            method=method,
            stabilization=args.stabilization,
            rtol=args.tol,
            atol=args.tol,
            saveat=jnp.linspace(0.0, args.t1, 101),
            throw=False,
        )

    def final(value, method):
        return solve({**mech.params, param: value}, method).q[-1, coordinate]

    methods = {**{name: name for name in jaxmbs.METHODS}, **extra}
    fns = {name: jax.jit(functools.partial(solve, method=m)) for name, m in methods.items()}
    first, sols, steady = interleaved_medians(fns, mech.params, args.repeats)
    rows = []
    for name, sol in sols.items():
        reached = jnp.isfinite(sol.q[:, 0])
        rows.append(
            {
                "model": model,
                "method": name,
                "compile": first[name] - steady[name],
                "steady": steady[name],
                "steps": int(sol.stats["num_steps"]),
                "rhs": int(sol.stats["rhs_evaluations"]),
                "residual": float(jnp.max(jnp.where(reached, sol.position_residual, 0.0))),
                "t_end": float(jnp.max(jnp.where(reached, sol.ts, 0.0))),
            }
        )
    if args.gradient:
        methods["qr-through"] = QRThroughFactors()
        grads = {
            name: jax.jit(jax.grad(functools.partial(final, method=m)))
            for name, m in methods.items()
        }
        first, values, steady = interleaved_medians(grads, mech.params[param], args.repeats)
        by_name = {row["method"]: row for row in rows}
        for name in grads:
            row = by_name.setdefault(name, {"model": model, "method": name})
            row.update(grad_compile=first[name] - steady[name], grad_steady=steady[name])
            row["grad"] = float(values[name])
        rows = list(by_name.values())
    for row in rows:
        print(row, flush=True)
    return rows


def table(rows: list[dict], gradient: bool) -> str:
    base = {
        (r["model"], key): r[key]
        for r in rows
        if r["method"] == "qr"
        for key in ("steady", "grad_steady")
        if key in r
    }
    head = "| model | method | compile s | steady ms | × qr | steps | RHS evals | max abs(Φ) "
    head += "| t reached |"
    rule = "|---|---|---|---|---|---|---|---|---|"
    if gradient:
        head += " grad compile s | grad ms | × qr | gradient |"
        rule += "---|---|---|---|"
    lines = [head, rule]
    for r in rows:
        if "steady" in r:
            line = (
                f"| {r['model']} | {r['method']} | {r['compile']:.1f} | {1e3 * r['steady']:.1f} "
                f"| {r['steady'] / base[r['model'], 'steady']:.2f} | {r['steps']} | {r['rhs']} "
                f"| {r['residual']:.1e} | {r['t_end']:g} |"
            )
        else:
            line = f"| {r['model']} | {r['method']} | | | | | | | |"
        if gradient:
            line += (
                f" {r['grad_compile']:.1f} | {1e3 * r['grad_steady']:.1f} "
                f"| {r['grad_steady'] / base[r['model'], 'grad_steady']:.2f} | {r['grad']:.6g} |"
            )
        lines.append(line)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--t1", type=float, default=10.0, help="simulated seconds (default 10)")
    parser.add_argument("--links", type=int, default=10, help="links of the chain (default 10)")
    parser.add_argument("--tol", type=float, default=1e-8, help="rtol = atol (default 1e-8)")
    parser.add_argument("--stabilization", default="none", help="default none")
    parser.add_argument("--repeats", type=int, default=5, help="steady-state runs (default 5)")
    parser.add_argument("--gradient", action="store_true", help="also time gradients")
    parser.add_argument("--model", choices=("all", "fourbar", "chain"), default="all")
    args = parser.parse_args()
    chosen = [m for m in models(args.links) if args.model in ("all", m[0].split("-")[0])]
    rows = [row for model in chosen for row in bench_model(args, *model)]
    print(table(rows, args.gradient))


if __name__ == "__main__":
    main()
