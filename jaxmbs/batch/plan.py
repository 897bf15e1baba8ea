"""Planning a Monte Carlo batch: the arguments checked, the inputs split into batched and
shared leaves, the times, the devices and their mesh, the chunk grid and its share per
process, and the study's checkpoint store opened under its fingerprint. Nothing here runs a
sample (`jaxmbs.batch.run` does)."""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import diffrax
import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from .._internal.linalg import MAX_BLOCK
from ..formulations import get_formulation
from ..integrate import get_stabilization, simulate
from ._outputs import named_leaves
from .checkpoint import ON_DAMAGED, ChunkStore, check_directory, fingerprint
from .result import check_save_path

if TYPE_CHECKING:
    from ..model import Mechanism

#: Keys a batch may have: each maps to values with a leading sample axis.
BATCH_KEYS = ("q0", "qd0", "params")
#: The one mesh axis the samples are split along.
AXIS = "batch"
#: Per-sample keyword arguments that `monte_carlo` sets itself.
RESERVED = ("throw", "params", "progress_meter")
#: `jaxmbs.simulate`'s options and their defaults, read once from its signature: those a
#: call of `monte_carlo` passes through (`**simulate_kwargs`), less the reserved ones and
#: `saveat` (an argument of its own, fingerprinted with the times).
SIMULATE_DEFAULTS = types.MappingProxyType(
    {
        name: parameter.default
        for name, parameter in inspect.signature(simulate).parameters.items()
        if parameter.kind is inspect.Parameter.KEYWORD_ONLY and name not in (*RESERVED, "saveat")
    }
)


@dataclasses.dataclass(frozen=True)
class Plan:
    """A checked batch, ready to run (`make_plan`)."""

    mechanism: Mechanism  # with its structure
    inputs: dict[str, Any]  # "q0", "qd0", "params" as arrays of `dtype`
    mask: dict[str, Any]  # the same tree: True where a leaf is batched
    size: int  # samples
    dtype: Any
    t_span: tuple[jax.Array, jax.Array]
    saveat: jax.Array | None
    devices: tuple[jax.Device, ...]
    mesh: Mesh
    vectorize: bool
    chunk: int  # samples per chunk, a multiple of the number of devices
    ranges: tuple[tuple[int, int], ...]  # the samples start … stop − 1 of every chunk
    save: Path | None
    store: ChunkStore | None  # with checkpoint_dir

    @property
    def n_chunks(self) -> int:
        return len(self.ranges)

    def mine(self) -> range:
        """The chunks this process computes (a contiguous share, module notes)."""
        share = even_share(self.n_chunks, jax.process_index(), jax.process_count())
        return range(self.n_chunks)[share]

    def named_inputs(self) -> dict[str, np.ndarray]:
        """The batched inputs by name (`q0`, `qd0`, `params.<name>`), shape (B, …)."""
        batched, _ = eqx.partition(self.inputs, self.mask)
        leaves = named_leaves(jax.tree_util.tree_map(np.asarray, batched))
        return {name: np.asarray(values) for name, values in leaves.items()}


