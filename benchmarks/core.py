"""Core benchmark: jaxmbs QR null space vs the same method in NumPy + SciPy, in one run.

Cases (rtol = atol = 1e-8, no stabilisation on either side, so both integrate the same ODE):
four-bar for 10 s and N-link chains (N = 5, 20, 50) for 10 s; plus a batch of 1024 vmapped
four-bar runs against 1024 single runs. For each case: compile time, steady-state time
(median of `repeats`), steps, RHS evaluations, the final-state error against a tight
reference solve (so that the comparison is at equal accuracy), and the time ratio.
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.models import chain, fourbar

from . import numpy_baseline as baseline


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _jax_case(mech, q0, qd0, t1, tol, repeats):
    def run(q0, qd0):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, t1), rtol=tol, atol=tol, stabilization="none", check_rank=False
        )
        return sol.q[-1], sol.stats

    fn = jax.jit(run)
    start = time.perf_counter()
    compiled = fn.lower(q0, qd0).compile()
    compile_time = time.perf_counter() - start
    q1, stats = compiled(q0, qd0)
    steady = _median_time(lambda: compiled(q0, qd0), repeats)
    reference = jaxmbs.simulate(mech, q0, qd0, (0.0, t1), rtol=1e-12, atol=1e-12).q[-1]
    return {
        "compile_s": compile_time,
        "time_s": steady,
        "steps": int(stats["num_steps"]),
        "rhs_evaluations": int(stats["rhs_evaluations"]),
        "error": float(jnp.max(jnp.abs(q1 - reference))),
        "reference": np.asarray(reference),
    }


def _numpy_case(model, q0, qd0, t1, tol, repeats, reference):
    out = {}
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        y, nfev, steps, ok = baseline.simulate(model, q0, qd0, t1, tol, tol)
        times.append(time.perf_counter() - start)
    out["time_s"] = statistics.median(times)
    out["steps"], out["rhs_evaluations"] = steps, nfev
    out["error"] = float(np.max(np.abs(y[: q0.size] - reference)))
    return out


def single_runs(links=(5, 20, 50), tol=1e-8, t1=10.0, repeats=5):
    """Four-bar and chains: jaxmbs vs NumPy + SciPy (RK45)."""
    cases = [("four-bar", fourbar.fourbar(), baseline.fourbar_model(), fourbar.initial_state)]
    for n in links:
        cases.append((f"chain N={n}", chain.chain(n), baseline.chain_model(n), chain.initial_state))
    rows = []
    for name, mech, model, initial in cases:
        q0, qd0 = initial(mech)
        jx = _jax_case(mech, q0, qd0, t1, tol, repeats)
        npy = _numpy_case(
            model, np.asarray(q0), np.asarray(qd0), t1, tol, max(1, repeats // 2), jx["reference"]
        )
        rows.append(
            {
                "case": name,
                "n": mech.n,
                "jax": {k: v for k, v in jx.items() if k != "reference"},
                "numpy": npy,
                "speedup": npy["time_s"] / jx["time_s"],
            }
        )
    return rows


def batch_vs_loop(batch=1024, t1=10.0, tol=1e-8):
    """vmap over `batch` crank speeds vs a loop of single jitted runs."""
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)
    speeds = jnp.linspace(-4.0, 4.0, batch)

    def run(speed):
        sol = jaxmbs.simulate(
            mech,
            q0,
            speed * unit_qd,
            (0.0, t1),
            rtol=tol,
            atol=tol,
            stabilization="none",
            check_rank=False,
            throw=False,
        )
        return sol.q[-1]

    single = jax.jit(run).lower(speeds[0]).compile()
    start = time.perf_counter()
    batched = jax.jit(jax.vmap(run)).lower(speeds).compile()
    compile_batch = time.perf_counter() - start
    t_batch = _median_time(lambda: batched(speeds), 3)
    start = time.perf_counter()
    loop = jnp.stack([single(s) for s in speeds])
    t_loop = time.perf_counter() - start
    diff = float(jnp.max(jnp.abs(loop - batched(speeds))))
    return {
        "batch": batch,
        "batch_s": t_batch,
        "loop_s": t_loop,
        "speedup": t_loop / t_batch,
        "compile_batch_s": compile_batch,
        "max_difference": diff,
    }
