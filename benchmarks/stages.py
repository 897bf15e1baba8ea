"""`python -m benchmarks.stages`: where a solve's compiled program comes from, per stage.

XLA's compile time grows with the number of operations it is handed, and a jitted inner
function (a model's constraints, their derivatives, the kinetic energy) is inlined at every
place it is called. This tool lowers a program, walks its StableHLO module from `main`
through every `call` (each callee counted once per call site, as XLA inlines it), and
attributes each operation to the stage of the solve it belongs to: the outermost frame of
its Python stack at trace time that names a stage (the call site's stack for a callee's
operations). Stages:

- vector field — the formulation's right-hand side (in the step's stage loop, and once
  more where the solver's first same-as-last stage is initialised);
- projection — the end-of-step projection of the stabilisation;
- stop conditions — the rank check and the pivot conditions, evaluated as events;
- outputs — q, q̇, q̈, λ, residuals and energy at the saved times (the interpolated state
  projected again);
- initial checks — consistency, rank and mass-matrix checks of (q₀, q̇₀);
- solver and controller — the rest of diffrax's loop; other — anything else.

Counts are of the lowered module, before XLA's simplification (which removes about half of
the operations over ~20 rounds of its fixed-point pipeline, most of the compile time).
"""

from __future__ import annotations

import ast
import collections
import functools
import re
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import jaxmbs
from jaxmbs.models import fourbar, mcpherson

#: (path suffix, regex on the enclosing qualified name, stage): the outermost frame that
#: matches one names the stage.
STAGES = (
    ("jaxmbs/integrate/simulate.py", r"^_outputs", "outputs"),
    ("jaxmbs/integrate/inputs.py", r".", "initial checks"),
    ("jaxmbs/integrate/simulate.py", r"^_mass_matrix_valid", "initial checks"),
    ("jaxmbs/integrate/events.py", r".", "stop conditions"),
    ("jaxmbs/integrate/state_space.py", r"singular_conditions", "stop conditions"),
    ("jaxmbs/integrate/state_space.py", r"^_Projector", "projection"),
    ("jaxmbs/integrate/", r"VectorField", "vector field"),
)
#: Where no frame names a stage: the solver's loop, or else "other".
SOLVER = ("site-packages/diffrax/", "solver and controller")

_LOC = re.compile(r"^(#loc\d*) = (loc\(.*\))$", re.M)
_FUNC = re.compile(r"^\s*func\.func (?:public |private )?@([\w.$-]+)\(")
_CALL = re.compile(r"\bcall @([\w.$-]+)\(")
_OP = re.compile(r'=\s*"?(?:stablehlo|chlo)\.|^\s*"?(?:stablehlo|chlo)\.')


@functools.cache
def _qualified_names(path: str) -> tuple[tuple[int, int, str], ...]:
    """(first line, last line, Class.function) of every function in a source file."""
    try:
        with open(path) as source:
            tree = ast.parse(source.read())
    except OSError:
        return ()
    spans = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    spans.append((child.lineno, child.end_lineno, name))
                visit(child, name + ".")
            else:
                visit(child, prefix)

    visit(tree, "")
    return tuple(spans)


def _enclosing(path: str, line: int) -> str:
    """The innermost function of `path` whose lines contain `line`."""
    inside = [
        (first, name) for first, last, name in _qualified_names(path) if first <= line <= last
    ]
    return max(inside)[1] if inside else ""


def _stage(frames: list[tuple[str, int]]) -> str | None:
    """The stage named by the outermost matching frame (frames run innermost first)."""
    for path, line in reversed(frames):
        for suffix, pattern, stage in STAGES:
            if suffix in path and re.search(pattern, _enclosing(path, line)):
                return stage
    return SOLVER[1] if any(SOLVER[0] in path for path, _ in frames) else None


def stage_counts(lowered) -> dict[str, int]:
    """Operations of a lowered program per stage, callees inlined at every call site."""
    text = lowered.as_text(debug_info=True)
    locations = dict(_LOC.findall(text))

    @functools.cache
    def frames(ref: str) -> tuple[tuple[str, int], ...]:
        loc = locations.get(ref, ref)
        site = re.match(r"loc\(callsite\((#loc\d*) at (#loc\d*)\)\)$", loc)
        if site:
            return frames(site.group(1)) + frames(site.group(2))
        named = re.match(r'loc\("[^"]*"\((#loc\d*)\)\)$', loc)
        if named:
            return frames(named.group(1))
        file = re.match(r'loc\("([^"]+\.py)":(\d+)', loc)
        return ((file.group(1), int(file.group(2))),) if file else ()

    bodies: dict[str, list[tuple[str | None, str]]] = collections.defaultdict(list)
    current = None
    for line in text.splitlines():
        function = _FUNC.match(line)
        if function:
            current = function.group(1)
            continue
        if current is None or not (_OP.search(line) or _CALL.search(line)):
            continue
        ref = re.search(r"loc\((#loc\d*)\)\s*$", line)
        callee = _CALL.search(line)
        bodies[current].append((callee.group(1) if callee else None, ref.group(1) if ref else ""))

    counts: collections.Counter = collections.Counter()

    def visit(function: str, outer: str | None) -> None:
        """`outer`: the stage named at a call site further out (the solver's loop is only
        a fallback, not passed down: what it calls may name its own stage)."""
        for callee, ref in bodies[function]:
            stage = outer or _stage(list(frames(ref)))
            if callee is not None:
                visit(callee, None if stage == SOLVER[1] else stage)
            else:
                counts[stage or "other"] += 1

    visit("main", None)
    return dict(counts)


def cases() -> list[tuple[str, Callable, tuple]]:
    """The four-bar over 2 s and the McPherson strut over 1 s, default options, forward."""
    bar = fourbar.fourbar()
    q0, unit_qd = fourbar.initial_state(bar, np.pi / 3, 1.0)
    ts = jnp.linspace(0.0, 2.0, 21)

    def crank(m2):
        sol = jaxmbs.simulate(bar, q0, 2.0 * unit_qd, (0.0, 2.0), params={"m2": m2}, saveat=ts)
        return jnp.sum(sol.q[:, 2] ** 2)

    strut = mcpherson.mcpherson_simplified()
    sq0, sqd0 = mcpherson.initial_state(strut, 0.05)

    def wheel(q):
        return jnp.sum(jaxmbs.simulate(strut, q, sqd0, (0.0, 1.0)).q[-1] ** 2)

    return [("four-bar 2 s", crank, (2.0,)), ("McPherson strut 1 s", wheel, (sq0,))]


def main() -> None:
    """Per stage for each case's forward program; then the reverse gradient's total, whose
    excess over the forward program is the backward pass (a transposed operation carries
    its primal's stack, so the backward pass is not split by stage)."""
    jax.config.update("jax_enable_x64", True)
    # Whole stacks in the locations (JAX keeps the innermost 10 frames by default): the
    # stage is read from the outer frames.
    jax.config.update("jax_traceback_in_locations_limit", 200)
    order = [stage for _, _, stage in STAGES] + [SOLVER[1], "other"]
    for name, fn, args in cases():
        counts = stage_counts(jax.jit(fn).lower(*args))
        total = sum(counts.values())
        print(f"{name}, forward: {total} operations")
        for stage in dict.fromkeys(order):
            if stage in counts:
                print(f"  {stage:24s} {counts[stage]:7d}  {100 * counts[stage] / total:5.1f} %")
        gradient = sum(stage_counts(jax.jit(jax.grad(fn)).lower(*args)).values())
        print(f"{name}, reverse gradient: {gradient} operations, backward pass {gradient - total}")


if __name__ == "__main__":
    main()
