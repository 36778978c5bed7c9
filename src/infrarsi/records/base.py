"""What every record shares: frozen, unknown fields ignored (a newer writer's), and a schema
version a reader refuses when it is newer than it knows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from infrarsi.identity import Configuration


class Frozen(BaseModel):
    """A record: frozen once built; fields it does not know are ignored."""

    model_config = ConfigDict(frozen=True, extra="ignore")


class Configured:
    """A record that names one configuration by its ``knobs`` and ``patches`` hands it out as
    a ``Configuration`` (equal, and hashed alike, by ``config_key``): how stages compare the
    configurations records name, never by their dicts."""

    if TYPE_CHECKING:
        knobs: dict[str, Any]
        patches: list[str]

    @property
    def configuration(self) -> Configuration:
        """The configuration this record names."""
        return Configuration.of(self.knobs, self.patches)


def known_version(version: int, newest: int, what: str) -> int:
    """A stored record's schema version, refused when this version of InfraRSI cannot read
    it (written by a newer one)."""
    if version > newest:
        raise ValueError(
            f"{what} has schema version {version}; this InfraRSI reads up to {newest}: "
            "upgrade InfraRSI to read it"
        )
    return version
