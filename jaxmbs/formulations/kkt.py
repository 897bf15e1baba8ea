"""The index-1 augmented system itself (Pękal–Frączek 2016, eq 2.5)."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from .base import AbstractFormulation


class KKT(AbstractFormulation):
    """Index-1 augmented system (Pękal–Frączek 2016, eq 2.5) on the independent rows.

    ```
    [M  C_Iᵀ] [q̈ ]   [Q ]
    [C_I  0 ] [λ_I] = [Γ_I]
    ```
    """

    name: ClassVar[str] = "kkt"

    def _solve(self, M, Q, C, gamma, mechanism):
        structure = mechanism.structure
        C_i, g_i = structure.independent_part(C), structure.independent_part(gamma)
        r = C_i.shape[0]
        K = jnp.block([[M, C_i.T], [C_i, jnp.zeros((r, r), M.dtype)]])
        sol = jnp.linalg.solve(K, jnp.concatenate([Q, g_i]))
        return sol[: M.shape[0]], sol[M.shape[0] :]

    def accelerations(self, M, Q, C, gamma, mechanism):
        return self._solve(M, Q, C, gamma, mechanism)[0]

    def multipliers(self, M, Q, C, gamma, mechanism):
        structure = mechanism.structure
        qdd, lam_ind = self._solve(M, Q, C, gamma, mechanism)
        return qdd, structure.expand_multipliers(C, lam_ind)
