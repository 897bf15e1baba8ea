"""The compile-time budget: every path's compile time as a multiple of a yardstick compiled in
the same run — a bare diffrax Tsit5 loop with a one-line right-hand side — with its run time
and, for gradients, the gradient/forward run-time ratio.

Cases (2-core CPU targets of the compile-time issue, in seconds there):

- the four-bar over 2 s with every option at its default: forward solve (≤ 2 s) and reverse
  gradient w.r.t. a mass (≤ 5 s; run ≤ 3× the forward run);
- `jit(vmap(grad))` of a four-bar loss over 16 crank speeds (≤ 10 s);
- the McPherson strut, forward, defaults (≤ 6 s);
- the quarter car's design objective (equilibrium + 0.4 s over the bump, tolerance 1e-10):
  reverse gradient (≤ 30 s) and forward mode, and their agreement;
- what a new user meets: `linearize` of a pendulum, first and later call; `simulate` called
  again with an output grid of another length;
- what a designer waits for before the first simulation of the quarter car: its build, its
  static point (`equilibrium`) and the linearisation there, first and later call (programs
  run once per analysis: XLA's quick settings, `jaxmbs._internal.compile`).

Run alone on the machine: `python -m benchmarks.compile` (the quarter car takes minutes).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.models import fourbar, mcpherson, pendulum

EXPERIMENTS = Path(__file__).resolve().parent.parent / "experiments"


def _compile(fn, *args) -> tuple:
    """`jax.jit(fn)` traced and compiled for `args`: the executable and the seconds taken."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    return compiled, time.perf_counter() - start


