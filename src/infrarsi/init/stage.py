"""Stage 1 as one function: an instruction and a workload in, the contract (and the reading
behind it) out. The screens show it and ask; ``optimize`` confirms or not; neither re-reads."""

from __future__ import annotations

from collections.abc import Callable

from infrarsi.contract import Contract
from infrarsi.errors import InfraRSIError
from infrarsi.init.build import make_contract, workload_files
from infrarsi.init.llm import draft_reading, llm_configured
from infrarsi.init.parse import Reading, read_instruction
from infrarsi.workloads import Manifest


class InitError(InfraRSIError):
    """An instruction that cannot become a contract: every problem, each naming its clause."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def init(
    manifest: Manifest,
    scale: str,
    instruction: str,
    on_note: Callable[[str], None] = lambda text: None,
) -> tuple[Contract, Reading]:
    """The contract the instruction asks for on this workload at this scale, read by the
    rules — or drafted by the LLM when an endpoint is configured, validated as strictly and
    falling back to the rules (``on_note`` is told why). InitError with every problem."""
    manifest.scale(scale)
    if not instruction.strip():
        raise InitError(
            [
                "the instruction is empty: say in one sentence what you want, e.g. "
                "'maximise training throughput, keep the loss within 1%' or 'cut end-to-end "
                "time, stay under 16 GiB per rank'"
            ]
        )
    files = workload_files(manifest)
    reading, drafted_by = read_instruction(instruction, files), "rules"
    if llm_configured():
        reading, drafted_by = draft_reading(instruction, files, reading, on_note)
    if reading.problems:
        raise InitError(list(reading.problems))
    if not reading.understood:
        unread = ", ".join(map(repr, reading.not_understood))
        raise InitError(
            [
                f"nothing in the instruction was understood ({unread}): say what you want, "
                "e.g. 'maximise training throughput, keep the loss within 1%' or 'cut "
                "end-to-end time, stay under 16 GiB per rank'"
            ]
        )
    return make_contract(manifest, scale, instruction, reading, drafted_by), reading
