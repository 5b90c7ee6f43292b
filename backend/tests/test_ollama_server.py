"""The reranker on Ollama itself (the server production runs), built and started by the project with the
kit's real model imported (tests/support/ollama_fixtures.py): Ollama's logprobs carry the tokens the
score parser reads, each score mode ranks a relevant passage above an irrelevant one, `auto` keeps
logprobs, a model Ollama lacks is named in the log and in /health, RERANKER_MAX_PARALLEL requests at once
are what the server was started to run, an Ollama stopped in the middle of a search leaves the
first stage's order with one warning, and after the model was unloaded the app is ready only once its
warm-up has loaded it, and the first search then is judged, under a RERANKER_TIMEOUT_S shorter than the
load, after which the model stays loaded for the server's OLLAMA_KEEP_ALIVE.

Passages are short and few: on a busy 2-core machine a logprobs request takes 2-3 s once the judge's
system prompt is cached in a slot, a JSON one 10-30 s (Ollama samples it under a JSON grammar)."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import re
import shutil
import threading
import time
from datetime import datetime, timezone

import httpx
import openai
import pytest

from app.config import DEFAULT_CONTEXT_TOKENS, Config
from app.graph.runtime import GraphitiAdapter
from app.graph.server_process import free_port
from app.local_llm.ollama import (
    CHATML_TEMPLATE, base_url, ensure_ollama, ollama_files, ollama_status, server_url, stop_ollama,
)
from app.local_llm.ollama_build import OLLAMA_VERSION
from graphiti_llm_rerank import build_reranker
from graphiti_llm_rerank.providers import build_judge
from graphiti_llm_rerank.judge import TOP_LOGPROBS
from graphiti_llm_rerank.judge_prompt import GRADES, NO_WORD, YES_WORD, build_judge_messages
from graphiti_llm_rerank.score_parsing import expected_grade, normalise_token, yes_probability
from tests.conftest import unique_graph_id

logger = logging.getLogger(__name__)

QUERY = "Who runs the town's drinking water utility?"
RELEVANT = "Mara Lindqvist directs the Harbor Water Utility, which supplies the town's drinking water."
IRRELEVANT = "The bakery on Mill Street sells rye bread on Saturdays."
# Margins for a shared, busy 2-core CPU (the first request also loads the model); quiet, a request takes ~1 s.
SLOW = dict(reranker_timeout_s=600.0, reranker_deadline_s=1200.0)


def reranker_config(url: str, model: str, **settings) -> Config:
    config = Config.from_env()
    return dataclasses.replace(config, reranker_provider="ollama", reranker_base_url=url,
                               reranker_model=model, **{**SLOW, **settings})


def rank(config: Config, passages: list[str], query: str = QUERY):
    """One rank call on a judge of its own (so counters and cache are this test's); (results, stats)."""
    reranker = build_reranker(config, judge=build_judge(config))

    async def go():
        try:
            return await reranker.rank(query, passages)
        finally:
            await reranker.aclose()

    return asyncio.run(go()), reranker.stats()


def first_position(url: str, model: str, mode: str, passage: str):
    """The first answer position of one judge request, as the judge sends it in logprob modes."""
    client = openai.OpenAI(base_url=url, api_key="ollama", timeout=600.0, max_retries=0)
    response = client.chat.completions.create(
        model=model, messages=build_judge_messages(QUERY, passage, mode=mode), temperature=0, max_tokens=1,
        logprobs=True, top_logprobs=TOP_LOGPROBS)
    positions = response.choices[0].logprobs.content
    offered = [(alternative.token, round(alternative.logprob, 3)) for alternative in positions[0].top_logprobs]
    logger.info("Ollama %s, %s mode: answered %r, top_logprobs %s", OLLAMA_VERSION, mode,
                response.choices[0].message.content, offered)
    return positions


def test_the_project_runs_its_pinned_ollama_with_the_chat_template(local_ollama, ollama_config, ollama_model):
    status = ollama_status(ollama_config)
    assert status.state == "running" and status.version == OLLAMA_VERSION and ollama_model in status.models
    shown = httpx.post(f"{server_url(ollama_config)}/api/show", json={"model": ollama_model}, timeout=30).json()
    # Without our TEMPLATE a bare GGUF gets `{{ .Prompt }}`: no system message, no roles.
    assert shown["template"] == CHATML_TEMPLATE
    assert "<|im_end|>" in shown["parameters"]
    assert re.search(rf"num_ctx\s+{DEFAULT_CONTEXT_TOKENS}\b", shown["parameters"]), shown["parameters"]
    # The import went to OLLAMA_MODELS under the state folder, not to ~/.ollama.
    namespace, name = ollama_model.split("/")
    manifests = ollama_files(ollama_config).models / "manifests" / "registry.ollama.ai"
    assert (manifests / namespace / name / "latest").is_file()


def test_the_model_runs_on_repacked_weights_with_the_threads_the_settings_give(local_ollama, ollama_config,
                                                                              ollama_model):
    first_position(local_ollama, ollama_model, "logprobs", RELEVANT)  # the model is loaded, its runner logged
    log = ollama_files(ollama_config).log.read_text(errors="replace")
    # The build turned ggml's weight repacking on (app/local_llm/ollama_build.py): the CPU backend says so.
    assert re.search(r"msg=system .*CPU\.0\.REPACK=1", log), "no REPACK=1 in the system line of the log"
    # LOCAL_LLM_THREADS (the suite sets 1; tests/conftest.py) reaches the runner through the Modelfile.
    assert ollama_config.local_llm_threads and f"NumThreads:{ollama_config.local_llm_threads}" in log


def test_top_logprobs_carry_the_yes_and_no_tokens_the_parser_reads(local_ollama, ollama_model):
    relevant = first_position(local_ollama, ollama_model, "logprobs", RELEVANT)
    offered = {normalise_token(alternative.token) for alternative in relevant[0].top_logprobs}
    assert {YES_WORD, NO_WORD} <= offered, offered
    irrelevant = first_position(local_ollama, ollama_model, "logprobs", IRRELEVANT)
    assert yes_probability(relevant) > 0.5 > yes_probability(irrelevant)


def test_top_logprobs_carry_the_grade_digits_the_parser_reads(local_ollama, ollama_model):
    relevant = first_position(local_ollama, ollama_model, "graded", RELEVANT)
    offered = {normalise_token(alternative.token) for alternative in relevant[0].top_logprobs}
    assert len(offered & set(GRADES)) >= 2, offered
    irrelevant = first_position(local_ollama, ollama_model, "graded", IRRELEVANT)
    assert expected_grade(relevant) > expected_grade(irrelevant)


@pytest.mark.parametrize("score_mode, mode_in_use", [("logprobs", "logprobs"), ("graded", "graded"),
                                                     ("json", "json"), ("auto", "logprobs")])
def test_each_score_mode_ranks_the_relevant_passage_first(local_ollama, ollama_model, score_mode, mode_in_use):
    config = reranker_config(local_ollama, ollama_model, reranker_score_mode=score_mode)
    results, stats = rank(config, [IRRELEVANT, RELEVANT])
    assert [passage for passage, _ in results] == [RELEVANT, IRRELEVANT], results
    assert results[0][1] > results[1][1]
    # Scored by the model in the asked mode, nothing failed; auto keeps logprobs, as Ollama returns them.
    assert stats["fallbacks"] == 0 and stats["passage_failures"] == 0 and stats["model_requests"] == 2
    assert stats["score_mode_in_use"] == mode_in_use and stats["score_mode_switches"] == 0


def test_the_score_cache_answers_a_repeated_search_without_asking_ollama(local_ollama, ollama_model):
    config = reranker_config(local_ollama, ollama_model, reranker_score_mode="logprobs")
    reranker = build_reranker(config, judge=build_judge(config))

    async def twice():
        try:
            first = await reranker.rank(QUERY, [IRRELEVANT, RELEVANT])
            asked = reranker.stats()["model_requests"]
            return first, asked, await reranker.rank(QUERY, [IRRELEVANT, RELEVANT])
        finally:
            await reranker.aclose()

    first, asked_first, second = asyncio.run(twice())
    stats = reranker.stats()
    assert asked_first == 2 and stats["model_requests"] == 2, stats  # the second call sent nothing to Ollama
    assert stats["cache_hits"] == 2 and second == first
    assert [passage for passage, _ in second] == [RELEVANT, IRRELEVANT]


def test_requests_up_to_the_parallel_bound_all_answer_queued_on_the_slots_ollama_was_started_with(
        local_ollama, ollama_config, ollama_model):
    parallel = ollama_config.reranker_max_parallel
    slots = ollama_config.ollama_local_num_parallel  # `ollama serve` got it as OLLAMA_NUM_PARALLEL
    assert parallel > slots, "the test needs more requests in flight than Ollama has slots"
    passages = [f"{RELEVANT[:-1]} (notice {number})." for number in range(2 * parallel)]
    config = reranker_config(local_ollama, ollama_model, reranker_score_mode="logprobs",
                             reranker_max_parallel=parallel)
    results, stats = rank(config, passages)
    assert sorted(passage for passage, _ in results) == sorted(passages)
    assert stats["model_requests"] == 2 * parallel and stats["passage_failures"] == 0 and stats["fallbacks"] == 0
    assert stats["peak_in_flight"] == parallel  # the judge did send that many at once...
    log = ollama_files(ollama_config).log.read_text(errors="replace")
    assert f"Parallel:{slots} " in log  # ...and Ollama loaded the model with its slots, queueing the rest


@pytest.fixture
def water_graph(client):
    graph = GraphitiAdapter().graph
    gid = unique_graph_id("ol")
    graph.create(gid)
    graph.import_facts(gid, [
        {"source": "Mara Lindqvist", "target": "Harbor Water Utility", "relation": "directs", "fact": RELEVANT},
        {"source": "Mill Street Bakery", "target": "Town", "relation": "sells", "fact": IRRELEVANT},
    ])
    return gid


def test_a_model_ollama_lacks_is_named_in_the_warning_and_in_health(backend, local_ollama, water_graph, caplog):
    missing = "mirofish/not-imported"
    _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=local_ollama, RERANKER_MODEL=missing,
                        RERANKER_TIMEOUT_S=600, RERANKER_DEADLINE_S=1200)
    response = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 2})
    body = response.get_json()
    assert response.status_code == 200 and body["reranked"] is False  # the first stage's order, answered
    said = f"model '{missing}' not found"
    warnings = [record.getMessage() for record in caplog.records
                if record.levelno == logging.WARNING and record.name.startswith(("app.", "graphiti_llm_rerank."))]
    assert len(warnings) == 1 and said in warnings[0], warnings
    stats = client.get("/health").get_json()["reranker"]["stats"]
    assert stats["last_error"] == "NotFoundError" and said in stats["last_error_detail"]
    assert stats["model"] == missing and stats["fallbacks"] == 1


