"""The four-bar on one GPU: jaxmbs against MJX (MuJoCo XLA), batched over crank speeds.

Both sides simulate the four-bar of `jaxmbs.models.fourbar` for 10 s from the same
assembled state (crank at 60°, crank speeds spread over ±4 rad/s), B samples vmapped in one
program:

- jaxmbs: `monte_carlo` in absolute coordinates, adaptive steps (`method="auto"`, the
  projection, the rank check: the defaults), at several tolerances in float64 and float32.
- MJX: the same bodies as an open tree of three hinges (crank, coupler on the crank, rocker on
  the ground) whose loop is closed by an equality `connect` at the coupler–rocker joint;
  fixed steps (RK4, Euler or implicitfast), the Newton constraint solver, solref's time
  constant a small multiple of the step. MuJoCo's constraints are soft, so the loop opens
  by a gap set by the step and the time constant.

Per configuration: throughput (10-s trajectories per minute, the compiled program's second
call), the first call (compilation), the crank angle's error at 10 s against a reference
(jaxmbs, Dopri8 at rtol = atol = 1e-12, float64, on the CPU) over `--accuracy-samples`
speeds of the batch, and the loop-closure gap at 10 s: |Φ| for jaxmbs, the distance between
the coupler's and the rocker's copies of joint C for MJX. `--mcpherson` adds the McPherson
strut (1 s, float64, default options). Rows go to `--json` as they are measured, with the
device name and the command.

    python benchmarks/mjx.py --batch 100000 --json benchmarks/gpu_mjx.json
    python benchmarks/mjx.py --batch 8 --mjx-steps 1e-3 --budget-s 300   # a CPU check

Needs `mujoco-mjx` (`pip install '.[mjx]'`); without it the MJX rows are skipped.
"""

from __future__ import annotations

import argparse
import functools
import json
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import fourbar, mcpherson  # noqa: E402

T1 = 10.0
CRANK_ANGLE = np.pi / 3
#: jaxmbs configurations: (dtype, rtol = atol).
JAXMBS_RUNS = (("float64", 1e-8), ("float64", 1e-6), ("float32", 1e-5), ("float64", 1e-5))


def speeds(size: int) -> np.ndarray:
    """Crank speeds of the batch (rad/s), avoiding a sample exactly at rest."""
    return np.linspace(-4.0, 4.0, size) + 1e-3


def accuracy_indices(size: int, count: int) -> np.ndarray:
    """Samples whose final crank angle is checked against the reference."""
    return np.unique(np.linspace(0, size - 1, min(count, size)).round().astype(int))


def reference_angles(crank_speeds: np.ndarray) -> np.ndarray:
    """Crank angle at T1 for each speed: jaxmbs, Dopri8, rtol = atol = 1e-12, float64, on the
    CPU (one sample at a time, so that no batched step-size control couples them)."""
    mech = fourbar.fourbar()
    q0, unit_qd = (np.asarray(x) for x in fourbar.initial_state(mech, CRANK_ANGLE, 1.0))
    with jax.default_device(jax.devices("cpu")[0]):

        @jax.jit
        def final(speed):
            sol = jaxmbs.simulate(
                mech, q0, speed * unit_qd, (0.0, T1), rtol=1e-12, atol=1e-12,
                solver=diffrax.Dopri8(), max_steps=200_000,
            )  # fmt: skip
            return sol.q[-1, 2]

        return np.array([float(final(s)) for s in crank_speeds])


def _set_precision(dtype: str) -> None:
    """Switch JAX between float64 and float32; compiled functions are dropped at a switch
    (jitted helpers cached under the other setting fail to lower otherwise)."""
    x64 = dtype == "float64"
    if x64 != jax.config.jax_enable_x64:
        jax.clear_caches()
        jax.config.update("jax_enable_x64", x64)


def _errors(angles: np.ndarray, reference: np.ndarray) -> dict[str, float]:
    err = np.abs(np.asarray(angles, np.float64) - reference)
    return {"max_error": float(np.max(err)), "median_error": float(np.median(err))}


def final_crank_angle(solution: jaxmbs.Solution):
    """The response of each jaxmbs sample (one function object, so that every call of
    `monte_carlo` finds its compiled program)."""
    return solution.q[-1, 2]


