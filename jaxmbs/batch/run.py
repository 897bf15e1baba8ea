"""Running a planned Monte Carlo batch (`jaxmbs.batch.plan.make_plan`): every chunk one
call of one compiled program (`run_chunk`: the samples vmapped or `lax.map`ped on each device,
`shard_map`ped over the mesh), finished chunks written to the checkpoint store and, after
the other processes finished, the chunks not computed here read from it."""

from __future__ import annotations

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from ..integrate import Solution, result_index, simulate
from ._outputs import output_arrays
from .checkpoint import ChunkStore, os_reason
from .plan import AXIS, Plan


@dataclasses.dataclass(frozen=True)
class ChunkRun:
    """What `run_chunks` leaves: the per-sample outputs of all samples
    (`solutions`, `responses`, `diagnostics`, result codes), which chunks it computed and
    which it read, and its timings and failed writes."""

    outputs: tuple[Any, Any, dict[str, np.ndarray], np.ndarray]
    computed: tuple[int, ...]
    loaded: tuple[int, ...]
    first_chunk_s: float | None  # None when every chunk was read
    started: float  # time.perf_counter() before the first chunk
    write_errors: dict[str, str]


def run_chunks(
    plan: Plan,
    simulate_options: Mapping[str, Any],
    response: Callable[[Solution], Any] | None,
    keep_solutions: bool,
    progress: bool,
    *,
    run: Callable,
) -> ChunkRun:
    """Compute this process's chunks that the store lacks, then read the others from it
    (computing again those damaged or missing, as `plan.store` decides). `run` is the
    compiled chunk: `run_chunk`, as `monte_carlo` passes it."""
    store = plan.store
    todo = [k for k in plan.mine() if store is None or not store.finished(*plan.ranges[k])]
    batched, shared = eqx.partition(plan.inputs, plan.mask)
    shared = jax.device_put(shared, NamedSharding(plan.mesh, P()))
    split = NamedSharding(plan.mesh, P(AXIS))
    kernel = plan.mechanism.replace_params(None)  # parameters travel as (traced) inputs
    options = (simulate_options, response, keep_solutions, plan.mesh, plan.vectorize)
    times = (plan.t_span, plan.saveat)

    def part(k: int):
        start, stop = plan.ranges[k]
        return jax.tree_util.tree_map(lambda x: pad(x[start:stop], plan.chunk), batched)

    # The outputs' structure, traced (not compiled) before any sample runs; the host
    # arrays of all samples are filled chunk by chunk.
    shapes = eqx.filter_eval_shape(run, kernel, part(0), shared, *times, *options)
    outputs = jax.tree_util.tree_map(lambda s: np.empty((plan.size, *s.shape[1:]), s.dtype), shapes)
    targets = output_arrays(*outputs)
    write_errors: dict[str, str] = {}
    started, first_chunk = time.perf_counter(), None

    def compute(k: int) -> None:
        """Run chunk k, write its checkpoint file (a failure only warns) and keep it."""
        nonlocal first_chunk
        out = jax.device_get(run(kernel, jax.device_put(part(k), split), shared, *times, *options))
        start, stop = plan.ranges[k]
        arrays = {name: values[: stop - start] for name, values in output_arrays(*out).items()}
        if store is not None:
            _write_chunk(store, start, stop, arrays, write_errors)
        for name, values in arrays.items():
            targets[name][start:stop] = values
        if first_chunk is None:
            first_chunk = time.perf_counter() - started

    bar = progress_bar(len(todo), progress)
    for k in todo:
        compute(k)
        bar.update(1)
    bar.close()
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"jaxmbs.monte_carlo {store.study}")
    computed, loaded = list(todo), []
    for k in (k for k in range(plan.n_chunks) if k not in todo):
        start, stop = plan.ranges[k]
        arrays = store.read(start, stop, list(targets))
        if arrays is None:  # damaged or missing, and on_damaged_chunk="recompute"
            compute(k)
            computed.append(k)
            continue
        for name, values in arrays.items():
            targets[name][start:stop] = values
        loaded.append(k)
    return ChunkRun(outputs, tuple(computed), tuple(loaded), first_chunk, started, write_errors)


def _write_chunk(
    store: ChunkStore, start: int, stop: int, arrays: Mapping[str, np.ndarray], errors: dict
) -> None:
    """Write a chunk file; a failure warns and is recorded in `errors` (path → reason)."""
    try:
        store.write(start, stop, arrays)
    except OSError as err:
        path = str(store.path(start, stop))
        errors[path] = os_reason(err)
        warnings.warn(
            f"monte_carlo could not write the checkpoint file {path}: "
            f"{os_reason(err)}. Its samples are in the result; a resumed run "
            "computes them again",
            RuntimeWarning,
            stacklevel=5,  # _write_chunk < compute < run_chunks < monte_carlo < its caller
        )


@eqx.filter_jit
def run_chunk(mechanism, batched, shared, t_span, saveat, kwargs, response, keep, mesh, vectorize):
    """One chunk: simulate over each device's share (vmap or lax.map), shard_map over the mesh."""

    def one(sample, common):
        shared, t_span, saveat = common
        inputs = eqx.combine(sample, shared)
        sol = simulate(
            mechanism,
            inputs["q0"],
            inputs["qd0"],
            t_span,
            params=inputs["params"],
            saveat=saveat,
            throw=False,
            **kwargs,
        )
        return (
            sol if keep else None,
            None if response is None else response(sol),
            diagnostics(sol),
            result_index(sol.result),
        )

    if vectorize:
        per_device = jax.vmap(one, in_axes=(0, None))
    else:

        def per_device(samples, common):
            return jax.lax.map(lambda sample: one(sample, common), samples)

    if mesh.size == 1:
        return per_device(batched, (shared, t_span, saveat))
    return jax.shard_map(
        per_device, mesh=mesh, in_specs=(P(AXIS), P()), out_specs=P(AXIS), check_vma=False
    )(batched, (shared, t_span, saveat))


def diagnostics(sol: Solution) -> dict[str, jax.Array]:
    """`MonteCarloResult.diagnostics` of one sample (computed on the device)."""
    out = {
        "num_steps": sol.stats["num_steps"],
        "rhs_evaluations": sol.stats["rhs_evaluations"],
        "max_position_residual": jnp.max(sol.position_residual),
        "max_velocity_residual": jnp.max(sol.velocity_residual),
    }
    if sol.energy is not None:
        e0 = sol.energy[0]
        out["energy_drift"] = jnp.max(jnp.abs(sol.energy - e0)) / jnp.abs(e0)
    return out


def pad(x: np.ndarray, size: int) -> np.ndarray:
    """Pad the sample axis to `size` by repeating the last sample (valid, so cheap)."""
    extra = size - x.shape[0]
    return x if extra == 0 else np.concatenate([x, np.repeat(x[-1:], extra, axis=0)])


def progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="chunk", desc="monte_carlo", disable=not enabled)
