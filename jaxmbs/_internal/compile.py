"""How the library compiles the programs it runs once per analysis.

A model's build samples its structure (rank, sparsity, the iteration matrix's pattern),
checks a map's rank and warns of singular configurations; `linearize` recognises cyclic
coordinates and forms A; `equilibrium` runs Newton's method. Each of these programs runs
once or a few times, in milliseconds, after a compilation of seconds, so their compile time
is what a user waits for. XLA's CPU compiler spends most of it in LLVM's optimisation
passes and its fusion emitters; without them (`QUICK_CPU_OPTIONS`, the settings the test
suite compiles with) the same programs compile faster and run slower, which for a program
run once is the better trade (2-core CPU, benchmarks/README.md, round 26):

- the McPherson quarter car's `linearize` 15.2 → 10.7 s on the first call, 5.1 → 5.9 ms
  on later ones; its `equilibrium` 16.6 → 10.5 s and 8.1 → 9.6 ms.

The programs a study runs many times — `simulate`, a Monte Carlo chunk — keep XLA's
defaults. Options apply to a top-level compilation only: inside a user's `jax.jit`,
`jax.grad` or `jax.vmap` a `quick_jit` function is traced into the user's program like any
other jitted function.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax

#: XLA's CPU compiler without its backend (LLVM) optimisations and with its elemental kernel
#: emitter instead of the fusion emitters.
QUICK_CPU_OPTIONS = {"xla_backend_optimization_level": 0, "xla_cpu_use_fusion_emitters": False}


@functools.cache
def _quick_options() -> dict[str, Any] | None:
    """`QUICK_CPU_OPTIONS` where the default backend is a CPU whose XLA accepts them (an
    unknown option is an error at compile time), else None. Probed once per process."""
    if jax.default_backend() != "cpu":
        return None
    try:
        jax.jit(lambda x: x + 1, compiler_options=QUICK_CPU_OPTIONS).lower(1.0).compile()
    except Exception:  # an XLA without these options: compile with its defaults
        return None
    return QUICK_CPU_OPTIONS


def _traced(tree: Any) -> bool:
    """Whether any leaf of `tree` is a tracer (the call is inside a user's transformation)."""
    return any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves(tree))


def quick_jit(fn: Callable) -> Callable:
    """`eqx.filter_jit(fn)`, compiled with `QUICK_CPU_OPTIONS` when called at the top level
    on a CPU (module notes). Inside a user's transformation — traced arguments, or concrete
    ones under a trace, where JAX refuses compile options on a nested `jit` before anything
    runs — the plain `eqx.filter_jit(fn)`, which the enclosing trace inlines."""
    plain = eqx.filter_jit(fn)
    quick: Callable | None = None

    @functools.wraps(fn)
    def call(*args, **kwargs):
        nonlocal quick
        options = None if _traced((args, kwargs)) else _quick_options()
        if options is None:
            return plain(*args, **kwargs)
        if quick is None:
            quick = eqx.filter_jit(fn, compiler_options=options)
        try:
            return quick(*args, **kwargs)
        except ValueError as err:
            if "compiler_options" not in str(err):
                raise
            return plain(*args, **kwargs)

    return call
