"""The index-1 augmented system itself (Pękal–Frączek 2016, eq 2.5)."""

from __future__ import annotations

from typing import ClassVar

import jax.numpy as jnp

from .base import AbstractFormulation, expand_multipliers, independent


class KKT(AbstractFormulation):
    """Index-1 augmented system (Pękal–Frączek 2016, eq 2.5) on the independent rows.

    ```
    [M  C_Iᵀ] [q̈ ]   [Q ]
    [C_I  0 ] [λ_I] = [Γ_I]
    ```
    """

    name: ClassVar[str] = "kkt"

    def _solve(self, M, Q, C, gamma, structure):
        C_i, g_i = independent(C, gamma, structure)
        r = C_i.shape[0]
        K = jnp.block([[M, C_i.T], [C_i, jnp.zeros((r, r), M.dtype)]])
        sol = jnp.linalg.solve(K, jnp.concatenate([Q, g_i]))
        return sol[: M.shape[0]], sol[M.shape[0] :]

    def accelerations(self, M, Q, C, gamma, structure):
        return self._solve(M, Q, C, gamma, structure)[0]

    def multipliers(self, M, Q, C, gamma, structure):
        qdd, lam_ind = self._solve(M, Q, C, gamma, structure)
        return qdd, expand_multipliers(C, lam_ind, structure)
