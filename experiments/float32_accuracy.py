"""Accuracy that float32 gives on the reference models, against float64.

Each reference model (jaxmbs.models.MODELS) runs 10 s from its default consistent state in
float64 (rtol = atol = 1e-8) and in float32 (rtol = atol = 1e-5, the tightest tolerance
float32 round-off supports comfortably), with projection stabilisation and without it.
Reported: the largest position residual max|Φ|, velocity residual max|c|, relative energy
drift max|E − E₀|/|E₀| (conservative models only) and the largest deviation of q from a
float64 reference at rtol = 1e-12. Writes experiments/results/float32_accuracy.csv and
prints a Markdown table.

    python experiments/float32_accuracy.py [--t1 10] [--models pendulum,fourbar,...]
"""

from __future__ import annotations

import argparse
import csv
from pathlib import Path

import jax
import numpy as np

import jaxmbs
from jaxmbs.models import MODELS

RESULTS = Path(__file__).parent / "results"
CONSERVATIVE = {
    "pendulum",
    "physical-pendulum",
    "fourbar",
    "fourbar-redundant",
    "slider-crank",
    "chain",
}
CASES = (  # (label, x64, tolerance, stabilization)
    ("float64, projection", True, 1e-8, "projection"),
    ("float32, projection", False, 1e-5, "projection"),
    ("float32, none", False, 1e-5, "none"),
)


def run(name: str, x64: bool, tol: float, stabilization: str, t1: float):
    jax.config.update("jax_enable_x64", x64)
    mech, q0, qd0 = MODELS[name]()
    ts = np.linspace(0.0, t1, 201)
    sol = jaxmbs.simulate(
        mech,
        q0,
        qd0,
        (0.0, t1),
        saveat=ts,
        rtol=tol,
        atol=tol,
        stabilization=stabilization,
        throw=False,
    )
    out = {
        "result": jaxmbs.RESULTS[sol.result] or "successful",
        "max_position_residual": float(np.max(sol.position_residual)),
        "max_velocity_residual": float(np.max(sol.velocity_residual)),
        "energy_drift": float("nan"),
        "q": np.asarray(sol.q, dtype=np.float64),
        "steps": int(sol.stats["num_steps"]),
    }
    if name in CONSERVATIVE and sol.energy is not None:
        e = np.asarray(sol.energy, dtype=np.float64)
        out["energy_drift"] = float(np.max(np.abs(e - e[0])) / abs(e[0]))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--t1", type=float, default=10.0)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args(argv)
    RESULTS.mkdir(exist_ok=True)
    rows = []
    for name in args.models.split(","):
        reference = run(name, True, 1e-12, "projection", args.t1)["q"]
        for label, x64, tol, stabilization in CASES:
            out = run(name, x64, tol, stabilization, args.t1)
            rows.append(
                {
                    "model": name,
                    "case": label,
                    "rtol": tol,
                    "result": out["result"],
                    "steps": out["steps"],
                    "max_position_residual": out["max_position_residual"],
                    "max_velocity_residual": out["max_velocity_residual"],
                    "energy_drift": out["energy_drift"],
                    "max_q_error_vs_float64": float(np.max(np.abs(out["q"] - reference))),
                }
            )
            print(name, label, {k: v for k, v in rows[-1].items() if k not in ("model", "case")})
    jax.config.update("jax_enable_x64", True)
    with open(RESULTS / "float32_accuracy.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(
        "\n| model | case | steps | max abs Φ | max abs c | energy drift | max q error vs float64 |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['model']} | {r['case']} | {r['steps']} | {r['max_position_residual']:.1e} | "
            f"{r['max_velocity_residual']:.1e} | {r['energy_drift']:.1e} | "
            f"{r['max_q_error_vs_float64']:.1e} |"
        )


if __name__ == "__main__":
    main()
