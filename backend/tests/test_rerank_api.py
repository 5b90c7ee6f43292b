"""POST /api/rerank: the hosted-rerank-API contract, limits, and strict errors mapped to clear statuses,
over real HTTP to the scripted model."""

from __future__ import annotations

import json

import pytest

from app.api.rerank import MAX_DOCUMENT_CHARS, MAX_DOCUMENTS
from tests.support.scripted_llm import always, garbage, hang, unused_base_url
from tests.support.scripted_rankers import listwise_reply, ranking_llm, table_relevance

QUERY = "where does the harbor get its drinking water?"
DOCS = [
    {"id": "bakery", "text": "Harbor Bakery sells sourdough bread baked every morning"},
    {"id": "reservoir", "text": "Harbor Water Utility operates the North Reservoir, the town's main drinking water source"},
    {"id": "algae", "text": "An algae bloom closed the North Reservoir for three weeks in August 2024"},
    {"id": "ferry", "text": "The Harbor Ferry connects the town to Harbor Island every hour"},
]
RELEVANCE = {DOCS[0]["text"]: 0.1, DOCS[1]["text"]: 0.9, DOCS[2]["text"]: 0.6, DOCS[3]["text"]: 0.2}
IDEAL = ["reservoir", "algae", "ferry", "bakery"]


@pytest.fixture
def api(backend, scripted_llm):
    scripted_llm.responder = ranking_llm(table_relevance(RELEVANCE))

    def build(**env):
        settings = dict(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                        RERANKER_MODEL="ranker", RERANKER_TIMEOUT_S=5)
        return backend(**{**settings, **env})[1]

    return build


def post(client, **body):
    return client.post("/api/rerank", json={"query": QUERY, "documents": DOCS, **body})


@pytest.mark.parametrize("strategy", ["pointwise", "listwise", "sliding_window", "pairwise", "tournament"])
def test_each_strategy_answers_the_contract(api, scripted_llm, strategy):
    response = post(api(), strategy=strategy)
    assert response.status_code == 200, response.get_json()
    body = response.get_json()
    assert [result["id"] for result in body["results"]][:2] == IDEAL[:2]
    assert {result["index"] for result in body["results"]} == {0, 1, 2, 3}
    assert [result["rank"] for result in body["results"]] == [1, 2, 3, 4]
    scores = [result["score"] for result in body["results"]]
    assert scores == sorted(scores, reverse=True)
    # The hosted rerank APIs' shape (Cohere, Jina, TEI): index + relevance_score; score kept too.
    assert all(result["relevance_score"] == result["score"] for result in body["results"])
    assert all("document" not in result for result in body["results"])
    assert body["strategy"] == strategy and body["model"] == "ranker" and body["dropped"] == []
    assert body["calls"] == body["estimated_calls"] == scripted_llm.count


def test_plain_strings_top_n_and_return_documents(api):
    texts = [doc["text"] for doc in DOCS]
    body = api().post("/api/rerank", json={"query": QUERY, "documents": texts, "strategy": "listwise",
                                           "top_n": 2, "return_documents": True}).get_json()
    assert [(r["id"], r["index"]) for r in body["results"]] == [("1", 1), ("2", 2)]
    assert body["results"][0]["document"] == {"text": texts[1]}
    assert post(api(), strategy="listwise", top_k=2, top_n=2).status_code == 200


def test_the_configured_strategy_is_the_default(api):
    body = post(api(RERANKER_STRATEGY="tournament", RERANKER_TOURNAMENT_ROUNDS=3)).get_json()
    assert body["strategy"] == "tournament" and body["calls"] == 3 * 2  # 4 -> 2 -> 1, three rounds


def test_a_rejected_list_gives_every_result_a_reason(api, scripted_llm):
    scripted_llm.responder = ranking_llm(
        table_relevance(RELEVANCE), listwise=lambda p: listwise_reply([], rejected=True, reason="not about water")
    )
    body = post(api(), strategy="listwise").get_json()
    assert {result["reason"] for result in body["results"]} == {"rejected: not about water"}


def test_a_rejection_that_still_ranks_is_an_unusable_answer(api, scripted_llm):
    scripted_llm.responder = ranking_llm(
        table_relevance(RELEVANCE), listwise=lambda p: listwise_reply([1, 0, 2, 3], rejected=True, reason="none"))
    strict = post(api(), strategy="listwise")
    assert strict.status_code == 502 and strict.get_json()["error"]["code"] == "unusable_model_answer"
    assert "rejects every passage yet ranks some" in strict.get_json()["error"]["message"]


