"""One format for every timestamp the API returns (search hits and paged reads alike)."""

from __future__ import annotations

from datetime import datetime
from typing import Any


def iso(value: Any) -> str | None:
    """Every timestamp the API returns, in one format: ISO 8601 with six fractional digits and the
    offset ("2024-05-01T10:00:00.000000+00:00").

    Paged reads get `neo4j.time.DateTime` from Neo4j (nanoseconds: nine digits) and ISO strings
    from FalkorDB (no fraction at all when it is zero); search gets Python datetimes from graphiti's
    models. Neo4j values are cut to microseconds the way graphiti reads them (`to_native`), so a
    fact's time reads the same from both paths.
    """
    if value is None:
        return None
    if hasattr(value, "to_native"):  # neo4j.time.DateTime / Date / Time
        value = value.to_native()
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return value  # not a timestamp we wrote; shown as stored
    if isinstance(value, datetime):
        return value.isoformat(timespec="microseconds")
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return str(value)
