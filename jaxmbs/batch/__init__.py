"""Batches: Monte Carlo studies over initial conditions and parameters, chunked and sharded
over devices, with per-sample result codes."""

from .monte_carlo import MonteCarloResult as MonteCarloResult
from .monte_carlo import lapack_free as lapack_free
from .monte_carlo import monte_carlo as monte_carlo
from .monte_carlo import process_share as process_share
from .monte_carlo import summarize as summarize
