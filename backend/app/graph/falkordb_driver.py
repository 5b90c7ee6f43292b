"""Graphiti's FalkorDB driver, with a keyword search that finds the facts of a graph whose id holds a '-'.

FalkorDB's full-text index splits a stored `group_id` into words at '-' (not at '_'): the facts of graph
"north-basin" are indexed under the words "north" and "basin". Graphiti names the group in its keyword
query as one escaped word, `@group_id:"north\\-basin"`, which no indexed word matches, so every keyword
search of such a graph found nothing: its first stage was the similarity half alone, and Graphiti's own
searches while it ingests text (entity and fact deduplication) ran without keywords. `PhraseGroupDriver`
names the group as the phrase of its words, `@group_id:"north basin"`. The phrase cannot bring in another
graph's facts: each graph is a FalkorDB graph of its own with its own index, and the searches check the
hits' `group_id` as well.

FalkorDB also has no label disjunction: Graphiti's search filters write the labels filter as `n:Person|City`
(a node carrying either label), which FalkorDB refuses as a syntax error, so a search filtered by more than
one entity label failed. The driver writes it as `(n:Person OR n:City)` before the query is sent. A
relationship's type list (`[e:RELATES_TO|MENTIONS]`) is left alone: FalkorDB reads that one.

And FalkorDB 1.4.1's range index over a fact's times (stored as ISO 8601 strings) answers an upper bound
wrongly: `e.valid_at <= '2014-12-31T00:00:00+00:00'` matched every dated fact of a graph whose facts date
from 2010 to 2022, and `e.valid_at < $t` alike, while the same comparison in a RETURN was right. The date
conditions Graphiti's search filters write (`(e.valid_at <= $valid_at_0)`) are sent as comparisons of
`toString(e.valid_at)`, which the index does not answer: the filter scans the facts the search reads anyway.
"""

from __future__ import annotations

import re

from typing import Any

from graphiti_core.driver.falkordb_driver import FalkorDriver

_IDENTIFIER = r"[A-Za-z_][A-Za-z0-9_]*"
# A node variable, a colon and two or more labels joined by '|' in a condition: `n:Person|City`. Not in a
# pattern: a relationship's types (`[e:MENTIONS|RELATES_TO]`) are FalkorDB's own syntax.
_LABEL_DISJUNCTION = re.compile(rf"(?<![\w\[(])({_IDENTIFIER}):({_IDENTIFIER}(?:\|{_IDENTIFIER})+)")


# Graphiti's date filter condition: `(e.valid_at <= $valid_at_0)` (search_filters.date_filter_query_constructor).
_DATE_CONDITION = re.compile(r"\(e\.(valid_at|invalid_at|created_at|expired_at) (<=|>=|<>|<|>|=) (\$\w+)\)")


def without_indexed_date_bounds(cypher: str) -> str:
    """Graphiti's date filter conditions, compared so that FalkorDB's range index does not answer them."""
    return _DATE_CONDITION.sub(r"(toString(e.\1) \2 \3)", cypher)


def without_label_disjunctions(cypher: str) -> str:
    """`n:A|B` written as FalkorDB reads it: `(n:A OR n:B)`."""
    def either(match: re.Match) -> str:
        variable = match.group(1)
        return "(" + " OR ".join(f"{variable}:{label}" for label in match.group(2).split("|")) + ")"
    return _LABEL_DISJUNCTION.sub(either, cypher)


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

    async def execute_query(self, cypher_query_, **kwargs: Any):
        cypher = without_indexed_date_bounds(without_label_disjunctions(str(cypher_query_)))
        return await super().execute_query(cypher, **kwargs)

    def clone(self, database: str) -> FalkorDriver:
        cloned = super().clone(database)
        if type(cloned) is FalkorDriver:
            cloned.__class__ = PhraseGroupDriver
        return cloned
