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

import dataclasses
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import jax

from ..integrate import Solution
from .checkpoint import ChunkStore as ChunkStore
from .checkpoint import atomic_write, os_reason
from .plan import Plan, make_plan
from .plan import lapack_free as lapack_free
from .plan import process_share as process_share
from .result import MonteCarloResult as MonteCarloResult
from .result import statistics, write_result
from .result import summarize as summarize
from .run import ChunkRun, run_chunks
from .run import run_chunk as _run_chunk

if TYPE_CHECKING:
    from ..model import Mechanism

# The public entry `monte_carlo`; its parts, one job each: `jaxmbs.batch.plan` (the
# arguments checked, the chunk plan, the fingerprint), `jaxmbs.batch.run` (the compiled
# chunks, checkpoint resume) and `jaxmbs.batch.result` (`MonteCarloResult`, statistics,
# files). `_run_chunk` (the compiled chunk) and `atomic_write` (the writer of `save=`) are
# looked up here at every call: the seams where tests and benchmarks/batch.py reach in.


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
    # Over 80 lines only by this docstring, the reference of every argument (docs/api.md);
    # the work is in make_plan, run_chunks and the result's helpers below.
    plan = make_plan(
        mechanism,
        batch,
        t_span,
        q0=q0,
        qd0=qd0,
        saveat=saveat,
        response=response,
        keep_solutions=keep_solutions,
        chunk_size=chunk_size,
        devices=devices,
        vectorize=vectorize,
        save=save,
        checkpoint_dir=checkpoint_dir,
        on_damaged_chunk=on_damaged_chunk,
        simulate_options=simulate_kwargs,
    )
    ran = run_chunks(plan, simulate_kwargs, response, keep_solutions, progress, run=_run_chunk)
    result = _result(plan, ran)
    if plan.save is not None and jax.process_index() == 0:
        result = _save(result, plan.save)
    return result


def _result(plan: Plan, ran: ChunkRun) -> MonteCarloResult:
    solutions, responses, diagnostics, codes = ran.outputs
    return MonteCarloResult(
        result=codes,
        solutions=solutions,
        responses=responses,
        diagnostics=diagnostics,
        statistics=statistics(codes, responses, diagnostics),
        inputs=plan.named_inputs(),
        chunk_size=plan.chunk,
        n_chunks=plan.n_chunks,
        devices=tuple(str(d) for d in plan.devices),
        timings={"first_chunk_s": ran.first_chunk_s, "total_s": time.perf_counter() - ran.started},
        chunks_computed=ran.computed,
        chunks_loaded=ran.loaded,
        write_errors=ran.write_errors,
    )


def _save(result: MonteCarloResult, path: Path) -> MonteCarloResult:
    """`result` written to `path` (save=); a failure warns and is recorded in the returned
    result's `write_errors`, whose results stay."""
    try:
        write_result(result, path, atomic_write)
    except OSError as err:
        warnings.warn(
            f"monte_carlo could not write save={str(path)!r}: {os_reason(err)}. The "
            "results are in the returned MonteCarloResult (its write_errors records "
            "this); write them elsewhere with its save method",
            RuntimeWarning,
            stacklevel=3,  # _save < monte_carlo < its caller
        )
        return dataclasses.replace(
            result, write_errors={**result.write_errors, str(path): os_reason(err)}
        )
    return result