def test_lenient_repairs_are_reported(api, scripted_llm):
    scripted_llm.responder = ranking_llm(table_relevance(RELEVANCE), listwise=lambda p: listwise_reply([1, 1, "x"]))
    body = post(api(), strategy="listwise", strict=False).get_json()
    assert [result["id"] for result in body["results"]] == ["reservoir", "bakery", "algae", "ferry"]
    (report,) = body["stats"]["repair_reports"]
    assert report["missing"] == [0, 2, 3] and report["duplicates"] == [1] and report["extra"] == ["'x'"]
    assert report["is_valid"] is False and body["stats"]["repairs"] == 5


def test_mmr_lists_the_near_duplicate_as_dropped(api):
    twin = {"id": "twin", "text": "The Harbor Water Utility operates North Reservoir, which is the main drinking "
                                  "water source of the town"}
    RELEVANCE[twin["text"]] = 0.85
    try:
        body = api(RERANKER_MMR_BASE="listwise").post(
            "/api/rerank", json={"query": QUERY, "documents": DOCS + [twin], "strategy": "mmr"}).get_json()
    finally:
        del RELEVANCE[twin["text"]]
    assert [result["id"] for result in body["results"]][0] == "reservoir"
    assert body["dropped"] == [{"id": "twin", "index": 4, "relevance_score": 0.0, "score": 0.0, "rank": 5,
                                "reason": "redundant_with:reservoir"}]
    assert body["calls"] == 1


def test_jsonl_documents_and_integer_ids_are_kept_verbatim(api):
    jsonl = "".join(json.dumps({"id": 100 + index, "text": doc["text"]}) + "\n" for index, doc in enumerate(DOCS))
    body = post(api(), strategy="listwise", documents=jsonl).get_json()
    assert [result["id"] for result in body["results"]] == [101, 102, 103, 100]  # integers, as sent
    refused = post(api(), strategy="listwise", documents='{"id": 1, "text": "ok"}\nnot json\n')
    assert refused.status_code == 400 and refused.get_json()["error"]["code"] == "invalid_jsonl"
    assert "JSONL line 2" in refused.get_json()["error"]["message"]


def test_mmr_answers_five_by_default_with_cited_reasons_and_a_diversity_note(api, scripted_llm):
    extra = [{"id": f"x{i}", "text": text} for i, text in enumerate([
        "Water rates in Harbor rose by 4 percent in 2023 to fund reservoir repairs.",
        "The North Reservoir holds about 3 million cubic metres when full.",
        "A leak near the North Reservoir dam was repaired in spring 2022.",
        "The Harbor Water Utility employs 42 people across two treatment plants."])]
    relevance = {**RELEVANCE, DOCS[3]["text"]: 0.3}  # only the bakery (0.1) is below 0.2
    scripted_llm.responder = ranking_llm(lambda query, passage: relevance.get(passage, 0.5))
    body = post(api(), strategy="mmr", documents=DOCS + extra).get_json()
    assert len(body["results"]) == 5 and [r["id"] for r in body["dropped"]] == ["bakery"]  # 0.1 < 0.2
    assert body["dropped"][0]["reason"] == "below_min_relevance:0.2"
    assert all(r["reason"].startswith("relevance ") and '"' in r["reason"] for r in body["results"])
    assert "dropped below relevance 0.2 (bakery)" in body["diversity_note"]
    assert body["stats"]["embedding_calls"] == 1
    assert len(post(api(), strategy="mmr", documents=DOCS + extra, top_k=6).get_json()["results"]) == 6
    assert "diversity_note" not in post(api(), strategy="listwise").get_json()


def test_the_endpoint_shares_the_graph_rerankers_judge(api, scripted_llm):
    client = api(RERANKER_SCORE_MODE="logprobs")
    assert client.get("/api/graph").status_code == 200  # builds the graph runtime and its reranker
    before = client.get("/health").get_json()["reranker"]["stats"]["model_requests"]
    assert post(client, strategy="pointwise").status_code == 200
    after = client.get("/health").get_json()["reranker"]["stats"]["model_requests"]
    assert after - before == len(DOCS) == scripted_llm.count
    assert post(client, strategy="pointwise").get_json()["calls"] == 0  # the shared cache answers


