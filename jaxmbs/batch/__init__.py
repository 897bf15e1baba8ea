"""Batches: Monte Carlo studies over initial conditions and parameters, chunked and sharded
over devices, with per-sample result codes."""

from .monte_carlo import monte_carlo as monte_carlo
from .plan import lapack_free as lapack_free
from .plan import process_share as process_share
from .result import MonteCarloResult as MonteCarloResult
from .result import summarize as summarize
