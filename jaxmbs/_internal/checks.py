"""Argument checks shared by the stages: coordinates by index or name, concrete values."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np


def coordinate_indices(mechanism: Any, coordinates: Sequence[int | str]) -> np.ndarray:
    """Indices of coordinates given by index or name, checked for name, range and repetition.

    `mechanism` is anything with `n` and `coordinate_names` (a `jaxmbs.Mechanism`).
    """
    out = []
    for c in coordinates:
        if isinstance(c, str):
            if c not in mechanism.coordinate_names:
                raise ValueError(f"unknown coordinate {c!r}; names: {mechanism.coordinate_names}")
            out.append(mechanism.coordinate_names.index(c))
        else:
            out.append(int(c))
    idx = np.asarray(out, dtype=int)
    if np.any((idx < 0) | (idx >= mechanism.n)):
        raise ValueError(f"coordinate indices {idx.tolist()} out of range for n={mechanism.n}")
    if len(set(idx.tolist())) != len(idx):
        raise ValueError(f"coordinates repeated in {list(coordinates)}")
    return idx


def is_concrete(*xs) -> bool:
    """Whether no leaf of `xs` is a tracer (values known: eager checks can run)."""
    return not any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(xs))


def state_vector(mechanism: Any, q, name: str = "q") -> None:
    """Refuse a state that is not one vector of the mechanism's coordinates: the public
    functions of one state take (mechanism, q[, qd], t, params), `simulate`'s order, and a
    time passed first lands here as a scalar."""
    shape = np.shape(q)
    if len(shape) != 1 or shape[0] != mechanism.n:
        raise TypeError(
            f"{name} must be a vector of the {mechanism.n} coordinates, got shape {shape}: "
            "the arguments are (mechanism, q[, qd], t, params), in simulate's order"
        )


def finite_params(params) -> None:
    """Refuse a concrete parameter that is not finite, naming it (`params["m"]`); traced
    parameters are checked where they are used."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
        if is_concrete(leaf) and not np.all(np.isfinite(np.asarray(leaf, dtype=float))):
            raise ValueError(f"params{jax.tree_util.keystr(path)} is not finite: {leaf!r}")
