"""Results people can keep and share: labelled `xarray` datasets (netCDF) and CSV tables.

`to_xarray(mechanism, solution)` gathers everything known about a run under the mechanism's
names: dimensions `time` × `coordinate` (× `sample` for a Monte Carlo study), q, q̇, q̈, the
multipliers λ per constraint row (each row labelled with its constraint group), the
generalized reactions Cᵀλ, the joint reactions where the joint builders provide them
(`jaxmbs.solution_reactions`), the force elements' forces where present
(`jaxmbs.element_forces`), the constraint residuals, the energy and whether the run
conserves it (`jaxmbs.conserves_energy`), the result codes and solver statistics, and the
run's options as attributes. xarray is an optional dependency
(`pip install 'jaxmbs[export]'`, which also installs h5netcdf for netCDF files); it is only
imported when a dataset is made.

`write_csv(mechanism, solution, path)` writes the same trajectory as a flat table with one
named column per quantity (`q[name]`, `qd[name]`, `qdd[name]`, `lambda[group:k]`, …).
"""

from __future__ import annotations

import csv
import functools
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import numpy as np

from .._internal.types import Params
from ..integrate.solution import RESULT_NAMES, Solution, result_index
from .elements import element_forces
from .energy import conserves_energy, energy_balance_holds, energy_rate, power_terms
from .reactions import solution_reactions

if TYPE_CHECKING:
    import xarray

    from ..batch import MonteCarloResult
    from ..model import Mechanism

#: Option values netCDF attributes can hold as they are; others are written as JSON text.
_ATTRIBUTE_TYPES = (str, int, float, np.integer, np.floating)
#: Names of the vector components of reactions, by length.
_AXES = {2: ("x", "y"), 3: ("x", "y", "z")}


def require_xarray():
    """Import xarray, or raise an ImportError that says how to install it."""
    try:
        import xarray
    except ImportError as err:
        raise ImportError("labelled results need xarray: pip install 'jaxmbs[export]'") from err
    return xarray


def require_netcdf() -> None:
    """Raise an ImportError unless xarray and a netCDF-4 backend (h5netcdf or netCDF4) exist."""
    require_xarray()
    for backend in ("h5netcdf", "netCDF4"):
        try:
            __import__(backend)
            return
        except ImportError:
            continue
    raise ImportError("writing netCDF needs h5netcdf (or netCDF4): pip install 'jaxmbs[export]'")


def constraint_labels(mechanism: Mechanism) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A label `group:k` and the group name of every row of the stacked constraints [Φ; ψ]
    (k counts the rows within the group)."""
    rows = mechanism.n_holonomic + mechanism.n_pfaffian
    labels, groups = [""] * rows, [""] * rows
    for name, indices in mechanism.constraint_groups:
        for k, row in enumerate(indices):
            labels[row], groups[row] = f"{name}:{k}", name
    return tuple(labels), tuple(groups)


def _attribute(value: Any) -> str | int | float:
    if isinstance(value, bool | np.bool_):
        return int(value)
    if isinstance(value, _ATTRIBUTE_TYPES):
        return value
    return json.dumps(value, default=str)


def _options_attributes(solution: Solution, options: Mapping[str, Any] | None) -> dict:
    attrs = {"method": solution.method, "result_names": " ".join(RESULT_NAMES)}
    attrs["jaxmbs_version"] = _version()
    for key, value in (options or {}).items():
        attrs[f"option_{key}"] = _attribute(value)
    return attrs


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("jaxmbs")
    except PackageNotFoundError:
        return "unknown"


def _trajectory_variables(mechanism: Mechanism, solution: Solution, params: Params) -> dict:
    """name → (dims, values) of one unbatched solution; NumPy arrays."""
    derived = {"reactions": solution_reactions(mechanism, solution, params)}
    if solution.energy is not None:
        derived["energy_rate"] = energy_rate(mechanism, solution, params)
        derived["energy_conserved"] = int(conserves_energy(mechanism, solution, params))
    if mechanism.elements is not None:
        derived["element_forces"] = element_forces(mechanism, solution, params)
    return _variables(solution, derived, lead=())


def _study_variables(
    mechanism: Mechanism, solutions: Solution, shared: Params, batched: Mapping[str, Any]
) -> dict:
    """name → (dims, values) of stacked solutions (leading axis: the samples), computed
    with each sample's parameters `{**shared, **batched[sample]}` (see `_along_samples`)."""
    derived = _along_samples(mechanism, solutions, shared, batched)
    terms = derived.pop("power_terms", None)
    if terms is not None:
        derived["energy_conserved"] = energy_balance_holds(
            solutions.ts, solutions.t_final, terms
        ).astype(int)
    return _variables(solutions, derived, lead=("sample",))