def _timed_study(run, size: int) -> tuple[dict, jaxmbs.MonteCarloResult]:
    """A `monte_carlo` call of `size` samples made twice: the first call (compilation
    included) and the second one's time, throughput, failures, slowest sample's steps and
    largest |Φ|, and the second call's result."""
    start = time.perf_counter()
    run()
    first = time.perf_counter() - start
    start = time.perf_counter()
    out = run()
    steady = time.perf_counter() - start
    row = {
        "B": size, "first_s": first, "steady_s": steady, "per_minute": 60 * size / steady,
        "failed": int(np.sum(~out.successful)),
        "steps_max": int(np.max(out.diagnostics["num_steps"])),
        "gap_max": float(np.nanmax(out.diagnostics["max_position_residual"])),
    }  # fmt: skip
    return row, out


def run_jaxmbs(size: int, dtype: str, tol: float, idx, reference) -> dict:
    """One jaxmbs configuration: B four-bars for T1 in one vmapped program, called twice."""
    _set_precision(dtype)
    mech = fourbar.fourbar()
    q0, unit_qd = (np.asarray(x) for x in fourbar.initial_state(mech, CRANK_ANGLE, 1.0))
    batch = {"qd0": speeds(size)[:, None] * unit_qd[None]}

    def run():
        return jaxmbs.monte_carlo(
            mech, batch, (0.0, T1), q0=q0, rtol=tol, atol=tol, keep_solutions=False,
            vectorize=True, chunk_size=size, response=final_crank_angle,
        )  # fmt: skip

    row, out = _timed_study(run, size)
    _set_precision("float64")
    return {
        "code": "jaxmbs", "dtype": dtype, "setting": f"rtol = atol = {tol:.0e}, method auto",
        **row, **_errors(np.asarray(out.responses)[idx], reference),
    }  # fmt: skip


def mjcf(dt: float, time_constant: float, integrator: str) -> str:
    """The four-bar as MJCF: hinges about z at the crank, the crank–coupler joint and the
    rocker's ground pivot, body frames at the assembled state (so that every hinge angle is 0
    there), the loop closed at joint C by `connect` (impedance 0.9999: as hard as MuJoCo's
    soft constraints get; critically damped, the given time constant). Gravity along −y, no
    contacts; each rod's inertia m l²/12 about its transverse axes."""
    p = fourbar.DEFAULTS
    mech = fourbar.fourbar()
    q0, _ = fourbar.initial_state(mech, CRANK_ANGLE, 1.0)
    phi1, phi2, phi3 = (float(q0[i]) for i in (2, 5, 8))

    def quat(angle: float) -> str:
        return f"{np.cos(angle / 2)} 0 0 {np.sin(angle / 2)}"

    def inertial(mass: str, length: str) -> str:
        m, ell = p[mass], p[length]
        j = m * ell**2 / 12  # a slender rod about y and z; about x (no motion) the same
        return f'<inertial pos="{ell / 2} 0 0" mass="{m}" diaginertia="{j} {j} {j}"/>'

    return f"""<mujoco>
  <option timestep="{dt}" gravity="0 {-p["g"]} 0" integrator="{integrator}" solver="Newton"
          iterations="50" ls_iterations="50" tolerance="1e-12">
    <flag contact="disable"/>
  </option>
  <worldbody>
    <body name="crank" quat="{quat(phi1)}">
      <joint name="A" type="hinge" axis="0 0 1"/>{inertial("m1", "l1")}
      <body name="coupler" pos="{p["l1"]} 0 0" quat="{quat(phi2 - phi1)}">
        <joint name="B" type="hinge" axis="0 0 1"/>{inertial("m2", "l2")}
      </body>
    </body>
    <body name="rocker" pos="{p["l0"]} 0 0" quat="{quat(phi3)}">
      <joint name="D" type="hinge" axis="0 0 1"/>{inertial("m3", "l3")}
    </body>
  </worldbody>
  <equality>
    <connect body1="coupler" body2="rocker" anchor="{p["l2"]} 0 0"
             solref="{time_constant} 1" solimp="0.9999 0.9999 0.001 0.5 2"/>
  </equality>
</mujoco>"""