def _run_time(fn, *args, repeats: int = 5) -> float:
    """Median wall time of `fn(*args)`."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def yardstick() -> float:
    """Compile time of a bare diffrax loop: Tsit5, PID controller, y' = −y (median of three,
    each a new function, so that nothing is reused)."""

    def solve(y0):
        return diffrax.diffeqsolve(
            diffrax.ODETerm(lambda t, y, args: -y), diffrax.Tsit5(), 0.0, 1.0, None, y0,
            stepsize_controller=diffrax.PIDController(rtol=1e-8, atol=1e-8),
        ).ys  # fmt: skip

    return statistics.median(_compile(lambda y0: solve(y0), jnp.ones(4))[1] for _ in range(3))


def fourbar_cases(repeats: int) -> list[dict]:
    """Four-bar, defaults: forward, reverse gradient, jit(vmap(grad)) over 16 speeds."""
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)
    ts = jnp.linspace(0.0, 2.0, 21)

    def crank(m2, speed=2.0):
        sol = jaxmbs.simulate(mech, q0, speed * unit_qd, (0.0, 2.0), params={"m2": m2}, saveat=ts)
        return jnp.sum(sol.q[:, 2] ** 2)

    forward, forward_s = _compile(crank, 2.0)
    reverse, reverse_s = _compile(jax.grad(crank), 2.0)
    forward_run, reverse_run = (
        _run_time(forward, 2.0, repeats=repeats),
        _run_time(reverse, 2.0, repeats=repeats),
    )
    speeds = jnp.linspace(1.0, 3.0, 16)
    _, batched_s = _compile(jax.vmap(jax.grad(crank), in_axes=(None, 0)), 2.0, speeds)
    return [
        {"case": "four-bar 2 s, defaults, forward", "compile_s": forward_s,
         "run_s": forward_run, "target_s": 2.0},
        {"case": "four-bar 2 s, defaults, reverse gradient", "compile_s": reverse_s,
         "run_s": reverse_run, "gradient_ratio": reverse_run / forward_run, "target_s": 5.0},
        {"case": "four-bar, jit(vmap(grad)) over 16 speeds", "compile_s": batched_s,
         "target_s": 10.0},
    ]  # fmt: skip


def mcpherson_case(repeats: int) -> dict:
    """The McPherson strut, 1 s, defaults, forward."""
    strut = mcpherson.mcpherson_simplified()
    q0, qd0 = mcpherson.initial_state(strut, 0.05)

    def wheel(q0):
        return jaxmbs.simulate(strut, q0, qd0, (0.0, 1.0)).q[-1]

    compiled, seconds = _compile(wheel, q0)
    return {"case": "McPherson strut 1 s, defaults, forward", "compile_s": seconds,
            "run_s": _run_time(compiled, q0, repeats=repeats), "target_s": 6.0}  # fmt: skip


def quarter_car_cases() -> list[dict]:
    """The quarter car's objective (equilibrium and 0.4 s over the bump): reverse gradient
    and forward mode, compile and run, and their relative difference."""
    sys.path.insert(0, str(EXPERIMENTS))
    import suspension_design as study

    road = study.study_road()
    mech = mcpherson.quarter_car(road)
    ts = np.linspace(0.0, 0.4, 81)
    x = jnp.asarray(study.X0)

    def objective(x, **options):
        return study.objective(mech, road, x, ts=ts, **options)

    reverse, reverse_s = _compile(jax.grad(objective), x)
    tangent, tangent_s = _compile(
        jax.jacfwd(lambda x: objective(x, adjoint=diffrax.ForwardMode())), x
    )
    difference = float(
        np.max(np.abs(np.asarray(reverse(x) - tangent(x))) / np.abs(np.asarray(tangent(x))))
    )
    return [
        {"case": "quarter car objective, reverse gradient", "compile_s": reverse_s,
         "run_s": _run_time(reverse, x, repeats=3), "target_s": 30.0,
         "vs_forward_mode": difference},
        {"case": "quarter car objective, forward mode (3 directions)", "compile_s": tangent_s,
         "run_s": _run_time(tangent, x, repeats=3)},
    ]  # fmt: skip


def new_user_cases() -> list[dict]:
    """What recompiles: `linearize` of a pendulum (first and second call, another state),
    `simulate` with an output grid of another length (a new shape: compiled anew)."""
    mech = pendulum.mathematical_pendulum()
    q_down, qd_down = pendulum.initial_state(mech, 0.0)
    start = time.perf_counter()
    jaxmbs.linearize(mech, q_down, qd_down)
    first = time.perf_counter() - start
    start = time.perf_counter()
    jaxmbs.linearize(mech, q_down, qd_down, params={"g": 3.7})
    later = time.perf_counter() - start
    four = fourbar.fourbar()
    q0, qd0 = fourbar.initial_state(four)

    def run(n):
        start = time.perf_counter()
        sol = jaxmbs.simulate(four, q0, qd0, (0.0, 1.0), saveat=jnp.linspace(0.0, 1.0, n))
        jax.block_until_ready(sol.q)
        return time.perf_counter() - start

    grids = [run(21), run(21), run(41)]
    return [
        {"case": "linearize, pendulum: first call / later call", "compile_s": first,
         "run_s": later},
        {"case": "simulate, four-bar: first call / same grid / a grid of another length",
         "compile_s": grids[0], "run_s": grids[1], "recompile_s": grids[2]},
    ]  # fmt: skip


def analysis_cases() -> list[dict]:
    """The quarter car's build (structure analysis, spring preload), `equilibrium` from the
    design position and `linearize` at the static point: each first call (compile and run)
    and a later call. Run before `quarter_car_cases`, which builds the same model."""
    sys.path.insert(0, str(EXPERIMENTS))
    import suspension_design as study

    start = time.perf_counter()
    mech = mcpherson.quarter_car(study.study_road())
    build = time.perf_counter() - start

    def first_and_later(f):
        start = time.perf_counter()
        out = jax.block_until_ready(f())
        first = time.perf_counter() - start
        return first, _run_time(f), out

    eq_first, eq_later, q = first_and_later(lambda: mcpherson.static_configuration(mech))
    lin_first, lin_later, _ = first_and_later(
        lambda: jaxmbs.linearize(mech, q, jnp.zeros_like(q)).A
    )
    return [
        {"case": "quarter car build (structure, preload)", "compile_s": build},
        {"case": "quarter car equilibrium: first call / later call", "compile_s": eq_first,
         "run_s": eq_later},
        {"case": "quarter car linearize at its static point: first call / later call",
         "compile_s": lin_first, "run_s": lin_later},
    ]  # fmt: skip


def compile_budget(repeats: int = 5, quarter_car: bool = True) -> dict:
    """Every case, with the yardstick measured in the same run."""
    stick = yardstick()
    cases = [*fourbar_cases(repeats), mcpherson_case(repeats), *new_user_cases()]
    if quarter_car:
        cases += analysis_cases() + quarter_car_cases()
    for case in cases:
        case["ratio"] = case["compile_s"] / stick
    return {"yardstick_s": stick, "cases": cases}


def rows(budget: dict) -> list[tuple[str, str, str, str]]:
    """The table's rows: (case, measured compile time and ratio, target, detail)."""
    out = []
    for case in budget["cases"]:
        target = f"≤ {case['target_s']:g} s" if "target_s" in case else "—"
        detail = []
        if "run_s" in case:
            detail.append(f"run {case['run_s'] * 1e3:.1f} ms")
        if "gradient_ratio" in case:
            detail.append(f"gradient/forward {case['gradient_ratio']:.1f}× (target ≤ 3×)")
        if "recompile_s" in case:
            detail.append(f"another grid {case['recompile_s']:.1f} s")
        if "vs_forward_mode" in case:
            detail.append(f"vs forward mode {case['vs_forward_mode']:.0e}")
        out.append(
            (
                f"compile: {case['case']}",
                f"{case['compile_s']:.1f} s ({case['ratio']:.0f}× the bare loop)",
                target,
                "; ".join(detail),
            )
        )
    return out


def main() -> None:
    jax.config.update("jax_enable_x64", True)
    quick = "--quick" in sys.argv
    budget = compile_budget(repeats=3 if quick else 5, quarter_car=not quick)
    print(f"bare diffrax loop: {budget['yardstick_s']:.2f} s")
    for row in rows(budget):
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
