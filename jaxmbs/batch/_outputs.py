"""Per-sample outputs by name, shared by the chunk runner (`run`) and the result writers
(`result`): pytree leaves by dotted path, and the file names of the NPZ files."""

from __future__ import annotations

from collections.abc import Mapping

import jax
import numpy as np


def key_name(key) -> str:
    for attr in ("key", "idx", "name"):
        if hasattr(key, attr):
            return str(getattr(key, attr))
    return str(key)


def named_leaves(tree) -> dict[str, np.ndarray]:
    """Leaves of a pytree by dotted path (`params.m2`, `stats.num_steps`, `0` …)."""
    if tree is None:
        return {}
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {
        ".".join(key_name(k) for k in path) or "value": np.asarray(leaf) for path, leaf in leaves
    }


def output_arrays(solutions, responses, diagnostics, codes) -> dict[str, np.ndarray]:
    """The per-sample outputs by file name (`result`, `diagnostics.…`, `responses.…`,
    `solution.…`), as in the NPZ files of `MonteCarloResult.save` and of the checkpoints."""
    arrays = {"result": codes, **prefixed("diagnostics", diagnostics)}
    arrays.update(prefixed("responses", named_leaves(responses)))
    arrays.update(prefixed("solution", named_leaves(solutions)))
    return arrays


def prefixed(prefix: str, named: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {f"{prefix}.{name}": value for name, value in named.items()}