def own_ollama(ollama_config: Config, directory, **settings):
    """An Ollama of a test's own (a free port, its own state folder) that serves the shared one's imported
    model, so stopping or unloading it touches no other test's server. Yields its settings; stops it after."""
    config = dataclasses.replace(ollama_config, ollama_local_port=free_port(), data_dir=directory,
                                 **settings)
    shared, own = ollama_files(ollama_config), ollama_files(config)
    own.directory.mkdir(parents=True)
    own.models.symlink_to(shared.models, target_is_directory=True)
    modelfile = f"{config.local_llm_model}.Modelfile"  # the record of the import: none is needed again
    shutil.copy(shared.directory / modelfile, own.directory / modelfile)
    ensure_ollama(config)
    try:
        yield config
    finally:
        stop_ollama(config)


@pytest.fixture
def private_ollama(local_ollama, ollama_config, tmp_path):
    yield from own_ollama(ollama_config, tmp_path)


def stop_once_requests_are_in_flight(reranker, config: Config, timeout_s: float = 600.0) -> None:
    deadline = time.monotonic() + timeout_s
    while reranker.stats()["in_flight"] == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    stop_ollama(config)


def test_ollama_stopped_in_the_middle_of_a_search_leaves_the_first_stage_order(
        backend, private_ollama, ollama_model, water_graph, caplog):
    _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=base_url(private_ollama),
                        RERANKER_MODEL=ollama_model,
                        RERANKER_TIMEOUT_S=600, RERANKER_DEADLINE_S=1200)
    stopper = threading.Thread(target=stop_once_requests_are_in_flight,
                               args=(GraphitiAdapter().runtime.reranker, private_ollama))
    stopper.start()
    response = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 2})
    stopper.join()
    body = response.get_json()
    assert ollama_status(private_ollama).state == "stopped"
    assert response.status_code == 200 and body["reranked"] is False and body["error"] is None
    assert [edge["first_stage_rank"] for edge in body["edges"]] == [1, 2]
    assert all(edge["rerank_score"] is None for edge in body["edges"])
    warnings = [record.getMessage() for record in caplog.records
                if record.levelno == logging.WARNING and record.name.startswith(("app.", "graphiti_llm_rerank."))]
    assert len(warnings) == 1 and "APIConnectionError" in warnings[0], warnings


