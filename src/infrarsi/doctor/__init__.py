"""Stage 2, Doctor: measure the baseline, the hardware and the noise; diagnose before searching."""

from infrarsi.doctor.run import DoctorError, build_report, noise_policy, run_doctor, sealed_contract

__all__ = ["DoctorError", "build_report", "noise_policy", "run_doctor", "sealed_contract"]
