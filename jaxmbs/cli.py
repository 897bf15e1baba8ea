"""The `jaxmbs` command line: simulate a reference mechanism, print a summary, write
CSV/netCDF, a PNG figure and an animation (GIF/MP4).

The command line enables float64 before any array is created (the library never does).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path

import jax

from .batch.checkpoint import check_writable, os_reason
from .formulations import AUTO, METHODS
from .integrate import STABILIZATIONS
from .integrate.partitioned import PARTITIONED

#: Simulations longer than this (in simulated seconds) show a progress bar.
PROGRESS_T1 = 20.0
#: Model files read through MuJoCo's compiler (`jaxmbs.io.from_mjcf`, needs jaxmbs[mjcf]).
MODEL_FILES = (".xml", ".mjcf", ".urdf")


def _models():
    import jaxmbs.models

    return jaxmbs.models.MODELS


def _factory(spec: str) -> Callable:
    """The factory `() -> (mechanism, q0, q̇0)` of a reference model's name, or of a user's
    `path/to/file.py:function` (the file is imported as a module).

    **Raises:** `ValueError` for an unknown model, a missing file or function, or a file
    that raises when imported (naming the file, the line and the error).
    """
    models = _models()
    if spec in models:
        return models[spec]
    path, _, name = spec.rpartition(":")
    if not path.endswith(".py") or not name.isidentifier():
        raise ValueError(
            f"unknown model {spec!r}: one of {', '.join(models)}, or path/to/file.py:function"
        )
    if not os.path.isfile(path):
        raise ValueError(f"model file {path} does not exist")
    loader = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(loader)
    try:
        loader.loader.exec_module(module)
    except Exception as err:  # the user's code: any error, told as one line
        raise _user_error(path, "importing it", err) from err
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ValueError(f"{path} has no function {name}")
    return factory


def _imported(path: str, keyframe: str | None):
    """(mechanism, q0, q̇0) of an MJCF or URDF file (`jaxmbs.io.from_mjcf`), its import
    report printed; with loop closures the file's state is made consistent
    (`jaxmbs.assemble`: MuJoCo's soft constraints let it be off)."""
    import jaxmbs

    if not os.path.isfile(path):
        raise ValueError(f"model file {path} does not exist")
    try:
        from jaxmbs.io import from_mjcf

        imported = from_mjcf(path, keyframe=keyframe)
    except ImportError as err:  # the optional mujoco package
        raise ValueError(str(err)) from err
    print(imported.report)
    mech, q0, qd0 = imported.mechanism, imported.q0, imported.qd0
    if mech.n_holonomic:
        q0, qd0 = jaxmbs.assemble(mech, q0, qd0)
    return mech, q0, qd0


def _build(spec: str, links: int, keyframe: str | None = None):
    """(mechanism, q0, q̇0) of a model spec; a user's factory must return exactly that."""
    import jaxmbs

    if spec.lower().endswith(MODEL_FILES):
        return _imported(spec, keyframe)
    if keyframe is not None:
        raise ValueError("--keyframe applies to MJCF/URDF model files only")
    factory = _factory(spec)
    if spec in _models():
        built = factory(links) if spec == "chain" else factory()
    else:
        try:
            built = factory()
        except Exception as err:  # the user's code: any error, told as one line
            path, _, name = spec.rpartition(":")
            raise _user_error(path, f"calling {name}()", err) from err
    if not (
        isinstance(built, tuple) and len(built) == 3 and isinstance(built[0], jaxmbs.Mechanism)
    ):
        raise ValueError(f"{spec} must return (mechanism, q0, qd0)")
    return built


def _user_error(path: str, doing: str, err: Exception) -> ValueError:
    """A one-line `ValueError` for an error raised by a user's model file: the file, what
    was being done, the line of the file where it was raised, and the error."""
    line = getattr(err, "lineno", None) if isinstance(err, SyntaxError) else None
    for frame in traceback.extract_tb(err.__traceback__):
        if os.path.abspath(frame.filename) == os.path.abspath(path):
            line = frame.lineno
    where = f" at line {line}" if line is not None else ""
    message = (str(err).splitlines() or [""])[0]
    return ValueError(f"model file {path}: {doing} raised {type(err).__name__}{where}: {message}")


def cache_folder() -> str:
    """Where the CLI keeps JAX's persistent compilation cache: `$JAXMBS_CACHE_DIR` (`none`:
    no cache), else `$XDG_CACHE_HOME/jaxmbs/xla` (default `~/.cache/jaxmbs/xla`)."""
    if os.environ.get("JAXMBS_CACHE_DIR"):
        return os.environ["JAXMBS_CACHE_DIR"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxmbs", "xla")


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid float value: {text!r}") from None
    if not 0 < value < math.inf:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be positive and finite, got {text}")
    return value


def _int_at_least(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _parser() -> argparse.ArgumentParser:
    models = ", ".join(_models())
    parser = argparse.ArgumentParser(
        prog="jaxmbs",
        description="Constrained multibody dynamics in JAX.",
        epilog=f"models: {models}\nmethods: {', '.join((AUTO, *METHODS, PARTITIONED))}\n"
        f"stabilizations: {', '.join(STABILIZATIONS)}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    _simulate_arguments(sub, models)
    _analyze_arguments(sub, models)
    return parser


def _simulate_arguments(sub: argparse._SubParsersAction, models: str) -> None:
    """The `simulate` command's arguments."""
    sim = sub.add_parser(
        "simulate",
        help="simulate a reference mechanism",
        description="Simulate a reference mechanism from its default consistent state.",
        epilog=f"models: {models}",
    )
    sim.add_argument(
        "model",
        metavar="MODEL",
        help=f"one of: {models}; or path/to/file.py:function; or an MJCF/URDF file "
        "path/to/model.xml or .urdf (needs jaxmbs[mjcf])",
    )
    sim.add_argument(
        "--keyframe", help="initial state of an MJCF model: the name of one of its <key>s"
    )
    sim.add_argument(
        "--t1", type=_positive_float, default=10.0, help="end time in s, positive (default 10)"
    )
    sim.add_argument(
        "--method",
        choices=(AUTO, *METHODS, PARTITIONED),
        default=AUTO,
        help="formulation (default auto: chosen from the mechanism's structure), or "
        f"{PARTITIONED}: coordinate partitioning with switching",
    )
    sim.add_argument(
        "--stabilization",
        choices=list(STABILIZATIONS),
        default="projection",
        help="constraint stabilisation (default projection)",
    )
    sim.add_argument(
        "--rtol", type=_positive_float, default=1e-8, help="relative tolerance (default 1e-8)"
    )
    sim.add_argument(
        "--atol", type=_positive_float, default=1e-8, help="absolute tolerance (default 1e-8)"
    )
    sim.add_argument("--points", type=int, default=501, help="output points (default 501)")
    sim.add_argument(
        "--max-steps",
        type=_int_at_least(1),
        default=100_000,
        help="solver step limit (default 100000)",
    )
    sim.add_argument(
        "--links", type=_int_at_least(1), default=5, help="number of links of `chain` (>= 1)"
    )
    sim.add_argument("--float32", action="store_true", help="run in float32 (default float64)")
    sim.add_argument(
        "--cache",
        default=None,
        help="folder of JAX's persistent compilation cache, so that a second run of the same "
        "model and options starts without compiling (default $JAXMBS_CACHE_DIR or "
        "~/.cache/jaxmbs/xla); 'none' switches it off",
    )
    sim.add_argument(
        "--progress",
        action="store_true",
        help="show a progress bar (default: on a terminal when t1 >= 20 s)",
    )
    sim.add_argument(
        "--out",
        help="write the results: .csv (named columns q[…], qd[…], qdd[…], lambda[…], "
        "residuals) or .nc (netCDF, every result labelled; needs jaxmbs[export])",
    )
    sim.add_argument("--plot", help="write a PNG figure (needs matplotlib: jaxmbs[figures])")
    sim.add_argument(
        "--animate",
        help="write an animation of the mechanism: .gif, or .mp4 where ffmpeg is installed "
        "(needs matplotlib: jaxmbs[figures])",
    )


def _analyze_arguments(sub: argparse._SubParsersAction, models: str) -> None:
    """The `analyze` command's arguments."""
    ana = sub.add_parser(
        "analyze",
        help="ranks, redundancy and which constraint reactions are unique",
        description="Analyse a reference mechanism at its initial configuration: ranks of "
        "the constraint matrices, redundancy, degrees of freedom, and for every constraint "
        "group whether its reaction is unique (QR and rank criteria).",
        epilog=f"models: {models}",
    )
    ana.add_argument(
        "model",
        metavar="MODEL",
        help=f"one of: {models}; or path/to/file.py:function; or an MJCF/URDF file",
    )
    ana.add_argument(
        "--links", type=_int_at_least(1), default=5, help="number of links of `chain` (>= 1)"
    )
    ana.add_argument(
        "--matrices", action="store_true", help="also print the nonzero entries of every B_X"
    )


def analyze_command(args: argparse.Namespace) -> int:
    import numpy as np

    import jaxmbs

    mech, q0, _ = _build(args.model, args.links)
    report = jaxmbs.analyze_solvability(mech, q0)
    print(f"model {args.model}, analysed at its initial configuration")
    print(report)
    if args.matrices:
        for g in report.groups:
            nonzero = np.flatnonzero(np.max(np.abs(g.B), axis=1, initial=0.0) > 1e-12)
            if nonzero.size:
                print(f"\nB_{g.name} (nonzero rows; columns: null-space basis of Cᵀ)")
                for i in nonzero:
                    row = np.where(np.abs(g.B[i]) > 1e-12, g.B[i], 0.0)
                    print(f"  {mech.coordinate_names[i]:>16}  {np.array2string(row, precision=4)}")
    return 0


def simulate_command(args: argparse.Namespace) -> int:
    import diffrax
    import jax.numpy as jnp

    import jaxmbs

    _check_outputs(args)
    for flag, path in (("--out", args.out), ("--plot", args.plot), ("--animate", args.animate)):
        if path is not None:
            check_writable(Path(path), flag)
    mech, q0, qd0 = _build(args.model, args.links, args.keyframe)
    ts = jnp.linspace(0.0, args.t1, max(args.points, 2))
    long_run = args.progress or (args.t1 >= PROGRESS_T1 and sys.stderr.isatty())
    start = time.perf_counter()
    sol = jaxmbs.simulate(
        mech,
        q0,
        qd0,
        (0.0, args.t1),
        method=args.method,
        stabilization=args.stabilization,
        rtol=args.rtol,
        atol=args.atol,
        saveat=ts,
        max_steps=args.max_steps,
        throw=False,
        progress_meter=diffrax.TqdmProgressMeter() if long_run else None,
    )
    jax.block_until_ready(sol)
    wall = time.perf_counter() - start
    s = mech.structure
    print(
        f"model            {args.model}  (n = {mech.n}, constraints = {s.n_constraints}, "
        f"rank = {s.rank}, redundancy = {s.redundancy}, dof = {s.dof})"
    )
    print(
        f"method           {sol.method}, stabilization {args.stabilization}, "
        f"rtol {args.rtol:g}, atol {args.atol:g}, {'float32' if args.float32 else 'float64'}"
    )
    cause = jaxmbs.RESULTS[sol.result]
    # Read the result code, not t_final: a run refused at its initial state never moved.
    started = not bool(sol.result == jaxmbs.RESULTS.inconsistent_initial_conditions)
    if bool(sol.successful):
        print("result           successful")
    elif not started:
        print(f"result           never started (at t0 = 0): {cause}")
    else:
        print(f"result           failed at t = {float(sol.t_final):.6g}: {cause}")
    st = {k: int(v) for k, v in sol.stats.items()}
    print(
        f"steps            {st['num_steps']} ({st['num_rejected_steps']} rejected), "
        f"RHS evaluations {st['rhs_evaluations']}"
    )
    if started:  # else every output is NaN: there are no residuals or energy to report
        _print_residuals_and_energy(mech, sol)
    print(f"wall time        {wall:.2f} s (compilation included)")
    writers = (
        ("--out", args.out, lambda: _write_results(args, mech, sol)),
        ("--plot", args.plot, lambda: _plot(args.plot, args.model, mech, sol)),
        (
            "--animate",
            args.animate,
            lambda: jaxmbs.animate(mech, sol, args.animate, title=args.model),
        ),
    )
    for flag, path, write in writers:
        if path:
            try:
                write()
            except OSError as err:
                raise ValueError(f"could not write {flag} {path!r}: {os_reason(err)}") from err
            print(f"wrote            {path}")
    return 0 if bool(sol.successful) else 1


def _print_residuals_and_energy(mech, sol) -> None:
    """The largest constraint residuals along the run and its energy drift (or change)."""
    import jax.numpy as jnp
    import numpy as np

    import jaxmbs

    print(f"max |Φ|          {float(jnp.nanmax(sol.position_residual)):.3e}")
    print(f"max |Φ̇|, |ψ|     {float(jnp.nanmax(sol.velocity_residual)):.3e}")
    if sol.energy is not None:
        change = np.nanmax(np.abs(np.asarray(sol.energy) - float(sol.energy[0])))
        relative = f"{change / abs(float(sol.energy[0])):.3e} relative"
        if jaxmbs.conserves_energy(mech, sol):
            print(f"energy drift     {change:.3e} J ({relative})")
        else:  # driving constraints or non-conservative forces: the change is physics
            print(f"energy change    {change:.3e} J ({relative}; not conservative, no drift)")


def _write_results(args: argparse.Namespace, mech, sol) -> None:
    """`--out`: CSV (named columns) or netCDF (the labelled dataset), by suffix."""
    import jaxmbs

    if args.out.lower().endswith(".nc"):
        options = {k: v for k, v in vars(args).items() if k not in ("out", "plot", "animate")}
        jaxmbs.to_xarray(mech, sol, options=options).to_netcdf(args.out)
    else:
        jaxmbs.write_csv(mech, sol, args.out)


def _plot(path: str, title: str, mech, sol) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as err:
        raise SystemExit("--plot needs matplotlib: pip install 'jaxmbs[figures]'") from err
    import numpy as np

    ts = np.asarray(sol.ts)
    fig, axes = plt.subplots(3, 1, figsize=(8, 9), sharex=True)
    for i, name in enumerate(mech.coordinate_names):
        if name.endswith("phi") or name in ("gamma",) or mech.n <= 3:
            axes[0].plot(ts, np.asarray(sol.q[:, i]), label=name)
    axes[0].set_ylabel("coordinates")
    axes[0].legend(fontsize=7, ncol=3)
    axes[1].semilogy(ts, np.maximum(np.asarray(sol.position_residual), 1e-18), label="max |Φ|")
    axes[1].semilogy(
        ts, np.maximum(np.asarray(sol.velocity_residual), 1e-18), label=r"max $|\dot\Phi|, |\psi|$"
    )
    axes[1].set_ylabel("constraint residual")
    axes[1].legend(fontsize=8)
    if sol.energy is not None:
        axes[2].plot(ts, np.asarray(sol.energy - sol.energy[0]))
        axes[2].set_ylabel("E(t) − E(0)  [J]")
    axes[2].set_xlabel("t [s]")
    fig.suptitle(f"jaxmbs: {title}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


#: The `--out` suffixes the command line writes (`--animate`: `jaxmbs.analysis.animation`).
OUT_SUFFIXES = (".csv", ".nc")


def _check_outputs(args: argparse.Namespace) -> None:
    """Reject an unknown suffix or a missing optional dependency before the run."""
    from .analysis.animation import check_animation_path, require_matplotlib
    from .analysis.export import require_netcdf

    if args.out and not args.out.lower().endswith(OUT_SUFFIXES):
        raise ValueError(f"--out writes {' or '.join(OUT_SUFFIXES)} files, got {args.out}")
    try:
        if args.out and args.out.lower().endswith(".nc"):
            require_netcdf()
        if args.animate:
            check_animation_path(args.animate)
            require_matplotlib()
    except (ImportError, RuntimeError) as err:
        raise ValueError(str(err)) from err


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `jaxmbs` command.

    Returns the exit status: 0 on success, 1 when the simulation failed (the rows up to the
    failure are written, the cause and its time printed). Invalid arguments, an output file
    that cannot be written (checked by writing, before the run) and a model file or factory
    that raises exit with status 2 and one line on stderr naming the file and the reason, no
    traceback. The float64 setting is restored on return, so
    that calling `main` leaves the calling process's JAX configuration as it was.
    """
    parser = _parser()
    args = parser.parse_args(argv)
    previous = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", not getattr(args, "float32", False))
    cache = getattr(args, "cache", None) or cache_folder()
    set_cache = cache != "none" and jax.config.jax_compilation_cache_dir is None
    if set_cache:
        # JAX reads the setting when it first compiles: effective in a fresh process.
        jax.config.update("jax_compilation_cache_dir", cache)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    try:
        if args.command == "simulate":
            return simulate_command(args)
        if args.command == "analyze":
            return analyze_command(args)
        return 2
    except ValueError as err:
        parser.exit(2, f"jaxmbs: error: {str(err).splitlines()[0]}\n")
    finally:
        jax.config.update("jax_enable_x64", previous)
        if set_cache:
            jax.config.update("jax_compilation_cache_dir", None)


if __name__ == "__main__":
    sys.exit(main())
