"""The keyword half of the first stage on FalkorDB (app/graph/search_hook.py): ranked before it is read,
it answers what Graphiti's own full-text search answers, in the same order, on the embedded FalkorDB;
and facts read without their embeddings are otherwise the facts Graphiti reads."""

from __future__ import annotations

from datetime import datetime, timezone

from graphiti_core.driver.falkordb_driver import FalkorDriver
from graphiti_core.edges import EntityEdge
from graphiti_core.search import search_utils
from graphiti_core.search.search_filters import ComparisonOperator, DateFilter, SearchFilters

from app.graph.falkordb_driver import PhraseGroupDriver
from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from app.graph.search_hook import GraphSearch, edges_by_uuid, exact
from tests.conftest import unique_graph_id


def _facts() -> list[dict]:
    # The query word appears 1-12 times in facts of different lengths: each hit scores differently.
    return [{"source": f"Gauge {i}", "target": "Harbor", "relation": "REPORTS",
             "fact": f"Gauge {i} reports " + " ".join(["harbor"] * (i + 1)) + f" levels and {'tide ' * (12 - i)}notes"}
            for i in range(12)] + [
        {"source": "Baker", "target": "Bakery", "relation": "WORKS_AT", "fact": "The baker opens the bakery at dawn"}]


def _uuids(edges) -> list[str]:
    return [edge.uuid for edge in edges]


def _dumps(edges) -> list[dict]:
    return [edge.model_dump() for edge in edges]


def _graph_of_facts(backend, prefix: str):
    """A new graph holding _facts() on the embedded FalkorDB: its id and its driver (with the hook)."""
    app, client = backend(RERANKER_PROVIDER="none")
    adapter = GraphitiAdapter(app.config["APP_CONFIG"])
    gid = unique_graph_id(prefix)
    assert client.post("/api/graph", json={"graph_id": gid}).status_code == 201
    adapter.graph.import_facts(gid, _facts())
    return gid, adapter.runtime.driver_for(gid)


def test_the_keyword_half_answers_graphitis_hits_in_graphitis_order(backend):
    gid, driver = _graph_of_facts(backend, "kw")
    assert isinstance(driver.search_interface, GraphSearch)

    def both(query, search_filter=SearchFilters(), group_ids=(gid,), limit=5):
        group_ids = list(group_ids) if group_ids is not None else None
        ours = run_on_loop(search_utils.edge_fulltext_search(driver, query, search_filter, group_ids, limit), 60)
        graphitis = run_on_loop(search_utils.edge_fulltext_search(exact(driver), query, search_filter, group_ids,
                                                                  limit), 60)
        return ours, graphitis

    ours, graphitis = both("harbor levels")
    assert len(ours) == 5 and _uuids(ours) == _uuids(graphitis)
    assert _dumps(ours) == _dumps(graphitis)  # whole edges, read the same way
    assert ours[0].fact.count("harbor") > ours[-1].fact.count("harbor")  # the best-scored hits, not any five
    ours, graphitis = both("harbor", limit=40, group_ids=None)
    assert len(ours) == 12 and _uuids(ours) == _uuids(graphitis)
    assert both("bakery dawn")[0][0].fact == "The baker opens the bakery at dawn"
    assert both("volcano") == ([], [])
    assert both("harbor", group_ids=["another_graph"]) == ([], [])
    # With filters the search is Graphiti's own.
    before_now = SearchFilters(created_at=[[DateFilter(date=datetime.now(timezone.utc),
                                                       comparison_operator=ComparisonOperator.less_than)]])
    ours, graphitis = both("harbor", search_filter=before_now, limit=40)
    assert len(ours) == 12 and _uuids(ours) == _uuids(graphitis)


def test_facts_read_without_embeddings_are_the_facts_graphiti_reads(backend):
    gid, driver = _graph_of_facts(backend, "by_uuid")
    stored = run_on_loop(EntityEdge.get_by_group_ids(driver, [gid], with_embeddings=True), 60)
    assert len(stored) == 13 and all(len(edge.fact_embedding or []) > 0 for edge in stored)  # vectors are stored
    wanted = sorted(edge.uuid for edge in stored)[:7]
    ours = sorted(run_on_loop(edges_by_uuid(driver, wanted), 60), key=lambda edge: edge.uuid)
    graphitis = sorted(run_on_loop(EntityEdge.get_by_uuids(exact(driver), wanted), 60), key=lambda edge: edge.uuid)
    assert _uuids(ours) == wanted and _dumps(ours) == _dumps(graphitis)
    assert all(edge.fact_embedding is None and "fact_embedding" not in edge.attributes for edge in ours)
    assert run_on_loop(edges_by_uuid(driver, []), 60) == []


