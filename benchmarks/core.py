"""The performance table: jaxmbs against the same method in NumPy + SciPy, in one run.

Rows (2-core CPU; rtol = atol = 1e-8, no stabilisation on either side so both integrate the
same ODE; 10 s of motion):

1. four-bar vs NumPy + SciPy, the same method on both sides: the QR null-space method
   (jaxmbs `qr` + Tsit5 against `numpy_baseline` + RK45) and the range-space method
   (jaxmbs `banded` against the NumPy range-space solve with a dense LAPACK Cholesky);
   and at equal accuracy (`work_precision`): each side's fastest run, over solvers and
   tolerances, that reaches a given final-state error;
2. planar chain N = 50 (n = 150) vs NumPy + SciPy (same methods, RK45);
3. cost growth of jaxmbs from chain N = 5 to N = 50;
4. a vmapped batch of four-bars against the loop of the same single runs;
5. reverse-mode (and forward-mode) gradient of a four-bar response w.r.t. 10 parameters,
   as a multiple of one forward solve;
6. compile times of the forward solve and of the gradient;
7. the cost of the checks along the motion (rank check, projection) on the chain N = 50.

Every case reports steady time (median), compile time, steps, RHS evaluations, and the
final-state error against a tight reference solve, so that speed is compared at stated
accuracy.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import diffrax
import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.models import chain, fourbar

from . import numpy_baseline as baseline

TOL = 1e-8
T1 = 10.0


def median_time(fn, repeats: int) -> float:
    """Median wall time of `repeats` calls of `fn` (results blocked on)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def compiled(fn, *args):
    """`jax.jit(fn)` lowered and compiled for `args`, and the compile time."""
    start = time.perf_counter()
    out = jax.jit(fn).lower(*args).compile()
    return out, time.perf_counter() - start


def _reference(mech, q0, qd0):
    sol = jaxmbs.simulate(
        mech, q0, qd0, (0.0, T1), rtol=1e-12, atol=1e-12, solver=diffrax.Dopri8(), max_steps=10**6
    )
    return np.asarray(sol.q[-1])


def jax_case(mech, q0, qd0, method: str, reference) -> tuple[Callable[[], Any], dict]:
    """One jaxmbs single run, compiled: a call that runs it, and its compile time, steps, RHS
    evaluations and error (timed by the caller, `single_runs`)."""

    def run(q0, qd0):
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, T1), method=method, rtol=TOL, atol=TOL,
            stabilization="none", rank_rtol=None,
        )  # fmt: skip
        return sol.q[-1], sol.stats

    fn, compile_time = compiled(run, q0, qd0)
    q1, stats = fn(q0, qd0)
    return lambda: fn(q0, qd0), {
        "method": method,
        "compile_s": compile_time,
        "steps": int(stats["num_steps"]),
        "rhs_evaluations": int(stats["rhs_evaluations"]),
        "error": float(np.max(np.abs(np.asarray(q1) - reference))),
    }


#: The formulation of the NumPy baseline that implements the same method as a jaxmbs one.
NUMPY_FORMULATION = {"qr": "qr", "banded": "range-space"}