@functools.partial(jax.jit, static_argnames=("ends",))
def _mjx_batch(mx, data0, crank_speeds, unit, phi1, n_steps, ends):
    """Final crank angle and loop gap of each sample after `n_steps` MJX steps (a traced
    count: one program for the short compiling call and the full one; the model is an
    argument, so other step sizes and time constants reuse it)."""
    from mujoco import mjx

    def one(speed):
        d = data0.replace(qvel=(speed * unit).astype(data0.qvel.dtype))
        d = jax.lax.fori_loop(0, n_steps, lambda _, d: mjx.step(mx, d), d)
        d = mjx.kinematics(mx, d)
        points = [d.xpos[b] + d.xmat[b] @ jnp.array([ell, 0.0, 0.0]) for b, ell in ends]
        return d.qpos[0] + phi1, jnp.linalg.norm(points[0] - points[1])

    return jax.vmap(one)(crank_speeds)


def run_mjx(
    size: int,
    dtype: str,
    dt: float,
    factor: float,
    integrator: str,
    idx,
    reference,
    budget_s: float = float("inf"),
) -> dict:
    """One MJX configuration: B four-bars for T1 in fixed steps, vmapped (`_mjx_batch`): a
    call of 10 steps (the compilation, if any), one of 100 (the full call's time predicted
    from it; skipped beyond `budget_s`), then the full one, timed."""
    import mujoco
    from mujoco import mjx

    _set_precision(dtype)
    model = mujoco.MjModel.from_xml_string(mjcf(dt, factor * dt, integrator))
    mx = mjx.put_model(model)
    data0 = mjx.make_data(mx)
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, CRANK_ANGLE, 1.0)
    # hinge rates: crank φ̇1, coupler relative to the crank φ̇2 − φ̇1, rocker φ̇3
    unit = jnp.asarray([unit_qd[2], unit_qd[5] - unit_qd[2], unit_qd[8]], data0.qvel.dtype)
    phi1 = jnp.asarray(q0[2], data0.qvel.dtype)  # the crank's angle where its hinge reads 0
    # joint C: the coupler's end (l2, 0, 0) and the rocker's end (l3, 0, 0) in their frames
    ends = tuple((mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_BODY, name), fourbar.DEFAULTS[ell])
                 for name, ell in (("coupler", "l2"), ("rocker", "l3")))  # fmt: skip

    n = round(T1 / dt)
    x = jnp.asarray(speeds(size), dtype=data0.qvel.dtype)
    start = time.perf_counter()
    jax.block_until_ready(_mjx_batch(mx, data0, x, unit, phi1, 10, ends))
    first = time.perf_counter() - start
    start = time.perf_counter()
    jax.block_until_ready(_mjx_batch(mx, data0, x, unit, phi1, 100, ends))
    predicted = (time.perf_counter() - start) * n / 100
    if predicted > budget_s:
        _set_precision("float64")
        return {"code": "MJX", "dtype": dtype, "skipped": f"predicted {predicted:.0f} s"}
    start = time.perf_counter()
    angles, gaps = jax.block_until_ready(_mjx_batch(mx, data0, x, unit, phi1, n, ends))
    steady = time.perf_counter() - start
    angles, gaps = np.asarray(angles), np.asarray(gaps)
    _set_precision("float64")
    return {
        "code": "MJX", "dtype": dtype,
        "setting": f"{integrator}, dt = {dt:.0e}, solref time constant {factor:g} dt, Newton",
        "B": size, "first_s": first, "steady_s": steady, "per_minute": 60 * size / steady,
        "failed": int(np.sum(~np.isfinite(angles))), "steps_max": n,
        "gap_max": float(np.nanmax(gaps)), **_errors(angles[idx], reference),
    }  # fmt: skip


