"""Stage 2, Doctor: measure the baseline, the hardware and the noise; diagnose before searching."""

from infrarsi.doctor.run import (
    UNDETECTABLE,
    DoctorError,
    build_report,
    headroom,
    noise_policy,
    run_doctor,
    sealed_contract,
)

__all__ = [
    "UNDETECTABLE",
    "DoctorError",
    "build_report",
    "headroom",
    "noise_policy",
    "run_doctor",
    "sealed_contract",
]
