"""What every record shares: frozen, unknown fields ignored (a newer writer's), and a schema
version a reader refuses when it is newer than it knows."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Frozen(BaseModel):
    """A record: frozen once built; fields it does not know are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")


def known_version(version: int, newest: int, what: str) -> int:
    """A stored record's schema version, refused when this version of InfraRSI cannot read
    it (written by a newer one)."""
    if version > newest:
        raise ValueError(
            f"{what} has schema version {version}; this InfraRSI reads up to {newest}: "
            "upgrade InfraRSI to read it"
        )
    return version
