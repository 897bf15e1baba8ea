"""Batch and gradient benchmarks (ratios measured in one run; DESIGN §8).

1. Throughput: `jaxmbs.monte_carlo` over B four-bar trajectories (1 s, rtol = atol = 1e-8,
   crank speeds spread over ±4 rad/s), samples one after another in one compiled chunk
   (`vectorize=False`, "map") and vmapped ("vmap"), against a Python loop of single jitted
   `simulate` runs.
2. Gradient cost: reverse mode (`jax.grad`, RecursiveCheckpointAdjoint) and forward mode
   (`jax.jacfwd` with `diffrax.ForwardMode`) of the final crank angle w.r.t. k parameters,
   as multiples of one forward simulation; compile times.
3. Chunked memory: XLA's memory analysis of one compiled chunk (arguments, outputs,
   temporaries) for several chunk sizes, and the time per trajectory.
4. GPU (only when JAX sees one): trajectories per second for B = 1k…100k in float32 and
   float64.

    python benchmarks/batch.py [--sizes 1,64,1024,8192] [--max-chunk 128]

On CPU, vmapped chunks of 128 and more samples occasionally deadlocked in jaxlib 0.10.2
(batched LAPACK kernels waiting on each other in XLA's thread pool), hence `--max-chunk`.
"""

from __future__ import annotations

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import diffrax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import jaxmbs  # noqa: E402
from jaxmbs.models import fourbar, mcpherson  # noqa: E402

T1 = 1.0
TOL = 1e-8


def setup():
    mech = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(mech, np.pi / 3, 1.0)  # q̇0 linear in crank speed
    return mech, np.asarray(q0), np.asarray(unit_qd)


def timed(fn, *args, repeats=5):
    start = time.perf_counter()
    jax.block_until_ready(fn(*args))
    first = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return first, float(np.median(times))


def speeds(size: int) -> np.ndarray:
    return np.linspace(-4.0, 4.0, size) + 1e-3  # avoid a sample exactly at rest