# -- the cold start ------------------------------------------------------------------------------

KEEP_ALIVE = "17m"  # the Ollama's OLLAMA_KEEP_ALIVE: neither its own default (5m) nor the kit's (30m)
KEEP_ALIVE_S = 17 * 60


@pytest.fixture
def cold_ollama(local_ollama, ollama_config, tmp_path):
    """An Ollama of this test's own whose model this test may unload, started with KEEP_ALIVE."""
    yield from own_ollama(ollama_config, tmp_path, ollama_local_keep_alive=KEEP_ALIVE, reranker_max_parallel=1)


def loaded_models(server: str) -> dict[str, dict]:
    """GET /api/ps: the models Ollama has in memory, by name without the tag."""
    models = httpx.get(f"{server}/api/ps", timeout=30).json()["models"]
    return {model["name"].split(":")[0]: model for model in models}


def unload(server: str, model: str) -> None:
    """Ollama's own way: a generate request with keep_alive 0; then /api/ps must no longer list it."""
    httpx.post(f"{server}/api/generate", json={"model": model, "keep_alive": 0}, timeout=120).raise_for_status()
    deadline = time.monotonic() + 60
    while model in loaded_models(server) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert model not in loaded_models(server)


def timed_judge_request(url: str, model: str, passage: str) -> float:
    """Seconds one judge request (logprobs mode, as the judge sends it) takes to answer."""
    client = openai.OpenAI(base_url=url, api_key="ollama", timeout=600.0, max_retries=0)
    started = time.monotonic()
    client.chat.completions.create(
        model=model, messages=build_judge_messages(QUERY, passage, mode="logprobs"), temperature=0, max_tokens=1,
        logprobs=True, top_logprobs=TOP_LOGPROBS)
    return time.monotonic() - started