def test_hits_failing_graphitis_checks_never_take_a_place(backend, caplog):
    """The keyword half checks only the best hits it keeps; when one of them is another group's fact, or
    a fact whose end is not an Entity, it checks every hit as Graphiti does and answers Graphiti's hits."""
    gid, driver = _graph_of_facts(backend, "kw_checks")

    def both(query, limit):
        ours = run_on_loop(search_utils.edge_fulltext_search(driver, query, SearchFilters(), [gid], limit), 60)
        graphitis = run_on_loop(search_utils.edge_fulltext_search(exact(driver), query, SearchFilters(), [gid],
                                                                  limit), 60)
        return ours, graphitis

    with caplog.at_level("DEBUG", logger="app.graph.search_hook"):
        ours, graphitis = both("harbor", limit=13)
    assert len(ours) == 12 and _uuids(ours) == _uuids(graphitis)
    assert "checking every hit" not in caplog.text  # the app's own facts pass: one query
    # Two "harbor" facts scored as high as the best stored ones: one of another group, one from a non-Entity node.
    run_on_loop(exact(driver).execute_query(
        "MATCH (s:Entity {name: 'Gauge 0'}), (t:Entity {name: 'Harbor'}) "
        "CREATE (s)-[:RELATES_TO {uuid: 'foreign-group', group_id: 'another_graph', name: 'REPORTS', "
        "fact: 'harbor', episodes: [], created_at: $now}]->(t) "
        "CREATE (:Note {uuid: 'note'})-[:RELATES_TO {uuid: 'not-an-entity', group_id: $gid, name: 'REPORTS', "
        "fact: 'harbor harbor', episodes: [], created_at: $now}]->(t)",
        gid=gid, now=datetime.now(timezone.utc).isoformat()), 60)
    bare, _, _ = run_on_loop(exact(driver).execute_query(
        "CALL db.idx.fulltext.queryRelationships('RELATES_TO', 'harbor') YIELD relationship AS e, score "
        "RETURN e.uuid AS uuid ORDER BY score DESC LIMIT 13"), 60)
    assert {"foreign-group", "not-an-entity"} & {record["uuid"] for record in bare}  # among the best 13 hits
    caplog.clear()
    with caplog.at_level("DEBUG", logger="app.graph.search_hook"):
        ours_after, graphitis_after = both("harbor", limit=13)
    assert "checking every hit" in caplog.text
    assert _uuids(ours_after) == _uuids(graphitis_after) and set(_uuids(ours_after)) == set(_uuids(graphitis))
    assert _dumps(ours_after) == _dumps(graphitis_after)


def test_a_graph_whose_id_holds_a_hyphen_finds_its_keyword_hits(backend):
    """FalkorDB indexes a group id at its '-' as separate words; the driver's keyword query names the group
    by those words, so such a graph's keyword search finds its facts and entities, in its clones too."""
    gid, driver = _graph_of_facts(backend, "north-basin")
    assert "-" in gid and isinstance(driver, PhraseGroupDriver)
    hook = run_on_loop(search_utils.edge_fulltext_search(driver, "harbor", SearchFilters(), [gid], 20), 60)
    graphitis = run_on_loop(search_utils.edge_fulltext_search(exact(driver), "harbor", SearchFilters(), [gid], 20), 60)
    assert len(hook) == 12 and _uuids(hook) == _uuids(graphitis)
    # Graphiti's own query names the group as one escaped word, which matches nothing FalkorDB indexed.
    plain = FalkorDriver(falkor_db=driver.client, database=gid)
    assert run_on_loop(search_utils.edge_fulltext_search(plain, "harbor", SearchFilters(), [gid], 20), 60) == []
    # A clone, as Graphiti makes one for each graph it ingests text into, searches entities the same way.
    clone = GraphitiAdapter(backend(RERANKER_PROVIDER="none")[0].config["APP_CONFIG"]).runtime.driver.clone(gid)
    assert isinstance(clone, PhraseGroupDriver)
    entities = run_on_loop(search_utils.node_fulltext_search(clone, "Bakery", SearchFilters(), [gid], 5), 60)
    assert [entity.name for entity in entities] == ["Bakery"]
