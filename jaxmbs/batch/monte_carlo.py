"""Monte Carlo batches: many trajectories at once, in chunks, sharded over all local devices.

`monte_carlo` runs [`jaxmbs.simulate`][] over a leading sample axis of the initial
conditions and/or parameters (DESIGN §6). The batch runs in chunks of `chunk_size` samples:
every chunk is one call of one compiled program (the last chunk is padded, so the program is
compiled once), which bounds the device memory by the chunk and not by the batch. Each chunk
is split over the devices of a `jax.sharding.Mesh` with `jax.shard_map`: every device runs
its own solve on its share (vmapped, or one sample after another, below) with no
cross-device synchronisation per step; with one device no shard_map is needed. Simulations
run with `throw=False`, so a failed sample (non-finite parameter, inconsistent start,
singular configuration, step failure, step limit) is frozen, flagged by its result code
and costs the others nothing.

**Checkpoints.** With `checkpoint_dir=`, every finished chunk is written to that directory
at once, atomically, with the study's fingerprint and a checksum of the file
(`jaxmbs.batch.checkpoint`). A run that dies loses at most the chunks in flight: the same
call again reads the finished chunks and computes only the others, and the results are those
of an uninterrupted run, bit for bit (the same compiled program on the same samples). A
directory of another study is refused; a chunk file that does not match its checksum (or is
missing after the other processes finished) is computed again with a warning, or refused
(`on_damaged_chunk="raise"`).

**Nothing computed is lost.** `save=` and `checkpoint_dir=` are checked by writing (a file
created and removed) before anything compiles. A file that cannot be written after the run
all the same (a full disk, …) costs only that file: the warning names it and the reason,
the results stay in the returned `MonteCarloResult` and `write_errors` records the file.

**Several processes.** Under `jax.distributed.initialize(...)` (one process per host, or
several on one), every process calls `monte_carlo` with the same arguments, the whole batch
and a `checkpoint_dir` they all share (on several hosts: a shared file system). The chunks
are split among the processes in contiguous blocks (process i of P takes chunks
⌊iK/P⌉ … ⌊(i+1)K/P⌉ − 1 of K); each runs its block on its local devices and writes the
chunk files; after a barrier (`jax.experimental.multihost_utils.sync_global_devices`) every
process reads the others' chunks and returns the whole result, in sample order. The chunk
grid depends only on the batch and `chunk_size`, so a study can be resumed with any number
of processes.

**Memory.** The host holds the per-sample outputs (result code, diagnostics, responses:
a few numbers per sample) and, with `keep_solutions=True`, the trajectories; the devices
hold one chunk. Statistics are exact, computed from the per-sample outputs: a large study sets
`keep_solutions=False` (trajectories are then neither kept nor written to the chunk files)
and holds ~8 bytes per sample and output number, plus the inputs it was given.

**vmap or map.** On accelerators the samples of a chunk are vmapped. On CPU they are
vmapped only when a sample calls no LAPACK routine (`lapack_free`: the `banded`
formulation on small blocks, an explicit solver, a rank check on at most 16 rows, no
redundant rows), and otherwise run one after another inside the compiled chunk
(`lax.map`). A batched LAPACK call on CPU is a loop over the matrices, and with jaxlib
0.10.2 two of them can deadlock: a native stack of a hung 2-core run showed two batched QR
factorisations (once a QR and a triangular solve), each holding one of the two threads of
XLA's intra-op pool and waiting in `ParallelBatchMap` for the other. The `banded` kernels
are unrolled elementwise code instead, vectorised across the samples: one vmapped chunk of
1024 four-bars runs ~5× faster than single runs on one core.

**CPU cores as devices.** JAX exposes one CPU device by default, and a vmapped chunk then
runs on one core (XLA's splitting of single kernels over threads gains nothing at these
sizes). Make every core a device before the first JAX computation,

    jax.config.update("jax_num_cpu_devices", os.cpu_count())

and `monte_carlo` shards each chunk over them: on the 2-core CPU a chunk of 1024 four-bars
then runs ~10× faster than the single runs (`benchmarks/README.md`). Single runs
(`simulate`) use the first device either way.

**float32.** Without `jax_enable_x64` the batch runs in float32 (the usual GPU choice).
Measured over 10 s from the default states (`experiments/float32_accuracy.py`; float64 at
rtol = atol = 1e-8, float32 at 1e-5; max over 201 output times):

| model | case | max abs Φ | max abs c | energy drift | max q error vs float64 |
|---|---|---|---|---|---|
| physical pendulum | float64, projection | 1e-16 | 2e-16 | 5e-8 | 8e-8 |
| | float32, projection | 6e-8 | 1e-7 | 9e-5 | 5e-5 |
| | float32, no stabilisation | 3e-4 | 1e-4 | 1e-3 | 4e-4 |
| four-bar | float64, projection | 1e-16 | 9e-16 | 8e-8 | 2e-6 |
| | float32, projection | 6e-8 | 5e-7 | 2e-4 | 6e-2 |
| | float32, no stabilisation | 2e-3 | 5e-4 | 2e-3 | 2e-1 |
| slider-crank | float64, projection | 5e-16 | 9e-16 | 1e-7 | 2e-6 |
| | float32, projection | 3e-7 | 5e-7 | 5e-4 | 5e-2 |
| | float32, no stabilisation | 3e-3 | 6e-4 | 1e-2 | 6e-2 |
| 5-link chain | float64, projection | 9e-16 | 2e-15 | 3e-9 | 4e-7 |
| | float32, projection | 5e-7 | 1e-6 | 4e-6 | 1e-4 |
| | float32, no stabilisation | 3e-4 | 1e-4 | 3e-4 | 8e-4 |

So in float32 keep the projection (it holds the constraints at float32 round-off, ~1e-7);
expect relative energy drift of 1e-6…5e-4 and a phase error that grows along the motion (the
q error is dominated by it), i.e. float32 suits statistics over many samples, not
long-horizon trajectories of one.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from .._internal.linalg import MAX_BLOCK
from ..formulations import AbstractFormulation, get_formulation
from ..integrate import (
    RESULT_NAMES,
    AbstractStabilization,
    Solution,
    get_stabilization,
    result_index,
    simulate,
)
from .checkpoint import (
    ON_DAMAGED,
    ChunkStore,
    atomic_write,
    check_directory,
    check_writable,
    fingerprint,
    os_reason,
)

if TYPE_CHECKING:
    from ..model import Mechanism

#: Keys a batch may have: each maps to values with a leading sample axis.
BATCH_KEYS = ("q0", "qd0", "params")
#: The one mesh axis the samples are split along.
AXIS = "batch"
#: Per-sample keyword arguments that `monte_carlo` sets itself.
_RESERVED = ("throw", "params", "progress_meter")

#: The index of `successful` in `jaxmbs.integrate.RESULT_NAMES` (the per-sample codes).
SUCCESSFUL = RESULT_NAMES.index("successful")


@dataclasses.dataclass(frozen=True)
class MonteCarloResult:
    """The outcome of [`jaxmbs.monte_carlo`][]; all arrays are NumPy, samples first.

    **Fields:**

    - `result`: result code per sample, shape (B,): the index of its name in
      `jaxmbs.integrate.RESULT_NAMES` (0: successful).
    - `solutions`: the stacked [`jaxmbs.Solution`][] (leaves with a leading axis B), or
      None with `keep_solutions=False`.
    - `responses`: `response(solution)` per sample (a pytree of arrays, leading axis B),
      or None without a response function.
    - `diagnostics`: per-sample `num_steps`, `rhs_evaluations`, `max_position_residual`,
      `max_velocity_residual` and, where the mechanism has an energy, `energy_drift`
      (max |E − E₀| / |E₀|).
    - `statistics`: summary over the successful samples (see [`jaxmbs.summarize`][]), the
      counts of every result code and the failed sample indices.
    - `inputs`: the batched inputs as run (`q0`, `qd0`, `params.<name>`), shape (B, …).
    - `chunk_size`, `n_chunks`: the chunking actually used (chunk size rounded up to a
      multiple of the number of devices).
    - `devices`: the devices the chunks were sharded over.
    - `timings`: wall seconds of the first chunk computed (includes compilation; None when
      all were read from the checkpoint directory) and of the whole run.
    - `chunks_computed`: the chunks (indices in sample order) this call computed.
    - `chunks_loaded`: the chunks it read from `checkpoint_dir` instead: finished by an
      earlier run, or by the other processes.
    - `write_errors`: the files this call could not write (`save`, chunk files): path →
      the operating system's reason. Their results are in this object all the same (write
      them elsewhere with `save`); empty when every file was written.
    """

    result: np.ndarray
    solutions: Solution | None
    responses: Any
    diagnostics: dict[str, np.ndarray]
    statistics: dict[str, Any]
    inputs: dict[str, np.ndarray]
    chunk_size: int
    n_chunks: int
    devices: tuple[str, ...]
    timings: dict[str, float | None]
    chunks_computed: tuple[int, ...]
    chunks_loaded: tuple[int, ...]
    write_errors: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def successful(self) -> np.ndarray:
        """Boolean mask of the samples that succeeded."""
        return self.result == SUCCESSFUL

    def to_xarray(self, mechanism: Mechanism, *, options: Mapping[str, Any] | None = None):
        """The study as a labelled `xarray.Dataset` with a leading `sample` dimension
        ([`jaxmbs.to_xarray`][] per sample, plus the inputs and diagnostics; needs
        `jaxmbs[export]` and `keep_solutions=True`). `mechanism` is the one simulated."""
        from ..analysis import monte_carlo_to_xarray

        return monte_carlo_to_xarray(mechanism, self, options=options)

    def save(self, path: str | Path) -> Path:
        """Write the results to `path`: `.npz` (everything) or `.csv` (one row per sample).

        The CSV holds the sample index, the result code and its name, the batched inputs,
        the diagnostics and the responses (array-valued ones one column per element);
        trajectories are only in the NPZ file (`solution.q`, … with a leading sample axis).

        **Returns:** `path`, as a Path.

        **Raises:** `ValueError` for a path that cannot be written (checked first);
        `OSError` when writing fails all the same (the file is then left as it was).
        """
        path = _check_save_path(path)
        if path.suffix == ".npz":
            arrays = _output_arrays(self.solutions, self.responses, self.diagnostics, self.result)
            arrays.update(_prefixed("inputs", self.inputs))
            arrays["statistics_json"] = np.array(json.dumps(self.statistics))
            atomic_write(path, lambda f: np.savez(f, **arrays))
        else:
            columns = {"sample": np.arange(self.result.shape[0]), "result": self.result}
            columns["result_name"] = np.array([RESULT_NAMES[int(c)] for c in self.result])
            for group in (
                self.inputs,
                self.diagnostics,
                _prefixed("response", _named_leaves(self.responses)),
            ):
                for name, values in group.items():
                    columns.update(_columns(name, values))
            rows = zip(*(col.tolist() for col in columns.values()), strict=True)
            atomic_write(path, lambda f: _write_csv(f, [list(columns), *rows]))
        return path


def monte_carlo(
    mechanism: Mechanism,
    batch: Mapping[str, Any],
    t_span: tuple[float, float],
    *,
    q0=None,
    qd0=None,
    saveat=None,
    response: Callable[[Solution], Any] | None = None,
    keep_solutions: bool = True,
    chunk_size: int | None = None,
    devices: Sequence[jax.Device] | None = None,
    vectorize: bool | None = None,
    progress: bool = False,
    save: str | Path | None = None,
    checkpoint_dir: str | Path | None = None,
    on_damaged_chunk: Literal["recompute", "raise"] = "recompute",
    **simulate_kwargs,
) -> MonteCarloResult:
    """Simulate a batch of samples (initial conditions and/or parameters) at once.

    **Arguments:**

    - `mechanism`: a [`jaxmbs.Mechanism`][].
    - `batch`: a mapping with any of `"q0"` (B, n), `"qd0"` (B, n) and `"params"`. For
      dict parameters, `batch["params"]` holds only the batched entries, each with a
      leading axis B (e.g. `{"m2": masses}`); the others come from `mechanism.params`.
      Parameters of any other pytree type are given whole, every leaf batched.
    - `t_span`: `(t0, t1)`, shared by all samples.
    - `q0`, `qd0`: the initial state shared by all samples when not in `batch`.
    - `saveat`: output times shared by all samples (None: t1 only).
    - `response`: `Solution -> pytree of arrays` evaluated per sample on the device (e.g.
      the peak reaction); its statistics over the successful samples are reported.
    - `keep_solutions`: keep the stacked trajectories (set False with a `response` for
      large batches: only the responses and diagnostics then come back to the host).
    - `chunk_size`: samples per compiled call (None: the whole batch in one chunk); rounded
      up to a multiple of the number of devices.
    - `devices`: devices to shard every chunk over (default: all local devices).
    - `vectorize`: on each device, vmap the samples of a chunk (True) or run them one after
      another inside the compiled chunk with `lax.map` (False). Default: vmap on
      accelerators, and on CPU when the samples call no LAPACK routine
      ([`jaxmbs.lapack_free`][]; batched LAPACK calls can deadlock in jaxlib 0.10.2, see the
      module notes). Results agree to round-off.
    - `progress`: show a progress bar over the chunks.
    - `save`: write the result to this `.npz` or `.csv` path (see `MonteCarloResult.save`;
      under `jax.distributed`, process 0 writes it). Checked by writing before the run; if
      writing fails after it all the same, a warning names the file and the reason and the
      result records it in `write_errors` (the results are returned, not lost).
    - `checkpoint_dir`: write every finished chunk to this directory and resume from the
      chunks found there (see the module notes); needed with several processes.
    - `on_damaged_chunk`: what to do with a chunk file in `checkpoint_dir` that does not
      match its checksum record, cannot be read, belongs to another study, or is missing
      after the other processes finished: `"recompute"` (default) computes its samples
      again, with a warning naming the file and why; `"raise"` refuses it with a
      `ValueError` naming them.
    - `simulate_kwargs`: passed to [`jaxmbs.simulate`][] (`method`, `stabilization`, `rtol`,
      `atol`, `solver`, `max_steps`, …); `throw` is always False here.

    All arguments are checked, and a checkpoint directory of another study (or with a
    manifest that cannot be read) refused, before any sample runs.

    **Returns:** a [`jaxmbs.MonteCarloResult`][].
    """
    for key in _RESERVED:
        if key in simulate_kwargs:
            raise ValueError(
                f"monte_carlo sets {key!r} itself (per-sample result codes, batched params); "
                "do not pass it"
            )
    if on_damaged_chunk not in ON_DAMAGED:
        raise ValueError(f"on_damaged_chunk must be one of {ON_DAMAGED}, got {on_damaged_chunk!r}")
    save = None if save is None else _check_save_path(save)
    directory = None if checkpoint_dir is None else check_directory(checkpoint_dir)
    if directory is None and jax.process_count() > 1:
        raise ValueError(
            f"with {jax.process_count()} processes (jax.distributed), give checkpoint_dir=: a "
            "directory all processes share, where each writes its chunks and reads the others'"
        )
    dtype = jnp.result_type(float)
    inputs, mask, size = _batch_inputs(mechanism, batch, q0, qd0, dtype)
    if mechanism.structure is None:  # analysed here, on concrete data, never under jit
        mechanism = mechanism.with_structure(np.asarray(_sample(inputs, mask, 0)["q0"]))
    t_span, saveat = _check_times(t_span, saveat, dtype)
    devices = tuple(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must not be empty")
    mesh = Mesh(np.array(devices), (AXIS,))
    if vectorize is None:
        vectorize = devices[0].platform != "cpu" or lapack_free(mechanism, **simulate_kwargs)
    chunk = _chunk_size(chunk_size, size, len(devices))
    n_chunks = -(-size // chunk)
    ranges = [(k * chunk, min((k + 1) * chunk, size)) for k in range(n_chunks)]
    store = None
    if directory is not None:
        digests = fingerprint(
            {
                "mechanism": _static_description(mechanism),
                "inputs": {key: (inputs[key], mask[key]) for key in inputs},
                "times": {"t_span": t_span, "saveat": saveat},
                "options": {
                    **simulate_kwargs,
                    "response": response,
                    "keep_solutions": keep_solutions,
                    "vectorize": vectorize,
                },
                "chunks": {"n_samples": size, "chunk_size": chunk},
                "numerics": {
                    "dtype": str(dtype),
                    "jax": jax.__version__,
                    "platform": devices[0].platform,
                },
            }
        )
        info = {"n_samples": size, "chunk_size": chunk, "n_chunks": n_chunks}
        store = ChunkStore.open(directory, digests, info, on_damaged_chunk)
    mine = range(n_chunks)[_even_share(n_chunks, jax.process_index(), jax.process_count())]
    todo = [k for k in mine if store is None or not store.finished(*ranges[k])]
    batched, shared = eqx.partition(inputs, mask)
    shared = jax.device_put(shared, NamedSharding(mesh, P()))
    split = NamedSharding(mesh, P(AXIS))
    kernel = mechanism.replace_params(None)  # parameters travel as (traced) inputs
    options = (simulate_kwargs, response, keep_solutions, mesh, vectorize)

    def part(k: int):
        start, stop = ranges[k]
        return jax.tree_util.tree_map(lambda x: _pad(x[start:stop], chunk), batched)

    # The outputs' structure, traced (not compiled) before any sample runs; the host
    # arrays of all samples are filled chunk by chunk.
    shapes = eqx.filter_eval_shape(_run_chunk, kernel, part(0), shared, t_span, saveat, *options)
    outputs = jax.tree_util.tree_map(lambda s: np.empty((size, *s.shape[1:]), s.dtype), shapes)
    targets = _output_arrays(*outputs)
    write_errors: dict[str, str] = {}
    start_time = time.perf_counter()
    first_chunk = None

    def compute(k: int) -> None:
        """Run chunk k, write its checkpoint file (a failure only warns) and keep it."""
        nonlocal first_chunk
        out = jax.device_get(
            _run_chunk(kernel, jax.device_put(part(k), split), shared, t_span, saveat, *options)
        )
        start, stop = ranges[k]
        arrays = {name: values[: stop - start] for name, values in _output_arrays(*out).items()}
        if store is not None:
            try:
                store.write(start, stop, arrays)
            except OSError as err:
                path = str(store.path(start, stop))
                write_errors[path] = os_reason(err)
                warnings.warn(
                    f"monte_carlo could not write the checkpoint file {path}: "
                    f"{os_reason(err)}. Its samples are in the result; a resumed run "
                    "computes them again",
                    RuntimeWarning,
                    stacklevel=3,
                )
        for name, values in arrays.items():
            targets[name][start:stop] = values
        if first_chunk is None:
            first_chunk = time.perf_counter() - start_time

    bar = _progress_bar(len(todo), progress)
    for k in todo:
        compute(k)
        bar.update(1)
    bar.close()
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(f"jaxmbs.monte_carlo {store.study}")
    computed, loaded = list(todo), []
    for k in (k for k in range(n_chunks) if k not in todo):
        start, stop = ranges[k]
        arrays = store.read(start, stop, list(targets))
        if arrays is None:  # damaged or missing, and on_damaged_chunk="recompute"
            compute(k)
            computed.append(k)
            continue
        for name, values in arrays.items():
            targets[name][start:stop] = values
        loaded.append(k)
    solutions, responses, diagnostics, codes = outputs
    named_inputs = {
        name: np.asarray(values)
        for name, values in _named_leaves(jax.tree_util.tree_map(np.asarray, batched)).items()
    }
    result = MonteCarloResult(
        result=codes,
        solutions=solutions,
        responses=responses,
        diagnostics=diagnostics,
        statistics=_statistics(codes, responses, diagnostics),
        inputs=named_inputs,
        chunk_size=chunk,
        n_chunks=n_chunks,
        devices=tuple(str(d) for d in devices),
        timings={"first_chunk_s": first_chunk, "total_s": time.perf_counter() - start_time},
        chunks_computed=tuple(computed),
        chunks_loaded=tuple(loaded),
        write_errors=write_errors,
    )
    if save is not None and jax.process_index() == 0:
        try:
            result.save(save)
        except OSError as err:
            warnings.warn(
                f"monte_carlo could not write save={str(save)!r}: {os_reason(err)}. The "
                "results are in the returned MonteCarloResult (its write_errors records "
                "this); write them elsewhere with its save method",
                RuntimeWarning,
                stacklevel=2,
            )
            result = dataclasses.replace(
                result, write_errors={**write_errors, str(save): os_reason(err)}
            )
    return result


def lapack_free(
    mechanism: Mechanism,
    *,
    method: str | AbstractFormulation = "auto",
    stabilization: str | AbstractStabilization = "projection",
    solver: diffrax.AbstractSolver | None = None,
    check_rank: bool = True,
    **_,
) -> bool:
    """Whether [`jaxmbs.simulate`][] with these options calls no LAPACK routine for this
    mechanism, so that vmapping it on CPU is fast and safe (see the module notes).

    True for the `banded` formulation when its band plans are unrolled kernels (blocks of M
    and of C M⁻¹ Cᵀ of at most `MAX_BLOCK`; the projection solves on the same kind of
    plan), with an explicit Runge–Kutta solver, no redundant rows (their minimum-norm
    multipliers need a dense solve) and a rank check (if any) on at most `MAX_BLOCK`
    independent rows (`jaxmbs._internal.linalg.orthonormal_rows`).
    """
    structure = mechanism.structure
    return (
        structure is not None
        and get_formulation(method, structure).lapack_free(structure)
        and get_stabilization(stabilization).lapack_free(structure)
        and (solver is None or isinstance(solver, diffrax.AbstractERK))
        and not (check_rank and structure.rank > MAX_BLOCK)
    )


@eqx.filter_jit
def _run_chunk(mechanism, batched, shared, t_span, saveat, kwargs, response, keep, mesh, vectorize):
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
            _diagnostics(sol),
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


def _diagnostics(sol: Solution) -> dict[str, jax.Array]:
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


def summarize(values, mask=None) -> dict[str, Any]:
    """Summary statistics over the samples (axis 0) selected by `mask`.

    **Returns:** `count`, `mean`, `std`, `min`, `p05`, `p50`, `p95`, `max` (element-wise for
    array-valued samples; NaN when no sample is selected).
    """
    values = np.asarray(values, dtype=float)
    if mask is not None:
        values = values[np.asarray(mask, dtype=bool)]
    out: dict[str, Any] = {"count": int(values.shape[0])}
    if values.shape[0] == 0:
        nan = np.full(values.shape[1:], np.nan)
        stats = dict.fromkeys(("mean", "std", "min", "p05", "p50", "p95", "max"), nan)
    else:
        p05, p50, p95 = np.percentile(values, [5, 50, 95], axis=0)
        stats = {
            "mean": values.mean(axis=0),
            "std": values.std(axis=0),
            "min": values.min(axis=0),
            "p05": p05,
            "p50": p50,
            "p95": p95,
            "max": values.max(axis=0),
        }
    out.update({k: np.asarray(v).tolist() for k, v in stats.items()})
    return out


def process_share(
    batch: Mapping[str, Any], process_index: int | None = None, process_count: int | None = None
) -> tuple[dict[str, Any], slice]:
    """This process's contiguous share of a batch, for multi-host runs (`jax.distributed`).

    Samples are split as evenly as possible in order; every batched leaf (with a leading
    axis B) is sliced. Defaults: `jax.process_index()` and `jax.process_count()`.

    **Returns:** the sub-batch and the slice of the full batch it covers.
    """
    index = jax.process_index() if process_index is None else int(process_index)
    count = jax.process_count() if process_count is None else int(process_count)
    share = _even_share(_leading_size(batch), index, count)
    sub = {
        key: jax.tree_util.tree_map(lambda x: np.asarray(x)[share], value)
        for key, value in batch.items()
    }
    return sub, share


def _even_share(size: int, index: int, count: int) -> slice:
    """Share `index` of `count` of `size` items in order: ⌊i·size/count⌉ … ⌊(i+1)·size/count⌉."""
    if not 0 <= index < count:
        raise ValueError(f"process_index must be in [0, {count}), got {index}")
    bounds = np.linspace(0, size, count + 1).round().astype(int)
    return slice(int(bounds[index]), int(bounds[index + 1]))


def _leading_size(batch: Mapping[str, Any]) -> int:
    if not isinstance(batch, Mapping) or not batch:
        raise ValueError(f"batch must be a non-empty mapping with keys from {BATCH_KEYS}")
    unknown = set(batch) - set(BATCH_KEYS)
    if unknown:
        raise ValueError(f"unknown batch keys {sorted(unknown)}; allowed: {BATCH_KEYS}")
    sizes = {}
    for key, value in batch.items():
        for path, leaf in jax.tree_util.tree_flatten_with_path(value)[0]:
            shape = np.shape(leaf)
            name = key + jax.tree_util.keystr(path)
            if not shape:
                raise ValueError(f"batch entry {name} has no leading sample axis")
            sizes[name] = shape[0]
    if not sizes:
        raise ValueError("batch has no arrays")
    if len(set(sizes.values())) != 1:
        raise ValueError(f"batch entries disagree on the number of samples: {sizes}")
    size = next(iter(sizes.values()))
    if size == 0:
        raise ValueError("batch has no samples")
    return size


def _batch_inputs(mechanism, batch, q0, qd0, dtype):
    """Inputs {"q0", "qd0", "params"} as arrays of `dtype` and the mask of batched leaves."""
    size = _leading_size(batch)
    n = mechanism.n
    inputs, mask = {}, {}
    for key, shared in (("q0", q0), ("qd0", qd0)):
        if key in batch:
            value = np.asarray(batch[key], dtype=dtype)
            if value.shape != (size, n):
                raise ValueError(f"batch[{key!r}] must have shape ({size}, {n}), got {value.shape}")
            inputs[key], mask[key] = value, True
        elif shared is not None:
            value = np.asarray(shared, dtype=dtype)
            if value.shape != (n,):
                raise ValueError(f"{key} must have shape ({n},), got {value.shape}")
            inputs[key], mask[key] = value, False
        else:
            raise ValueError(f"give {key} either in batch[{key!r}] or as the {key}= argument")
    params, param_mask = _batch_params(mechanism.params, batch.get("params"))
    inputs["params"] = jax.tree_util.tree_map(lambda x: np.asarray(x, dtype=dtype), params)
    mask["params"] = param_mask
    return inputs, mask, size


def _batch_params(params, batched):
    if batched is None:
        return params, jax.tree_util.tree_map(lambda _: False, params)
    if isinstance(params, Mapping) and isinstance(batched, Mapping):
        unknown = set(batched) - set(params)
        if unknown:
            raise ValueError(
                f"batch['params'] has entries {sorted(unknown)} that the mechanism's "
                f"parameters lack; they are {sorted(params)}"
            )
        merged = {**params, **batched}
        mask = {
            key: jax.tree_util.tree_map(lambda _, flag=key in batched: flag, value)
            for key, value in merged.items()
        }
        return merged, mask
    if params is not None and (
        jax.tree_util.tree_structure(params) != jax.tree_util.tree_structure(batched)
    ):
        raise ValueError(
            "batch['params'] must have the structure of the mechanism's parameters "
            "(or, for dict parameters, be a dict of the batched entries)"
        )
    return batched, jax.tree_util.tree_map(lambda _: True, batched)


def _sample(inputs, mask, k: int):
    return jax.tree_util.tree_map(lambda x, m: x[k] if m else x, inputs, mask)


def _check_times(t_span, saveat, dtype):
    if len(t_span) != 2:
        raise ValueError(f"t_span must be (t0, t1), got {t_span!r}")
    t0, t1 = (float(t) for t in t_span)
    if not t1 > t0:
        raise ValueError(f"t_span must have t1 > t0, got {t_span!r}")
    if saveat is not None:
        saveat = np.asarray(saveat, dtype=dtype)
        if saveat.ndim != 1 or saveat.shape[0] == 0:
            raise ValueError(f"saveat must be a non-empty 1-D array of times, got {saveat.shape}")
        if np.any(np.diff(saveat) < 0) or saveat[0] < t0 or saveat[-1] > t1:
            raise ValueError(f"saveat must be non-decreasing and lie within ({t0}, {t1})")
        saveat = jnp.asarray(saveat)
    return (jnp.asarray(t0, dtype), jnp.asarray(t1, dtype)), saveat


def _chunk_size(chunk_size: int | None, size: int, n_devices: int) -> int:
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    chunk = size if chunk_size is None else min(chunk_size, size)
    return -(-chunk // n_devices) * n_devices


def _pad(x: np.ndarray, size: int) -> np.ndarray:
    """Pad the sample axis to `size` by repeating the last sample (valid, so cheap)."""
    extra = size - x.shape[0]
    return x if extra == 0 else np.concatenate([x, np.repeat(x[-1:], extra, axis=0)])


def _check_save_path(path: str | Path) -> Path:
    """`path` as a Path: a `.npz` or `.csv` file in an existing directory, which can be
    written (checked by writing: `jaxmbs.batch.checkpoint.check_writable`)."""
    if not isinstance(path, str | os.PathLike):
        raise ValueError(f"save must be a path, got {type(path).__name__}")
    path = Path(path)
    if path.suffix not in (".npz", ".csv"):
        raise ValueError(f"save path must end in .npz or .csv, got {path.name!r}")
    if not path.parent.exists():
        raise ValueError(f"save path's directory {str(path.parent)!r} does not exist")
    check_writable(path, "save")
    return path


def _write_csv(f, rows) -> None:
    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    csv.writer(text).writerows(rows)
    text.flush()
    text.detach()


def _static_description(mechanism: Mechanism) -> tuple:
    """The mechanism for the fingerprint: its fields, and its structure without the
    conditioning hint `smallest_pivot` (round-off that may differ between hosts)."""
    fields = {f.name: getattr(mechanism, f.name) for f in dataclasses.fields(mechanism)}
    structure = fields.pop("structure")
    return fields, dataclasses.replace(structure, smallest_pivot=0.0)


def _progress_bar(total: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(total=total, unit="chunk", desc="monte_carlo", disable=not enabled)


def _statistics(codes, responses, diagnostics) -> dict[str, Any]:
    ok = codes == SUCCESSFUL
    values, counts = np.unique(codes, return_counts=True)
    return {
        "n_samples": int(codes.shape[0]),
        "n_successful": int(ok.sum()),
        "results": {RESULT_NAMES[int(v)]: int(c) for v, c in zip(values, counts, strict=True)},
        "failed": np.flatnonzero(~ok).tolist(),
        "diagnostics": {name: summarize(v, ok) for name, v in diagnostics.items()},
        "responses": {name: summarize(v, ok) for name, v in _named_leaves(responses).items()},
    }


def _key_name(key) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def _named_leaves(tree) -> dict[str, np.ndarray]:
    """Leaves of a pytree by dotted path (`params.m2`, `stats.num_steps`, `0` …)."""
    if tree is None:
        return {}
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        ".".join(_key_name(k) for k in path) or "value": np.asarray(leaf) for path, leaf in leaves
    }


def _output_arrays(solutions, responses, diagnostics, codes) -> dict[str, np.ndarray]:
    """The per-sample outputs by file name (`result`, `diagnostics.…`, `responses.…`,
    `solution.…`), as in the NPZ files of `MonteCarloResult.save` and of the checkpoints."""
    arrays = {"result": codes, **_prefixed("diagnostics", diagnostics)}
    arrays.update(_prefixed("responses", _named_leaves(responses)))
    arrays.update(_prefixed("solution", _named_leaves(solutions)))
    return arrays


def _prefixed(prefix: str, named: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{prefix}.{name}": value for name, value in named.items()}


def _columns(name: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """One CSV column per element of a per-sample array (`q0[3]`, …)."""
    values = np.asarray(values)
    if values.ndim == 1:
        return {name: values}
    flat = values.reshape(values.shape[0], -1)
    index = list(np.ndindex(values.shape[1:]))
    return {f"{name}[{','.join(map(str, i))}]": flat[:, j] for j, i in enumerate(index)}