def make_plan(
    mechanism: Mechanism,
    batch: Mapping[str, Any],
    t_span: tuple[float, float],
    *,
    q0,
    qd0,
    saveat,
    response,
    keep_solutions: bool,
    chunk_size: int | None,
    devices: Sequence[jax.Device] | None,
    vectorize: bool | None,
    save,
    checkpoint_dir,
    on_damaged_chunk: Literal["recompute", "raise"],
    simulate_options: Mapping[str, Any],
) -> Plan:
    """Check all of `monte_carlo`'s arguments (same names) and plan the chunks; with a
    checkpoint directory, open it (refused when it holds another study). Nothing is traced."""
    _check_options(simulate_options, on_damaged_chunk)
    save = None if save is None else check_save_path(save)
    directory = None if checkpoint_dir is None else check_directory(checkpoint_dir)
    if directory is None and jax.process_count() > 1:
        raise ValueError(
            f"with {jax.process_count()} processes (jax.distributed), give checkpoint_dir=: a "
            "directory all processes share, where each writes its chunks and reads the others'"
        )
    dtype = jnp.result_type(float)
    inputs, mask, size = batch_inputs(mechanism, batch, q0, qd0, dtype)
    if mechanism.structure is None:  # analysed here, on concrete data, never under jit
        mechanism = mechanism.with_structure(np.asarray(one_sample(inputs, mask, 0)["q0"]))
    t_span, saveat = check_times(t_span, saveat, dtype)
    devices = tuple(jax.local_devices() if devices is None else devices)
    if not devices:
        raise ValueError("devices must not be empty")
    mesh = Mesh(np.array(devices), (AXIS,))
    if vectorize is None:
        vectorize = devices[0].platform != "cpu" or lapack_free(mechanism, **simulate_options)
    chunk = round_chunk_size(chunk_size, size, len(devices))
    n_chunks = -(-size // chunk)
    ranges = tuple((k * chunk, min((k + 1) * chunk, size)) for k in range(n_chunks))
    plan = Plan(
        mechanism, inputs, mask, size, dtype, t_span, saveat, devices, mesh, vectorize, chunk,
        ranges, save, None,
    )  # fmt: skip
    if directory is None:
        return plan
    options = {"response": response, "keep_solutions": keep_solutions}
    store = _open_store(plan, directory, {**simulate_options, **options}, on_damaged_chunk)
    return dataclasses.replace(plan, store=store)


def _check_options(simulate_options: Mapping[str, Any], on_damaged_chunk: str) -> None:
    for key in RESERVED:
        if key in simulate_options:
            raise ValueError(
                f"monte_carlo sets {key!r} itself (per-sample result codes, batched params); "
                "do not pass it"
            )
    if on_damaged_chunk not in ON_DAMAGED:
        raise ValueError(f"on_damaged_chunk must be one of {ON_DAMAGED}, got {on_damaged_chunk!r}")


def _open_store(
    plan: Plan, directory: Path, options: Mapping[str, Any], on_damaged: str
) -> ChunkStore:
    """The checkpoint store of the study: everything that defines its results is in the
    fingerprint, `simulate`'s options with their defaults included (`SIMULATE_DEFAULTS`)."""
    digests = fingerprint(
        {
            "mechanism": _static_description(plan.mechanism),
            "inputs": {key: (plan.inputs[key], plan.mask[key]) for key in plan.inputs},
            "times": {"t_span": plan.t_span, "saveat": plan.saveat},
            "options": {**SIMULATE_DEFAULTS, **options, "vectorize": plan.vectorize},
            "chunks": {"n_samples": plan.size, "chunk_size": plan.chunk},
            "numerics": {
                "dtype": str(plan.dtype),
                "jax": jax.__version__,
                "platform": plan.devices[0].platform,
            },
        }
    )
    info = {"n_samples": plan.size, "chunk_size": plan.chunk, "n_chunks": plan.n_chunks}
    return ChunkStore.open(directory, digests, info, on_damaged)


def lapack_free(mechanism: Mechanism, **simulate_options) -> bool:
    """Whether [`jaxmbs.simulate`][] with these options (its own defaults for the others;
    options that do not matter here are ignored) calls no LAPACK routine for this
    mechanism, so that vmapping it on CPU is fast and safe (see the module notes of
    `jaxmbs.batch.monte_carlo`).

    True for the `banded` formulation when its band plans are unrolled kernels (blocks of M
    and of C M⁻¹ Cᵀ of at most `MAX_BLOCK`; the projection solves on the same kind of
    plan), with an explicit Runge–Kutta solver, no redundant rows (their minimum-norm
    multipliers need a dense solve) and a rank check (if any) on at most `MAX_BLOCK`
    independent rows (`jaxmbs._internal.linalg.orthonormal_rows`).
    """
    options = {**SIMULATE_DEFAULTS, **simulate_options}
    structure = mechanism.structure
    solver = options["solver"]
    return (
        structure is not None
        and get_formulation(options["method"], mechanism).lapack_free(mechanism)
        and get_stabilization(options["stabilization"]).lapack_free(mechanism)
        and (solver is None or isinstance(solver, diffrax.AbstractERK))
        and not (options["rank_rtol"] is not None and structure.rank > MAX_BLOCK)
    )


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
    share = even_share(leading_size(batch), index, count)
    sub = {
        key: jax.tree_util.tree_map(lambda x: np.asarray(x)[share], value)
        for key, value in batch.items()
    }
    return sub, share


def even_share(size: int, index: int, count: int) -> slice:
    """Share `index` of `count` of `size` items in order: ⌊i·size/count⌉ … ⌊(i+1)·size/count⌉."""
    if not 0 <= index < count:
        raise ValueError(f"process_index must be in [0, {count}), got {index}")
    bounds = np.linspace(0, size, count + 1).round().astype(int)
    return slice(int(bounds[index]), int(bounds[index + 1]))


def leading_size(batch: Mapping[str, Any]) -> int:
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


def batch_inputs(mechanism, batch, q0, qd0, dtype):
    """Inputs {"q0", "qd0", "params"} as arrays of `dtype` and the mask of batched leaves."""
    size = leading_size(batch)
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
    params, param_mask = batch_params(mechanism.params, batch.get("params"))
    inputs["params"] = jax.tree_util.tree_map(lambda x: np.asarray(x, dtype=dtype), params)
    mask["params"] = param_mask
    return inputs, mask, size


def batch_params(params, batched):
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


def one_sample(inputs, mask, k: int):
    return jax.tree_util.tree_map(lambda x, m: x[k] if m else x, inputs, mask)


def check_times(t_span, saveat, dtype):
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


def round_chunk_size(chunk_size: int | None, size: int, n_devices: int) -> int:
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive integer or None, got {chunk_size!r}")
    chunk = size if chunk_size is None else min(chunk_size, size)
    return -(-chunk // n_devices) * n_devices


def _static_description(mechanism: Mechanism) -> tuple:
    """The mechanism for the fingerprint: its fields, and its structure without the
    conditioning hint `smallest_pivot` (round-off that may differ between hosts)."""
    fields = {f.name: getattr(mechanism, f.name) for f in dataclasses.fields(mechanism)}
    structure = fields.pop("structure")
    return fields, dataclasses.replace(structure, smallest_pivot=0.0)