# -- limits and bad input -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "body, status, code, fragment",
    [
        ({"documents": ["x"] * (MAX_DOCUMENTS + 1)}, 413, "too_many_documents", f"at most {MAX_DOCUMENTS}"),
        ({"documents": ["ok", "y" * (MAX_DOCUMENT_CHARS + 1)]}, 413, "document_too_large", "documents[1]"),
        ({"query": "q" * 2001}, 413, "field_too_large", "'query'"),
        ({"documents": [{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]}, 422, "invalid_documents", "'a'"),
        ({"documents": ["fine", "  "]}, 422, "empty_document", "documents[1]"),
        ({"documents": [{"id": "a"}]}, 400, "invalid_type", "documents[0].text"),
        ({"documents": [{"id": ["a"], "text": "x"}]}, 400, "invalid_type", "documents[0].id"),
        ({"documents": [3]}, 400, "invalid_type", "documents[0]"),
        ({"documents": []}, 400, "invalid_type", "non-empty list"),
        ({"documents": None}, 400, "missing_field", "'documents'"),
        ({"query": None}, 400, "missing_field", "'query'"),
        ({"top_k": 0}, 422, "out_of_range", "'top_k'"),
        ({"top_k": 2, "top_n": 3}, 422, "conflicting_fields", "top_n"),
        ({"strategy": "bogus"}, 422, "invalid_value", "'strategy'"),
        ({"return_documents": "yes"}, 400, "invalid_type", "'return_documents'"),
        ({"strategy": "listwise", "documents": [f"d{i}" for i in range(101)]}, 422,
         "too_many_documents_for_strategy", "listwise strategy accepts (100)"),
    ],
)
def test_bad_requests_are_refused_clearly(api, scripted_llm, body, status, code, fragment):
    response = api().post("/api/rerank", json={"query": QUERY, "documents": DOCS, **body})
    assert response.status_code == status, response.get_json()
    error = response.get_json()["error"]
    assert error["code"] == code and fragment in error["message"]
    assert scripted_llm.count == 0


# -- strict errors ------------------------------------------------------------------------------


def test_an_unusable_model_answer_is_a_502(api, scripted_llm):
    scripted_llm.responder = always(garbage("no idea"))
    response = post(api(), strategy="listwise")
    assert response.status_code == 502
    assert response.get_json()["error"]["code"] == "unusable_model_answer"
    assert scripted_llm.count == 1


def test_a_dead_model_server_is_a_502(api):
    response = post(api(RERANKER_BASE_URL=unused_base_url()), strategy="pairwise")
    assert response.status_code == 502
    error = response.get_json()["error"]
    assert error["code"] == "model_request_failed" and "APIConnectionError" in error["message"]


def test_a_prompt_beyond_the_context_window_is_a_413(api, scripted_llm):
    response = post(api(RERANKER_CONTEXT_TOKENS=256), strategy="listwise",
                    documents=[{"id": f"d{i}", "text": "word " * (30 + i)} for i in range(8)])
    assert response.status_code == 413
    error = response.get_json()["error"]
    assert error["code"] == "document_too_long" and error["document_id"] == "d7"
    assert scripted_llm.count == 0


def test_strict_refuses_a_document_over_max_document_chars_and_lenient_cuts_it(api, scripted_llm):
    long_doc = {"id": "long", "text": DOCS[1]["text"] + " and more" * 20}
    client = api(RERANKER_MAX_DOCUMENT_CHARS=100)
    scripted_llm.responder = ranking_llm(lambda query, passage: RELEVANCE.get(passage, 0.95))  # the cut text
    refused = post(client, strategy="listwise", documents=DOCS[:1] + [long_doc])
    lenient = post(client, strategy="listwise", documents=DOCS[:1] + [long_doc], strict=False)
    assert refused.status_code == 413
    error = refused.get_json()["error"]
    assert error["code"] == "document_too_long" and error["document_id"] == "long"
    assert "max_document_chars=100" in error["message"]
    assert scripted_llm.count == 1  # only the lenient request reached the model
    assert lenient.status_code == 200 and [result["id"] for result in lenient.get_json()["results"]] == ["long", "bakery"]


def test_the_deadline_is_a_504(api, scripted_llm):
    scripted_llm.responder = always(hang())
    response = post(api(RERANKER_DEADLINE_S=0.5, RERANKER_TIMEOUT_S=30), strategy="listwise")
    assert response.status_code == 504 and response.get_json()["error"]["code"] == "rerank_timeout"


def test_strict_false_keeps_failed_units_in_order(api, scripted_llm):
    scripted_llm.responder = ranking_llm(table_relevance(RELEVANCE), pairwise=lambda p: garbage()
                                         if DOCS[1]["text"] in p.passages else None)
    body = post(api(), strategy="pairwise", strict=False).get_json()
    assert body["stats"]["fallbacks"] >= 1 and len(body["results"]) == 4


def test_reranking_switched_off_is_a_503(backend):
    response = backend(RERANKER_PROVIDER="none")[1].post("/api/rerank", json={"query": QUERY, "documents": DOCS})
    assert response.status_code == 503 and response.get_json()["error"]["code"] == "reranker_disabled"