#: Samples evaluated at once (one vmap) by `_along_samples`: this bounds its memory, and
#: blocks of this size ran fastest on CPU (10⁴ four-bar samples of 101 output times: 0.5 s).
_SAMPLES_AT_ONCE = 64


def _along_samples(
    mechanism: Mechanism, solutions: Solution, shared: Params, batched: Mapping[str, Any]
) -> dict:
    """The reactions, element forces, energy rate and power terms of every sample (NumPy
    arrays, samples first), in one compiled program over blocks of `_SAMPLES_AT_ONCE`
    samples (the last block padded by repeating the last sample, so that one block
    program is compiled)."""
    size = np.shape(solutions.ts)[0]
    block = min(_SAMPLES_AT_ONCE, size)
    padded = -(-size // block) * block

    def pad(x):
        x = np.asarray(x)
        return np.concatenate([x, np.repeat(x[-1:], padded - size, axis=0)])

    pad_all = functools.partial(jax.tree_util.tree_map, pad)
    out = _in_blocks(mechanism, pad_all(solutions), shared, pad_all(batched), block)
    return jax.tree_util.tree_map(lambda x: np.asarray(x)[:size], out)


@eqx.filter_jit
def _in_blocks(
    mechanism: Mechanism,
    solutions: Solution,
    shared: Params,
    batched: Mapping[str, Any],
    block: int,
) -> dict:
    """`_along_samples`: `lax.map` over the samples, `block` of them vmapped at a time."""

    def one(sample):
        solution, entries = sample
        params = {**shared, **entries} if entries else shared
        out = {"reactions": solution_reactions(mechanism, solution, params)}
        if solution.energy is not None:
            out["energy_rate"] = energy_rate(mechanism, solution, params)
            out["power_terms"] = power_terms(mechanism, solution, params)
        if mechanism.elements is not None:
            out["element_forces"] = element_forces(mechanism, solution, params)
        return out

    return jax.lax.map(one, (solutions, batched), batch_size=block)


def _variables(solution: Solution, derived: Mapping[str, Any], lead: tuple[str, ...]) -> dict:
    """name → (dims, values), NumPy arrays, of a solution and what was derived from it (see
    `_trajectory_variables`); `lead` names the leading dimensions of a stacked solution."""
    tc, tk = (*lead, "time", "coordinate"), (*lead, "time", "constraint")
    along, scalar = (*lead, "time"), lead
    out = {
        "q": (tc, solution.q),
        "qd": (tc, solution.qd),
        "qdd": (tc, solution.qdd),
        "multipliers": (tk, solution.multipliers),
        "position_residual": (along, solution.position_residual),
        "velocity_residual": (along, solution.velocity_residual),
        "result": (scalar, result_index(solution.result)),
        "t_final": (scalar, solution.t_final),
        "event": (scalar, solution.event),
    }
    if solution.energy is not None:
        out["energy"] = (along, solution.energy)
        out["energy_rate"] = (along, derived["energy_rate"])
        out["energy_conserved"] = (scalar, derived["energy_conserved"])
    for name, value in solution.stats.items():
        out[f"stats.{name}"] = (scalar, value)
    reactions = derived["reactions"]
    out["generalized_reaction"] = (tc, reactions.generalized)
    for joint, components in reactions.joints.items():
        for component, value in components.items():
            vector = value.ndim > len(along)
            dims = (*along, _axis_name(value.shape[-1])) if vector else along
            out[f"reaction.{joint}.{component}"] = (dims, value)
    for name, value in derived.get("element_forces", {}).items():
        out[f"element_force.{name}"] = (along, value)
    return {name: (dims, np.asarray(value)) for name, (dims, value) in out.items()}


def _axis_name(size: int) -> str:
    return "".join(_AXES[size]) if size in _AXES else f"component{size}"


def _coordinates(mechanism: Mechanism, ts) -> dict:
    """The labels: output times, coordinate names, constraint rows and their groups."""
    labels, groups = constraint_labels(mechanism)
    return {
        "time": ("time", np.asarray(ts)),
        "coordinate": ("coordinate", list(mechanism.coordinate_names)),
        "constraint": ("constraint", list(labels)),
        "constraint_group": ("constraint", list(groups)),
    }


def _attach_attributes(dataset: xarray.Dataset) -> None:
    codes = np.arange(len(RESULT_NAMES), dtype=np.int32)
    dataset["result"].attrs.update(flag_values=codes, flag_meanings=" ".join(RESULT_NAMES))
    descriptions = {
        "q": "coordinates",
        "qd": "velocities",
        "qdd": "accelerations",
        "multipliers": "Lagrange multipliers (minimum norm), M qdd + C^T lambda = Q",
        "position_residual": "max |Phi(q, t)|",
        "velocity_residual": "max |c(t, q, qd)| (holonomic Phi-dot and Pfaffian psi)",
        "energy": "total mechanical energy 1/2 qd^T M qd + V",
        "energy_rate": "dE/dt at the stored states: power of non-conservative forces and drives",
        "energy_conserved": "1 where the run conserves energy (jaxmbs.conserves_energy)",
        "diagnostics.energy_drift": "max |E - E0| / |E0|: a drift only where energy_conserved "
        "is 1, else the physical change of energy",
        "generalized_reaction": "generalized constraint reactions f = C^T lambda = Q - M qdd",
        "t_final": "time the integration stopped",
        "event": "index of the event condition that stopped the run, -1 if none",
    }
    for name, text in descriptions.items():
        if name in dataset:
            dataset[name].attrs["description"] = text
    for axis in {_axis_name(k) for k in _AXES} & set(dataset.dims):
        dataset.coords[axis] = list(axis)


def to_xarray(
    mechanism: Mechanism,
    solution: Solution,
    *,
    params: Params | None = None,
    options: Mapping[str, Any] | None = None,
) -> xarray.Dataset:
    """A [`jaxmbs.Solution`][] as a labelled `xarray.Dataset` (round-trips through netCDF:
    `dataset.to_netcdf("run.nc")`, `xarray.load_dataset("run.nc")`).

    **Arguments:**

    - `mechanism`: the mechanism that was simulated (its names label the data).
    - `solution`: one unbatched solution (use [`jaxmbs.monte_carlo_to_xarray`][] for
      a batch).
    - `params`: the parameters of the run (default: the mechanism's), for the reactions
      and the force elements' forces.
    - `options`: the run's options (e.g. `{"rtol": 1e-8, "stabilization": "projection"}`),
      stored as attributes `option_<key>`; values other than numbers and strings as JSON.

    **Returns:** a dataset with dimensions `time`, `coordinate`, `constraint` (one row of
    [Φ; ψ] each, labelled `group:k`, with its group in the coordinate `constraint_group`)
    and, for vector reactions, `xy` or `xyz`. Variables: `q`, `qd`, `qdd`, `multipliers`,
    `position_residual`, `velocity_residual`, `energy`, `energy_rate` and
    `energy_conserved` (where the energy is defined),
    `generalized_reaction`, `reaction.<joint>.<component>` (planar, spatial and rolling
    joints; `jaxmbs.Reactions`),
    `element_force.<name>` (force elements), `result` (index into the attribute
    `result_names`), `t_final`, `event` and `stats.<name>`. Attributes: `method`,
    `jaxmbs_version` and the options.
    """
    xr = require_xarray()
    if np.ndim(solution.ts) != 1:
        raise ValueError(
            f"to_xarray takes one unbatched solution (ts of shape (T,)), got ts of shape "
            f"{np.shape(solution.ts)}; for a batch use jaxmbs.monte_carlo_to_xarray"
        )
    params = mechanism.params if params is None else params
    variables = _trajectory_variables(mechanism, solution, params)
    dataset = xr.Dataset(variables, coords=_coordinates(mechanism, solution.ts))
    dataset.attrs.update(_options_attributes(solution, options))
    _attach_attributes(dataset)
    return dataset


def _study_params(mechanism: Mechanism, inputs: Mapping[str, np.ndarray]):
    """The parameters shared by a Monte Carlo study's samples and its batched entries (a
    dict of arrays with a leading sample axis, from the recorded inputs `params.<name>`).

    **Raises:** `ValueError` when the batched parameters are not entries of the
    mechanism's parameter dict, so that the samples' parameters cannot be rebuilt.
    """
    batched = {k.removeprefix("params."): v for k, v in inputs.items() if k.startswith("params")}
    if batched and (
        not isinstance(mechanism.params, dict) or not set(batched) <= set(mechanism.params)
    ):
        raise ValueError(
            "monte_carlo_to_xarray: the batched parameters are not entries of the "
            "mechanism's parameter dict, so the reactions cannot be recomputed per sample"
        )
    return mechanism.params, batched


def monte_carlo_to_xarray(
    mechanism: Mechanism, result: MonteCarloResult, *, options: Mapping[str, Any] | None = None
) -> xarray.Dataset:
    """A [`jaxmbs.MonteCarloResult`][] as one dataset with a leading `sample` dimension.

    The variables of [`jaxmbs.to_xarray`][] per sample (reactions and element forces with
    each sample's parameters), plus the batched inputs `input.<name>` and the diagnostics
    `diagnostics.<name>`. Needs the trajectories (`keep_solutions=True`). What is derived
    from the trajectories (reactions, element forces, energy rate) is computed for all
    samples in one compiled program, vectorised over blocks of samples.
    """
    xr = require_xarray()
    if result.solutions is None:
        raise ValueError(
            "monte_carlo_to_xarray needs the trajectories: run monte_carlo with keep_solutions=True"
        )
    shared, batched = _study_params(mechanism, result.inputs)
    variables = _study_variables(mechanism, result.solutions, shared, batched)
    ts = np.asarray(result.solutions.ts)[0]  # the output times all samples share
    dataset = xr.Dataset(variables, coords=_coordinates(mechanism, ts))
    dataset = dataset.assign_coords(sample=np.arange(result.result.shape[0]))
    for name, values in result.inputs.items():
        dims = ("sample", *(f"input.{name}.dim{k}" for k in range(1, np.ndim(values))))
        if name in ("q0", "qd0"):
            dims = ("sample", "coordinate")
        dataset[f"input.{name}"] = (dims, np.asarray(values))
    for name, values in result.diagnostics.items():
        dataset[f"diagnostics.{name}"] = ("sample", np.asarray(values))
    dataset.attrs.update(_options_attributes(result.solutions, options))
    _attach_attributes(dataset)
    return dataset


def table(mechanism: Mechanism, solution: Solution) -> tuple[list[str], np.ndarray]:
    """The header and the rows of the CSV table of one solution: `t`, `q[name]`,
    `qd[name]`, `qdd[name]` per coordinate, `lambda[group:k]` per constraint row,
    `max_abs_position_residual`, `max_abs_velocity_residual` and `energy` (where defined);
    the rows up to the time the run stopped."""
    names = mechanism.coordinate_names
    labels, _ = constraint_labels(mechanism)
    header = ["t"]
    columns = [np.asarray(solution.ts)[:, None]]
    for key in ("q", "qd", "qdd"):
        header += [f"{key}[{n}]" for n in names]
        columns.append(np.asarray(getattr(solution, key)))
    header += [f"lambda[{label}]" for label in labels]
    columns.append(np.asarray(solution.multipliers))
    header += ["max_abs_position_residual", "max_abs_velocity_residual"]
    columns += [np.asarray(solution.position_residual)[:, None]]
    columns += [np.asarray(solution.velocity_residual)[:, None]]
    if solution.energy is not None:
        header.append("energy")
        columns.append(np.asarray(solution.energy)[:, None])
    rows = np.concatenate(columns, axis=1)
    reached = np.asarray(solution.ts) <= float(solution.t_final)  # after a failure: up to it
    return header, rows[reached]


def write_csv(mechanism: Mechanism, solution: Solution, path) -> None:
    """Write `table(mechanism, solution)` of one solution to `path` as CSV."""
    header, rows = table(mechanism, solution)
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows.tolist())
