"""Graphiti's FalkorDB driver, with a keyword search that finds the facts of a graph whose id holds a '-'.

FalkorDB's full-text index splits a stored `group_id` into words at '-' (not at '_'): the facts of graph
"north-basin" are indexed under the words "north" and "basin". Graphiti names the group in its keyword
query as one escaped word, `@group_id:"north\\-basin"`, which no indexed word matches, so every keyword
search of such a graph found nothing: its first stage was the similarity half alone, and Graphiti's own
searches while it ingests text (entity and fact deduplication) ran without keywords. `PhraseGroupDriver`
names the group as the phrase of its words, `@group_id:"north basin"`. The phrase cannot bring in another
graph's facts: each graph is a FalkorDB graph of its own with its own index, and the searches check the
hits' `group_id` as well.
"""

from __future__ import annotations

import re

from graphiti_core.driver.falkordb_driver import FalkorDriver


def _escaped(word: str) -> str:
    """A word escaped as Graphiti escapes a group id for the full-text query."""
    return re.sub(r"([^a-zA-Z0-9])", r"\\\1", word)


def group_phrase(group_id: str) -> str:
    """The group id as the words FalkorDB indexed it under, escaped as Graphiti escapes them."""
    return " ".join(_escaped(word) for word in group_id.split("-") if word)


class PhraseGroupDriver(FalkorDriver):
    """FalkorDriver whose keyword queries name a group by the words it was indexed under; its clones too
    (Graphiti clones the driver it was given for each graph it writes to)."""

    def build_fulltext_query(self, query: str, group_ids: list[str] | None = None,
                             max_query_length: int = 128) -> str:
        built = super().build_fulltext_query(query, group_ids, max_query_length)
        for group_id in group_ids or []:
            if "-" in group_id:
                built = built.replace(f'"{_escaped(group_id)}"', f'"{group_phrase(group_id)}"', 1)
        return built

    def clone(self, database: str) -> FalkorDriver:
        cloned = super().clone(database)
        if type(cloned) is FalkorDriver:
            cloned.__class__ = PhraseGroupDriver
        return cloned
