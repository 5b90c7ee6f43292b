"""Neo4j's full-text indexes are shared by every graph; keep one graph's keyword candidates whole.

Graphiti scopes a Neo4j keyword search inside the Lucene query (`group_id:"<id>" AND (<words>)`)
and asks the procedure for `limit` hits, then filters `e.group_id IN $group_ids` in Cypher. The
Lucene clause matches analysed text, not the exact id: the standard analyzer lowercases and splits
at '-', and a quoted id is a phrase. So `group_id:"water"` also matches graphs "Water",
"water-2024" and "old-water", and `group_id:"team-1"` matches "team-1-archive". Their hits take
slots of the procedure's limit before Cypher drops them, and the graph gets fewer keyword
candidates than on FalkorDB, where every graph has its own index.

When such graphs exist, the first stage is asked for more candidates (one more share per graph
that can take slots, up to MAX_FIRST_STAGE_FACTOR) and cut back to the intended number after
fusion. Ids are compared as if '_' split tokens as well (Lucene keeps "a_b" whole): that can only
compensate where it was not needed, which costs a few more rows, never fewer candidates.
"""

from __future__ import annotations

import re

MAX_FIRST_STAGE_FACTOR = 5  # bounds the extra database work however many graphs share tokens
_SEPARATORS = re.compile(r"[-_]+")

REGISTRY_CANDIDATES_QUERY = (
    "MATCH (g:MiroGraph) WHERE toLower(g.graph_id) CONTAINS $token AND g.graph_id <> $graph_id "
    "RETURN g.graph_id AS graph_id"
)


def index_tokens(graph_id: str) -> tuple[str, ...]:
    """The graph id as the index sees it (or finer): lowercase pieces between separators."""
    return tuple(token for token in _SEPARATORS.split(graph_id.lower()) if token)


def shares_index_tokens(graph_id: str, other_id: str) -> bool:
    """Whether a keyword search scoped to `graph_id` can match documents of `other_id`."""
    wanted, tokens = index_tokens(graph_id), index_tokens(other_id)
    return any(tokens[start:start + len(wanted)] == wanted for start in range(len(tokens) - len(wanted) + 1))


def first_stage_factor(graph_id: str, other_ids: list[str]) -> int:
    sharing = sum(shares_index_tokens(graph_id, other) for other in other_ids if other != graph_id)
    return min(1 + sharing, MAX_FIRST_STAGE_FACTOR)


async def first_stage_factor_for(driver, graph_id: str) -> int:
    """How many times the intended candidates to ask the first stage for, from the registry."""
    # Every sharing id contains each token; the longest narrows the scan most ("g_1f3a..." ids all
    # start with "g", which would return the whole registry on every search).
    longest_token = max(index_tokens(graph_id), key=len)
    records = (await driver.execute_query(REGISTRY_CANDIDATES_QUERY, token=longest_token,
                                          graph_id=graph_id))[0]
    return first_stage_factor(graph_id, [record["graph_id"] for record in records])