def run_mcpherson(size: int) -> dict:
    """The McPherson strut, 1 s, float64, default options, over wheel load and arm mass."""
    strut = mcpherson.mcpherson_simplified()
    q0, qd0 = mcpherson.initial_state(strut, 0.05)
    loads = {"Fz": np.linspace(20.0, 60.0, size), "m1": np.linspace(0.8, 1.2, size)}

    def run():
        return jaxmbs.monte_carlo(
            strut, {"params": loads}, (0.0, 1.0), q0=q0, qd0=qd0, rtol=1e-8, atol=1e-8,
            keep_solutions=False, vectorize=True, chunk_size=size,
        )  # fmt: skip

    row, _ = _timed_study(run, size)
    return {
        "code": "jaxmbs (McPherson, 1 s)", "mechanism": "McPherson (1 s)", "dtype": "float64",
        "setting": "rtol = atol = 1e-8, defaults", **row,
    }  # fmt: skip


def _mjx_settings(text: str) -> list[tuple[str, float, float, str]]:
    """`float32:1e-3:2:RK4,float64:2e-4:2:RK4` → [(dtype, dt, factor, integrator), …]."""
    out = []
    for item in filter(None, text.split(",")):
        dtype, dt, factor, integrator = item.split(":")
        out.append((dtype, float(dt), float(factor), integrator))
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=100_000, help="four-bar samples B")
    parser.add_argument("--accuracy-samples", type=int, default=64)
    parser.add_argument(
        "--mjx",
        default="float32:1e-3:2:RK4,float32:2e-4:2:RK4,float64:2e-4:2:RK4",
        help="MJX runs, dtype:dt:time-constant-factor:integrator, comma-separated",
    )
    parser.add_argument("--jaxmbs", default=",".join(f"{d}:{t:g}" for d, t in JAXMBS_RUNS))
    parser.add_argument("--mcpherson", type=int, default=0, help="McPherson samples (0: none)")
    parser.add_argument("--budget-s", type=float, default=float("inf"))
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)

    device = jax.devices()[0].device_kind
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, device {device}")
    idx = accuracy_indices(args.batch, args.accuracy_samples)
    start = time.perf_counter()
    reference = reference_angles(speeds(args.batch)[idx])
    print(f"reference: {len(idx)} samples in {time.perf_counter() - start:.1f} s (CPU)")
    try:
        import mujoco.mjx  # noqa: F401

        mjx_runs = _mjx_settings(args.mjx)
    except ImportError:
        print("mujoco-mjx not installed: MJX rows skipped")
        mjx_runs = []
    jaxmbs_runs = [(d, float(t)) for d, t in (s.split(":") for s in args.jaxmbs.split(","))]
    # interleave the two codes, most informative first, so that a budget cut keeps both
    plan = []
    for i in range(max(len(jaxmbs_runs), len(mjx_runs))):
        if i < len(jaxmbs_runs):
            plan.append(("jaxmbs", jaxmbs_runs[i]))
        if i < len(mjx_runs):
            plan.append(("MJX", mjx_runs[i]))
    if args.mcpherson:
        plan.append(("McPherson", ()))
    rows = []
    header = {"device": device, "jax": jax.__version__, "command": " ".join(sys.argv),
              "T1": T1, "B": args.batch, "accuracy_samples": len(idx)}  # fmt: skip
    print("| code | dtype | setting | B | first [s] | steady [s] | 10-s traj./min | "
          "max / median crank error [rad] | gap [m] | steps | failed |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for code, setting in plan:
        if time.perf_counter() - start > args.budget_s:
            print(f"| {code} | {setting} | skipped: budget spent |")
            continue
        if code == "jaxmbs":
            row = run_jaxmbs(args.batch, *setting, idx, reference)
        elif code == "MJX":
            remaining = args.budget_s - (time.perf_counter() - start)
            row = run_mjx(args.batch, *setting, idx, reference, remaining)
            if "skipped" in row:
                print(f"| MJX | {setting} | skipped: {row['skipped']} |")
                continue
        else:
            row = run_mcpherson(args.mcpherson)
        rows.append(row)
        errors = (f"{row['max_error']:.1e} / {row['median_error']:.1e}"
                  if "max_error" in row else "—")  # fmt: skip
        print(f"| {row['code']} | {row['dtype']} | {row['setting']} | {row['B']} | "
              f"{row['first_s']:.1f} | {row['steady_s']:.2f} | {row['per_minute']:.3g} | "
              f"{errors} | {row['gap_max']:.1e} | {row['steps_max']} | {row['failed']} |",
              flush=True)  # fmt: skip
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**header, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
