"""Stage 1, Init: from a one-sentence instruction to a frozen task contract."""

from infrarsi.contract import Contract, ContractError, load_contract
from infrarsi.init.build import make_contract
from infrarsi.init.parse import Reading, read_instruction
from infrarsi.init.stage import InitError, init

__all__ = [
    "Contract",
    "ContractError",
    "InitError",
    "Reading",
    "init",
    "load_contract",
    "make_contract",
    "read_instruction",
]