def measure_cold_start(url: str, server: str, model: str) -> tuple[float, float]:
    """(first request on the unloaded model, a request once it is loaded), in seconds. Their passages are
    not the search's, so its requests find nothing of theirs in Ollama's prompt cache."""
    unload(server, model)
    cold = timed_judge_request(url, model, "A passage the judge reads while the model loads.")
    warm = max(timed_judge_request(url, model, f"Another passage, number {number}, once it is loaded.")
               for number in (1, 2))
    logger.info("Ollama %s cold start: first judge request %.1fs, then %.1fs a request: the load costs %.1fs",
                OLLAMA_VERSION, cold, warm, cold - warm)
    return cold, warm


def expires_in_s(model: dict) -> float:
    """Seconds until Ollama unloads `model` (its /api/ps expires_at, RFC 3339 with nanoseconds)."""
    stamp = re.sub(r"(\.\d{6})\d*", r"\1", model["expires_at"]).replace("Z", "+00:00")
    return (datetime.fromisoformat(stamp) - datetime.now(timezone.utc)).total_seconds()


def test_the_first_search_after_the_model_was_unloaded_is_judged_and_the_model_stays_loaded(
        backend, cold_ollama, ollama_model, water_graph, caplog):
    url, server = base_url(cold_ollama), server_url(cold_ollama)
    cold, warm = measure_cold_start(url, server, ollama_model)
    load = cold - warm
    # Shorter than the load, so without the warm-up the search's first request would time out while the
    # model loads; as near the load as that allows, so that a loaded model's requests meet it even when
    # another process slows them (halfway between a request and the load, one search here timed out).
    timeout_s = round(0.9 * load, 1)
    assert 1.25 * warm < timeout_s < load, f"no timeout between a request ({warm:.1f}s) and the load ({load:.1f}s)"
    unload(server, ollama_model)

    _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=url, RERANKER_MODEL=ollama_model,
                        RERANKER_SCORE_MODE="logprobs", RERANKER_MAX_PARALLEL=1, RERANKER_TIMEOUT_S=timeout_s,
                        RERANKER_DEADLINE_S=1200, RERANKER_WARMUP_TIMEOUT_S=600)
    GraphitiAdapter().runtime  # the start step: the warm-up request goes out
    ready = client.get("/health/ready")
    assert ready.status_code == 503 and "is loading" in ready.get_json()["reranker"]  # the model loads
    deadline = time.monotonic() + 600
    while (ready := client.get("/health/ready")).status_code != 200:  # traffic waits here, not in a search
        assert time.monotonic() < deadline, ready.get_json()
        time.sleep(0.2)
    body = client.post(f"/api/graph/{water_graph}/search", json={"query": QUERY, "limit": 2}).get_json()

    # Judged by the model, not the first stage's order kept after a timeout.
    assert body["reranked"] is True and body["rerank_fallback"] is None, body
    assert body["judged"] == body["candidates"] == 2
    assert [edge["fact"] for edge in body["edges"]] == [RELEVANT, IRRELEVANT]
    assert all(edge["rerank_score"] is not None for edge in body["edges"])
    stats = client.get("/health").get_json()["reranker"]["stats"]
    assert stats["warmup"]["state"] == "ready" and stats["fallbacks"] == 0 and stats["errors"] == {}
    logger.info("warm-up after the unload: %.1fs (RERANKER_TIMEOUT_S=%gs)", stats["warmup"]["seconds"], timeout_s)
    warnings = [record.getMessage() for record in caplog.records
                if record.levelno == logging.WARNING and record.name.startswith(("app.", "graphiti_llm_rerank."))]
    assert warnings == []
    # The model stays loaded for the server's keep-alive, counted from the search's last request.
    model = loaded_models(server)[ollama_model]
    assert KEEP_ALIVE_S - 120 < expires_in_s(model) <= KEEP_ALIVE_S
