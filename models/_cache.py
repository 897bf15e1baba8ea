"""One mechanism per set of builder arguments.

A [`jaxmbs.Mechanism`][] is immutable and its functions are static in every compiled solve,
so two builds of the same model are two programs to compile. The builders of this package
return the same object for the same (hashable) arguments instead: a second
`fourbar.fourbar()` costs nothing and reuses every solve already compiled for the first.
Do not mutate a mechanism's `params` in place (`replace_params` returns a new mechanism).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

import jax

Builder = TypeVar("Builder", bound=Callable)


def cached(builder: Builder) -> Builder:
    """`builder` remembering its result per arguments (unhashable arguments: built anew)."""
    built: dict = {}

    @functools.wraps(builder)
    def build(*args, **kwargs):
        # A model built with 64-bit floats holds 64-bit constants: one cache per setting.
        key = (jax.config.jax_enable_x64, args, tuple(sorted(kwargs.items())))
        try:
            hash(key)
        except TypeError:
            return builder(*args, **kwargs)
        if key not in built:
            built[key] = builder(*args, **kwargs)
        return built[key]

    return build  # type: ignore[return-value]