def numpy_case(
    model, q0, qd0, reference, repeats: int, formulation="qr", solver="RK45", tol=TOL
) -> dict:
    """The NumPy + SciPy baseline (`formulation`: QR null space or range space)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        y, nfev, steps, _ = baseline.simulate(model, q0, qd0, T1, tol, tol, solver, formulation)
        times.append(time.perf_counter() - start)
    return {
        "formulation": formulation,
        "solver": solver,
        "tol": tol,
        "time_s": statistics.median(times),
        "steps": steps,
        "rhs_evaluations": nfev,
        "error": float(np.max(np.abs(y[: q0.size] - reference))),
    }


def single_runs(links=(5, 50), methods=("qr", "banded"), repeats=5) -> list[dict]:
    """Four-bar and chains: every jaxmbs method in `methods` vs the NumPy baseline of the
    same method (and, under "numpy_qr", the NumPy QR null-space baseline).

    Per case, rounds interleave one run of each NumPy baseline with runs of each jaxmbs
    method (min(repeats, 3) rounds; jaxmbs `repeats` runs in all), and the medians are
    compared, so that a slow phase of the shared machine slows both sides (timed in blocks,
    one side after the other, the chain N = 50 ratio read 8.0× in one run and 10.7–11.6×
    in two others of the same build).
    """
    cases = [("four-bar", fourbar.fourbar(), baseline.fourbar_model(), fourbar.initial_state)]
    for n in links:
        cases.append((f"chain N={n}", chain.chain(n), baseline.chain_model(n), chain.initial_state))
    rounds = max(1, min(repeats, 3))
    per_round = -(-repeats // rounds)
    rows = []
    for name, mech, model, initial in cases:
        q0, qd0 = initial(mech)
        reference = _reference(mech, q0, qd0)
        jx = {method: jax_case(mech, q0, qd0, method, reference) for method in methods}
        formulations = sorted(set(NUMPY_FORMULATION.values()))
        jax_times = {method: [] for method in methods}
        npy_runs = {f: [] for f in formulations}
        for _ in range(rounds):
            for f in formulations:
                npy_runs[f].append(
                    numpy_case(model, np.asarray(q0), np.asarray(qd0), reference, 1, f)
                )
            for method, (call, _) in jx.items():
                jax_times[method].extend(median_time(call, 1) for _ in range(per_round))
        npy = {
            f: {**runs[0], "time_s": statistics.median(r["time_s"] for r in runs)}
            for f, runs in npy_runs.items()
        }
        for method, (_, info) in jx.items():
            same = npy[NUMPY_FORMULATION[method]]
            t = statistics.median(jax_times[method])
            rows.append(
                {
                    "case": name,
                    "n": mech.n,
                    "jax": {**info, "time_s": t},
                    "numpy": same,
                    "numpy_qr": npy["qr"],
                    "speedup": same["time_s"] / t,
                    "speedup_vs_numpy_qr": npy["qr"]["time_s"] / t,
                }
            )
    return rows


#: Solvers of the work-precision comparison, paired by order (diffrax, SciPy).
SOLVER_PAIRS = (("Tsit5", "RK45"), ("Dopri8", "DOP853"))


def work_precision(
    target=1e-6, tolerances=(1e-6, 1e-7, 1e-8, 1e-9, 1e-10), method="banded", repeats=3
) -> dict:
    """The four-bar at equal accuracy: for each side, every solver of `SOLVER_PAIRS` at every
    tolerance (rtol = atol), and the fastest run whose final-state error against the 1e-12
    reference is at most `target`. Both sides use the same method (`NUMPY_FORMULATION`)."""
    mech, model = fourbar.fourbar(), baseline.fourbar_model()
    q0, qd0 = fourbar.initial_state(mech)
    reference = _reference(mech, q0, qd0)
    runs = {"jax": [], "numpy": []}
    for jax_solver, scipy_solver in SOLVER_PAIRS:
        solver = getattr(diffrax, jax_solver)()

        def run(q0, qd0, tol, solver=solver):
            sol = jaxmbs.simulate(
                mech, q0, qd0, (0.0, T1), method=method, rtol=tol, atol=tol, solver=solver,
                stabilization="none", rank_rtol=None, max_steps=10**5,
            )  # fmt: skip
            return sol.q[-1], sol.stats

        fn, compile_time = compiled(run, q0, qd0, TOL)  # tolerances are traced: one compile
        for tol in tolerances:
            q1, stats = fn(q0, qd0, tol)
            runs["jax"].append(
                {
                    "solver": jax_solver,
                    "tol": tol,
                    "compile_s": compile_time,
                    "time_s": median_time(lambda fn=fn, tol=tol: fn(q0, qd0, tol), repeats),
                    "steps": int(stats["num_steps"]),
                    "rhs_evaluations": int(stats["rhs_evaluations"]),
                    "error": float(np.max(np.abs(np.asarray(q1) - reference))),
                }
            )
            runs["numpy"].append(
                numpy_case(
                    model,
                    np.asarray(q0),
                    np.asarray(qd0),
                    reference,
                    1,
                    NUMPY_FORMULATION[method],
                    scipy_solver,
                    tol,
                )  # fmt: skip
            )
    best = {
        side: min((r for r in rs if r["error"] <= target), key=lambda r: r["time_s"])
        for side, rs in runs.items()
    }
    return {
        "target_error": target,
        "method": method,
        "runs": runs,
        "best": best,
        "speedup": best["numpy"]["time_s"] / best["jax"]["time_s"],
    }


def batch_vs_loop(batch=1024, method="banded", loop_sample=64, rounds=3) -> dict:
    """`jaxmbs.monte_carlo` over `batch` crank speeds, one vmapped chunk, against single
    jitted runs of the same speeds.

    The chunk is sharded over every local device (on CPU: the cores, when the process
    exposes them as devices with `jax_num_cpu_devices`, as `python -m benchmarks` does) and,
    for comparison, run on one device. On the 2-core CPU one device gains ~5× from vmap; the
    second core is used only as a second device: XLA's intra-op splitting of the batched
    kernels across threads costs more than it gains at these sizes.

    Rounds interleave the batch and `loop_sample` single runs (spread over the same speeds;
    the loop time is their mean times `batch`), so a slow phase of a shared machine affects
    both sides; the medians over `rounds` are compared.
    """
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)
    speeds = np.linspace(-4.0, 4.0, batch)
    options = dict(method=method, rtol=TOL, atol=TOL, stabilization="none", rank_rtol=None)

    def run(speed):
        return jaxmbs.simulate(mech, q0, speed * unit_qd, (0.0, T1), throw=False, **options).q[-1]

    def final_state(sol):  # one function object: a new one would recompile the chunk
        return sol.q[-1]

    def monte_carlo(devices):
        return jaxmbs.monte_carlo(
            mech, {"qd0": speeds[:, None] * np.asarray(unit_qd)[None]}, (0.0, T1), q0=q0,
            vectorize=True, devices=devices, keep_solutions=False,
            response=final_state, **options,
        )  # fmt: skip

    single, _ = compiled(run, speeds[0])
    sample = np.linspace(0, batch - 1, loop_sample).astype(int)
    device_sets = {"all": jax.local_devices(), "one": jax.local_devices()[:1]}
    compile_s = {}
    for name, devices in device_sets.items():
        compile_s[name] = monte_carlo(devices).timings["first_chunk_s"]
    times = {"loop": [], "all": [], "one": []}
    for _ in range(rounds):
        for name, devices in device_sets.items():
            out = monte_carlo(devices)
            times[name].append(out.timings["total_s"])
        start = time.perf_counter()
        loop = [jax.block_until_ready(single(speeds[i])) for i in sample]
        times["loop"].append((time.perf_counter() - start) / loop_sample * batch)
    t = {name: statistics.median(v) for name, v in times.items()}
    steps = out.diagnostics["num_steps"]
    return {
        "batch": batch,
        "method": method,
        "devices": len(device_sets["all"]),
        "batch_s": t["all"],
        "batch_one_device_s": t["one"],
        "loop_s": t["loop"],
        "speedup": t["loop"] / t["all"],
        "speedup_one_device": t["loop"] / t["one"],
        "compile_batch_s": compile_s["all"],
        "steps_mean": float(np.mean(steps)),
        "steps_max": int(np.max(steps)),
        "max_difference": float(np.max(np.abs(np.stack(loop) - out.responses[sample]))),
    }


#: The 10 differentiated quantities: the four-bar's 8 parameters, the initial crank speed
#: and the final time.
GRADIENT_PARAMETERS = ("l0", "l1", "l2", "l3", "m1", "m2", "m3", "g", "speed", "t1")


def gradient_cost(method="banded", t1=1.0, repeats=5) -> dict:
    """Gradient of the final crank angle w.r.t. 10 quantities, as a multiple of one solve
    (medians over interleaved rounds).

    The initial state is assembled inside the differentiated function
    (`jaxmbs.consistent_state`, crank angle and speed fixed), so a length changes the
    initial configuration consistently. Reverse mode: `jax.grad` with diffrax's
    `RecursiveCheckpointAdjoint`; forward mode: `jax.jacfwd` with `diffrax.ForwardMode`.
    """
    mech = fourbar.fourbar()
    q_nominal, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)
    names = GRADIENT_PARAMETERS[:8]

    def crank_angle(x, adjoint):
        params = {n: mech.params[n] * (1.0 + x[i]) for i, n in enumerate(names)}
        q0, qd0 = jaxmbs.consistent_state(
            mech, q_nominal, (2.0 + x[8]) * unit_qd, params=params, fixed=(2,)
        )
        sol = jaxmbs.simulate(
            mech, q0, qd0, (0.0, t1 + x[9]), params=params, method=method, rtol=TOL, atol=TOL,
            adjoint=adjoint, throw=False,
        )  # fmt: skip
        return sol.q[-1, 2]

    x = jnp.zeros(len(GRADIENT_PARAMETERS))
    forward, compile_forward = compiled(lambda x: crank_angle(x, None), x)
    reverse, compile_reverse = compiled(jax.grad(lambda x: crank_angle(x, None)), x)
    tangent, compile_tangent = compiled(
        jax.jacfwd(lambda x: crank_angle(x, diffrax.ForwardMode())), x
    )
    # Interleaved rounds (forward, reverse, forward mode), medians over them: a slow phase of
    # the shared machine then slows all three alike instead of one ratio's numerator only
    # (timed one after the other, the `banded` reverse ratio read 4.1× to 6.6× in runs of
    # one build).
    rounds = {"forward": [], "reverse": [], "tangent": []}
    for _ in range(3 * repeats):
        for name, fn in (("forward", forward), ("reverse", reverse), ("tangent", tangent)):
            rounds[name].append(median_time(lambda fn=fn: fn(x), 1))
    t_forward, t_reverse, t_tangent = (statistics.median(rounds[k]) for k in rounds)
    g_rev, g_fwd = np.asarray(reverse(x)), np.asarray(tangent(x))
    h = 1e-6
    g_fd = np.array(
        [(forward(x.at[i].set(h)) - forward(x.at[i].set(-h))) / (2 * h) for i in range(x.size)]
    )
    return {
        "method": method,
        "parameters": len(GRADIENT_PARAMETERS),
        "forward_s": t_forward,
        "reverse_s": t_reverse,
        "forward_mode_s": t_tangent,
        "reverse_ratio": t_reverse / t_forward,
        "forward_mode_ratio": t_tangent / t_forward,
        "compile_forward_s": compile_forward,
        "compile_reverse_s": compile_reverse,
        "compile_forward_mode_s": compile_tangent,
        "reverse_vs_forward_mode": float(np.max(np.abs(g_rev - g_fwd)) / np.max(np.abs(g_rev))),
        "reverse_vs_central_difference": float(
            np.max(np.abs(g_rev - g_fd)) / np.max(np.abs(g_rev))
        ),
    }


def plain_compile_times(method="qr") -> dict:
    """Compile times of the plain path (the configuration of the single-run rows: no
    stabilisation, no rank check, given q0): forward solve and reverse-mode gradient of the
    four-bar's final crank angle w.r.t. the initial crank speed."""
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)

    def crank_angle(speed):
        sol = jaxmbs.simulate(
            mech, q0, speed * unit_qd, (0.0, 1.0), method=method, rtol=TOL, atol=TOL,
            stabilization="none", rank_rtol=None,
        )  # fmt: skip
        return sol.q[-1, 2]

    _, forward = compiled(crank_angle, 2.0)
    _, reverse = compiled(jax.grad(crank_angle), 2.0)
    return {"method": method, "compile_forward_s": forward, "compile_reverse_s": reverse}


