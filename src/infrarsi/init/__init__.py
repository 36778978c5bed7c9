"""Stage 1, Init: from a one-sentence instruction to a frozen task contract."""

from infrarsi.contract import Contract, ContractError, load_contract
from infrarsi.init.build import make_contract
from infrarsi.init.parse import Reading, read_instruction

__all__ = ["Contract", "ContractError", "Reading", "load_contract", "make_contract",
           "read_instruction"]
