"""Every formulation of Pękal–Frączek 2016 on the four-bar and a planar chain.

For each model and method: the compile time of the jitted `simulate` (first call minus a
steady call), the steady-state time (median of `--repeats` calls), steps, RHS evaluations,
the largest |Φ| at the output times, and the time relative to `qr` measured in the same run.
With `--gradient`, the same for the reverse-mode gradient of the final crank/tip coordinate
with respect to a mass, plus `qr` differentiated through its QR factors (`qr-through`)
instead of implicitly, to show what the implicit derivative saves.

    python benchmarks/formulations.py [--t1 10] [--links 10] [--gradient]
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

    def accelerations(self, M, Q, C, gamma, structure):
        return self.solve(self.factor(M, C, structure), Q, gamma, structure)


def models(links: int):
    four = fourbar.fourbar()
    links_mech = chain.chain(links)
    # (name, mechanism, q0, qd0, mass parameter, output coordinate)
    return [
        ("fourbar", four, *fourbar.initial_state(four), "m2", 2),
        (f"chain-{links}", links_mech, *chain.initial_state(links_mech), "g", links_mech.n - 1),
    ]


def timed(fn, arg, repeats: int):
    """(first-call time, median steady time, output) of fn(arg)."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn(arg))
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(arg))
        times.append(time.perf_counter() - start)
    return first, statistics.median(times), out


def bench_model(args, model, mech, q0, qd0, param: str, coordinate: int) -> list[dict]:
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
            saveat=jnp.linspace(0.0, args.t1, 11),
            throw=False,
        )

    def final(value, method):
        return solve({**mech.params, param: value}, method).q[-1, coordinate]

    methods = {name: name for name in jaxmbs.METHODS}
    if args.gradient:
        methods["qr-through"] = QRThroughFactors()
    rows = []
    for name, method in methods.items():
        row = {"model": model, "method": name}
        if name in jaxmbs.METHODS:
            first, steady, sol = timed(
                jax.jit(functools.partial(solve, method=method)), mech.params, args.repeats
            )
            row.update(
                compile=first - steady,
                steady=steady,
                steps=int(sol.stats["num_steps"]),
                rhs=int(sol.stats["rhs_evaluations"]),
                residual=float(jnp.max(sol.position_residual)),
                result=jaxmbs.RESULTS.message(int(sol.result)) or "ok",
            )
        if args.gradient:
            grad_fn = jax.jit(jax.grad(functools.partial(final, method=method)))
            first, steady, grad = timed(grad_fn, mech.params[param], args.repeats)
            row.update(grad_compile=first - steady, grad_steady=steady, grad=float(grad))
        rows.append(row)
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
    head = "| model | method | compile s | steady ms | × qr | steps | RHS evals | max abs(Φ) |"
    rule = "|---|---|---|---|---|---|---|---|"
    if gradient:
        head += " grad compile s | grad ms | × qr |"
        rule += "---|---|---|"
    lines = [head, rule]
    for r in rows:
        if "steady" in r:
            line = (
                f"| {r['model']} | {r['method']} | {r['compile']:.1f} | {1e3 * r['steady']:.1f} "
                f"| {r['steady'] / base[r['model'], 'steady']:.2f} | {r['steps']} | {r['rhs']} "
                f"| {r['residual']:.1e} |"
            )
        else:
            line = f"| {r['model']} | {r['method']} | | | | | | |"
        if gradient:
            line += (
                f" {r['grad_compile']:.1f} | {1e3 * r['grad_steady']:.1f} "
                f"| {r['grad_steady'] / base[r['model'], 'grad_steady']:.2f} |"
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
    args = parser.parse_args()
    rows = [row for model in models(args.links) for row in bench_model(args, *model)]
    print(table(rows, args.gradient))


if __name__ == "__main__":
    main()
