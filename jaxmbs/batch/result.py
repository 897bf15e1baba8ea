"""The outcome of a Monte Carlo batch: `MonteCarloResult`, its statistics over the
successful samples, and its NPZ and CSV files."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import numpy as np

from ..integrate import RESULT_NAMES, Solution
from ._outputs import named_leaves, output_arrays, prefixed
from .checkpoint import atomic_write, check_writable

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

    def save(self, path: str | Path) -> Path:
        """Write the results to `path`: `.npz` (everything) or `.csv` (one row per sample).

        The CSV holds the sample index, the result code and its name, the batched inputs,
        the diagnostics and the responses (array-valued ones one column per element);
        trajectories are only in the NPZ file (`solution.q`, … with a leading sample axis).

        **Returns:** `path`, as a Path.

        **Raises:** `ValueError` for a path that cannot be written (checked first);
        `OSError` when writing fails all the same (the file is then left as it was).
        """
        return write_result(self, path)


def write_result(
    result: MonteCarloResult,
    path: str | Path,
    write: Callable[[Path, Callable[[IO[bytes]], None]], None] = atomic_write,
) -> Path:
    """`MonteCarloResult.save`: the result to `path` (`.npz` or `.csv`), each file written
    whole by `write` (default: atomically, `jaxmbs.batch.checkpoint.atomic_write`)."""
    path = check_save_path(path)
    if path.suffix == ".npz":
        arrays = output_arrays(
            result.solutions, result.responses, result.diagnostics, result.result
        )
        arrays.update(prefixed("inputs", result.inputs))
        arrays["statistics_json"] = np.array(json.dumps(result.statistics))
        write(path, lambda f: np.savez(f, **arrays))
    else:
        columns = {"sample": np.arange(result.result.shape[0]), "result": result.result}
        columns["result_name"] = np.array([RESULT_NAMES[int(c)] for c in result.result])
        for group in (
            result.inputs,
            result.diagnostics,
            prefixed("response", named_leaves(result.responses)),
        ):
            for name, values in group.items():
                columns.update(_columns(name, values))
        rows = zip(*(col.tolist() for col in columns.values()), strict=True)
        write(path, lambda f: _write_csv(f, [list(columns), *rows]))
    return path


def check_save_path(path: str | Path) -> Path:
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


def statistics(codes, responses, diagnostics) -> dict[str, Any]:
    """`MonteCarloResult.statistics`: result code counts, the failed samples, and the
    summaries of the diagnostics and responses over the successful samples."""
    ok = codes == SUCCESSFUL
    values, counts = np.unique(codes, return_counts=True)
    return {
        "n_samples": int(codes.shape[0]),
        "n_successful": int(ok.sum()),
        "results": {RESULT_NAMES[int(v)]: int(c) for v, c in zip(values, counts, strict=True)},
        "failed": np.flatnonzero(~ok).tolist(),
        "diagnostics": {name: summarize(v, ok) for name, v in diagnostics.items()},
        "responses": {name: summarize(v, ok) for name, v in named_leaves(responses).items()},
    }


def _write_csv(f, rows) -> None:
    text = io.TextIOWrapper(f, encoding="utf-8", newline="")
    csv.writer(text).writerows(rows)
    text.flush()
    text.detach()


def _columns(name: str, values: np.ndarray) -> dict[str, np.ndarray]:
    """One CSV column per element of a per-sample array (`q0[3]`, …)."""
    values = np.asarray(values)
    if values.ndim == 1:
        return {name: values}
    flat = values.reshape(values.shape[0], -1)
    index = list(np.ndindex(values.shape[1:]))
    return {f"{name}[{','.join(map(str, i))}]": flat[:, j] for j, i in enumerate(index)}