def throughput(sizes, max_chunk):
    mech, q0, unit_qd = setup()

    @jax.jit
    def single(speed):
        sol = jaxmbs.simulate(mech, q0, speed * unit_qd, (0.0, T1), rtol=TOL, atol=TOL)
        return sol.q, sol.stats["num_steps"]

    loop_n = 32
    # Warm up with the loop's own argument type (a NumPy float64, not a weak Python float),
    # or the first loop call recompiles and the loop time includes a compilation.
    compile_single, _ = timed(single, speeds(loop_n)[0], repeats=1)
    start = time.perf_counter()
    steps = [int(jax.block_until_ready(single(s))[1]) for s in speeds(loop_n)]
    per_single = (time.perf_counter() - start) / loop_n
    print("\n## 1. Throughput: monte_carlo vs a loop of single runs (four-bar, 1 s, rtol 1e-8)")
    print(
        f"single run: {per_single * 1e3:.2f} ms (median steps {np.median(steps):.0f}; "
        f"compile {compile_single:.1f} s; loop of {loop_n} runs, per-run time extrapolated)"
    )
    print(
        "| B | mode | chunk | first call (compile) [s] | steady [s] | per trajectory [ms] | "
        "trajectories/s | speed-up vs loop |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for size in sizes:
        batch = {"qd0": speeds(size)[:, None] * unit_qd[None]}
        modes = [] if on_gpu() else [("map", False, size)]
        modes.append(("vmap", True, min(size, max_chunk) if max_chunk else size))
        for mode, vectorize, chunk in modes:

            def run(batch=batch, chunk=chunk, vectorize=vectorize):
                return jaxmbs.monte_carlo(
                    mech,
                    batch,
                    (0.0, T1),
                    q0=q0,
                    chunk_size=chunk,
                    rtol=TOL,
                    atol=TOL,
                    keep_solutions=False,
                    vectorize=vectorize,
                )

            start = time.perf_counter()
            run()
            first = time.perf_counter() - start
            repeats = 3 if size <= 1024 else 1
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                out = run()
                times.append(time.perf_counter() - start)
            steady = float(np.median(times))
            assert np.all(out.successful)
            per = steady / size
            print(
                f"| {size} | {mode} | {out.chunk_size} | {first:.1f} | {steady:.3f} | "
                f"{per * 1e3:.2f} | {1 / per:.0f} | {per_single / per:.2f}× |"
            )


def on_gpu() -> bool:
    return jax.default_backend() == "gpu"


def gradient_cost(ks=(1, 2, 4)):
    mech, q0, unit_qd = setup()
    names = ("m1", "m2", "m3", "g")
    print("\n## 2. Gradient cost (final crank angle after 1 s w.r.t. k parameters)")

    def final_angle(x, adjoint):
        params = {**mech.params, **{n: mech.params[n] * (1 + x[i]) for i, n in enumerate(names)}}
        sol = jaxmbs.simulate(
            mech,
            q0,
            2.0 * unit_qd,
            (0.0, T1),
            params=params,
            rtol=TOL,
            atol=TOL,
            adjoint=adjoint,
            # diffrax.ForwardMode does not accept the projection solver wrapper.
            stabilization=jaxmbs.Baumgarte(alpha=10.0, beta=10.0),
        )
        return sol.q[-1, 2]

    forward = jax.jit(lambda x: final_angle(x, None))
    x = jnp.zeros(len(names))
    c_fwd, t_fwd = timed(forward, x)
    print(f"forward simulation: {t_fwd * 1e3:.2f} ms (compile {c_fwd:.1f} s)")
    print(
        "| k | reverse [× forward] | reverse compile [s] | forward mode [× forward] | "
        "forward-mode compile [s] |"
    )
    print("|---|---|---|---|---|")
    for k in ks:

        def reverse_fn(x_k, k=k):
            return final_angle(jnp.concatenate([x_k, jnp.zeros(len(names) - k)]), None)

        def forward_fn(x_k, k=k):
            return final_angle(
                jnp.concatenate([x_k, jnp.zeros(len(names) - k)]), diffrax.ForwardMode()
            )

        c_rev, t_rev = timed(jax.jit(jax.grad(reverse_fn)), jnp.zeros(k))
        c_fm, t_fm = timed(jax.jit(jax.jacfwd(forward_fn)), jnp.zeros(k))
        g_rev = jax.jit(jax.grad(reverse_fn))(jnp.zeros(k))
        g_fm = jax.jit(jax.jacfwd(forward_fn))(jnp.zeros(k))
        agree = float(jnp.max(jnp.abs(g_rev - g_fm)) / jnp.max(jnp.abs(g_rev)))
        print(
            f"| {k} | {t_rev / t_fwd:.1f} | {c_rev:.1f} | {t_fm / t_fwd:.1f} | {c_fm:.1f} | "
            f"(modes agree to {agree:.1e})"
        )


def chunk_memory(size, chunks):
    """Memory of one compiled chunk from XLA's own analysis (CPU and GPU alike)."""
    from jaxmbs.batch import _run_chunk  # the compiled unit monte_carlo calls per chunk

    mech, q0, unit_qd = setup()
    saveat = np.linspace(0.0, T1, 101)
    print(f"\n## 3. Chunked memory (B = {size}, 101 output times, full Solutions kept)")
    print(
        "| chunk | chunks | arguments [MB] | outputs [MB] | temporaries [MB] | "
        "per trajectory [ms] |"
    )
    print("|---|---|---|---|---|---|")
    batch = {"qd0": speeds(size)[:, None] * unit_qd[None]}
    for chunk in chunks:
        start = time.perf_counter()
        out = jaxmbs.monte_carlo(
            mech, batch, (0.0, T1), q0=q0, saveat=saveat, chunk_size=chunk, rtol=TOL, atol=TOL
        )
        wall = time.perf_counter() - start - out.timings["first_chunk_s"]
        per = wall / max(size - out.chunk_size, 1)
        kernel = mech.replace_params(None)
        dtype = jnp.result_type(float)
        part = {
            "q0": None,
            "qd0": jnp.zeros((out.chunk_size, mech.n), dtype),
            "params": jax.tree_util.tree_map(lambda _: None, mech.params),
        }
        shared = {
            "q0": jnp.asarray(q0),
            "qd0": None,
            "params": jax.tree_util.tree_map(lambda v, d=dtype: jnp.asarray(v, d), mech.params),
        }
        mesh = jax.sharding.Mesh(np.array(jax.local_devices()), ("batch",))
        t_span = (jnp.asarray(0.0, dtype), jnp.asarray(T1, dtype))
        kwargs = {"rtol": TOL, "atol": TOL}
        compiled = _run_chunk.lower(
            kernel, part, shared, t_span, jnp.asarray(saveat), kwargs, None, True, mesh, False
        ).compile()
        mem = compiled.compiled.memory_analysis()  # the jax.stages.Compiled inside equinox's
        mb = 1 / 2**20
        print(
            f"| {out.chunk_size} | {out.n_chunks} | {mem.argument_size_in_bytes * mb:.2f} | "
            f"{mem.output_size_in_bytes * mb:.2f} | {mem.temp_size_in_bytes * mb:.2f} | "
            f"{per * 1e3:.2f} |"
        )


def _batch_cases(size: int) -> dict:
    """The batched mechanisms of section 4: (mechanism, batch, shared q0 and q̇0, t1)."""
    mech, q0, unit_qd = setup()
    cases = {"four-bar": (mech, {"qd0": speeds(size)[:, None] * unit_qd[None]}, q0, None, T1)}
    strut = mcpherson.mcpherson_simplified()
    q0_s, qd0_s = mcpherson.initial_state(strut, 0.05)
    loads = {"Fz": np.linspace(20.0, 60.0, size), "m1": np.linspace(0.8, 1.2, size)}
    cases["McPherson"] = (strut, {"params": loads}, q0_s, qd0_s, T1)
    return cases


def gpu_section(sizes, any_backend: bool = False):
    """Four-bar (crank speeds) and McPherson strut (vertical wheel load and arm mass)
    batches in float32 and float64 on a GPU: first call, steady time, trajectories per second,
    and the smallest batch reaching 90 % of the highest throughput measured (saturation).
    `any_backend` runs it on the default backend whatever it is (a check on CPU)."""
    print("\n## 4. GPU")
    if jax.default_backend() != "gpu" and not any_backend:
        print(f"no GPU visible (backend: {jax.default_backend()}): section skipped")
        return
    print(f"device: {jax.devices()[0].device_kind}")
    print("| mechanism | dtype | B | first call [s] | steady [s] | trajectories/s | failed |")
    print("|---|---|---|---|---|---|---|")
    saturation = []
    for x64 in (False, True):
        jax.config.update("jax_enable_x64", x64)
        name = "float64" if x64 else "float32"
        tol = TOL if x64 else 1e-5
        rates: dict[str, list[tuple[int, float]]] = {}
        for size in sizes:
            for label, (mech, batch, q0, qd0, t1) in _batch_cases(size).items():

                def run(mech=mech, batch=batch, q0=q0, qd0=qd0, t1=t1, tol=tol):
                    return jaxmbs.monte_carlo(
                        mech, batch, (0.0, t1), q0=q0, qd0=qd0, rtol=tol, atol=tol,
                        keep_solutions=False, vectorize=True,
                    )  # fmt: skip

                start = time.perf_counter()
                run()
                first = time.perf_counter() - start
                start = time.perf_counter()
                result = run()
                steady = time.perf_counter() - start
                failed = int(np.sum(~result.successful))
                rates.setdefault(label, []).append((size, size / steady))
                print(
                    f"| {label} | {name} | {size} | {first:.1f} | {steady:.3f} | "
                    f"{size / steady:.0f} | {failed} |"
                )
        for label, pairs in rates.items():
            best = max(rate for _, rate in pairs)
            knee = min(size for size, rate in pairs if rate >= 0.9 * best)
            saturation.append(f"{label} {name}: {best:.0f} trajectories/s, 90 % from B = {knee}")
    jax.config.update("jax_enable_x64", True)
    print("\nsaturation: " + "; ".join(saturation))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1,64,1024,8192")
    parser.add_argument(
        "--max-chunk", type=int, default=None, help="vmapped chunk limit (default: 64 on CPU)"
    )
    parser.add_argument("--sections", default="1,2,3,4")
    parser.add_argument("--gpu-sizes", default="1000,10000,100000")
    parser.add_argument(
        "--any-backend", action="store_true", help="run section 4 on the default backend"
    )
    args = parser.parse_args(argv)
    on_gpu = jax.default_backend() == "gpu"
    max_chunk = args.max_chunk if args.max_chunk is not None else (0 if on_gpu else 64)
    sections = {int(s) for s in args.sections.split(",")}
    print(f"jax {jax.__version__}, backend {jax.default_backend()}, {jax.device_count()} device(s)")
    if 1 in sections:
        throughput([int(s) for s in args.sizes.split(",")], max_chunk)
    if 2 in sections:
        gradient_cost()
    if 3 in sections:
        chunk_memory(512, (32, 128, 512) if on_gpu else (32, 64, 128))
    if 4 in sections:
        gpu_section([int(s) for s in args.gpu_sizes.split(",")], args.any_backend)


if __name__ == "__main__":
    main()