#: Configurations of `checks_cost`: (stabilisation, rank check).
CHECKS = {"bare": ("none", None), "rank check": ("none", 1e-8), "default": ("projection", 1e-8)}


def checks_cost(links=50, method="banded", repeats=3) -> dict:
    """Chain N = `links`, 10 s: the solve without checks (as in the single-run rows), with the
    rank check, and with the default options (rank check and projection), in one
    interleaved run (rounds of the three, medians compared)."""
    mech = chain.chain(links)
    q0, qd0 = chain.initial_state(mech)
    fns, out = {}, {}
    for name, (stabilization, rank_rtol) in CHECKS.items():

        def run(q0, qd0, stabilization=stabilization, rank_rtol=rank_rtol):
            sol = jaxmbs.simulate(
                mech, q0, qd0, (0.0, T1), method=method, rtol=TOL, atol=TOL,
                stabilization=stabilization, rank_rtol=rank_rtol,
            )  # fmt: skip
            return sol.q[-1], sol.stats["num_steps"]

        fns[name], compile_time = compiled(run, q0, qd0)
        out[name] = {"compile_s": compile_time, "steps": int(fns[name](q0, qd0)[1])}
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            times[name].append(median_time(lambda fn=fn: fn(q0, qd0), 1))
    for name in fns:
        out[name]["time_s"] = statistics.median(times[name])
        out[name]["ratio_to_bare"] = out[name]["time_s"] / statistics.median(times["bare"])
    return {"case": f"chain N={links}", "method": method, "runs": out}
