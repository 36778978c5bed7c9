"""Doctor every reference workload at one scale and summarise: MFU, top phase, noise, MDE.

    .venv/bin/python bench/doctor_all.py --scale cpu --repeats 3

Writes ``bench/results/doctor-<scale>.json`` (each workload's full doctor report) and prints one
line per workload.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from infrarsi.doctor import run_doctor
from infrarsi.init import make_contract, read_instruction
from infrarsi.init.build import workload_files
from infrarsi.records import DoctorReport
from infrarsi.workloads import find, reference_names

RESULTS = Path(__file__).parent / "results"


def summary_line(report: DoctorReport) -> str:
    """MFU, the largest phase, noise and minimum detectable effect of one report."""
    phase, seconds = max(report.phases.items(), key=lambda kv: kv[1])
    n, top = report.noise, report.diagnosis[0] if report.diagnosis else None
    return (
        f"{report.workload:12} step_time_s {report.step_time_s:.3f}  "
        f"mfu {report.mfu_pct:.1f}%  top phase {phase} "
        f"{seconds / report.step_time_s:.0%}  cv within {n.cv_within:.1%} "
        f"between {n.cv_between:.1%}  MDE 1/3/5 repeats "
        + "/".join(f"{v:.1f}%" for v in n.mde_pct.values())
        + (f"  first finding: {top.finding} -> {', '.join(top.suggests)}" if top else "")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workloads", nargs="*", default=reference_names())
    parser.add_argument("--workdir", type=Path, default=Path(".infrarsi/doctor"))
    args = parser.parse_args()
    reports = {}
    for name in args.workloads:
        manifest = find(name)
        contract = make_contract(
            manifest, args.scale, "cut time", read_instruction("cut time", workload_files(manifest))
        )
        reports[name] = run_doctor(contract, args.repeats, args.workdir / name)
        print(summary_line(reports[name]), flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"doctor-{args.scale}.json").write_text(
        json.dumps({name: r.model_dump(mode="json") for name, r in reports.items()}, indent=2)
    )


if __name__ == "__main__":
    main()
