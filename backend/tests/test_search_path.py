"""The modules one reranked search runs, from the HTTP request to the judge's request and back.

`SEARCH_TRAIL` is what a newcomer reads to follow a RERANKER_* setting to the search answer (the
reranker's README lists it, under "How a setting reaches the answer", with app/config.py first);
`SEARCH_SUPPORT` is what those modules call on the way (input checks, the graph loop, the judge's
own parts). A real search over HTTP (Flask's client, the embedded FalkorDB, the scripted judge on
real HTTP) is traced on both threads it runs on, and the modules of `app.api`, `app.graph` and
`graphiti_llm_rerank` that ran must be exactly these: a module that joins the path, or leaves it, fails here
until the lists say so.
"""

from __future__ import annotations

import re
import sys
import uuid
from contextvars import ContextVar
from pathlib import Path

from app.graph.loop import run_on_loop
from app.graph.runtime import GraphitiAdapter
from tests.conftest import unique_graph_id
from tests.support.facts import WATER_FACTS
from tests.support.scripted_llm import judge

APP = Path(__file__).resolve().parents[1] / "app"
# The reranker package, as the trail names its modules ("graphiti_llm_rerank/judge.py").
PACKAGE_ROOT = Path(__file__).resolve().parents[2] / "reranker" / "src"
TRACED_PACKAGES = ("api", "graph", "graphiti_llm_rerank")
# True inside the traced request and in every task it starts on the graph loop (tasks copy the context
# of the thread that submits them), so work other tests left on the loop is not counted.
IN_TRACED_REQUEST: ContextVar[bool] = ContextVar("in_traced_request", default=False)

# The trail, in the order a search meets it. Config.from_env (app/config.py) has read the settings
# before any request; graph/runtime.py built the reranker with them (`_build_reranker`, through the
# package's RerankerConfig and build_reranker) and decided whether it reranks, once per process, so
# the package's config and provider registry are not on a search's path.
SEARCH_TRAIL = {
    "graph/runtime.py": "the process's Graphiti, built once with the reranker (_get_graphiti, _build_reranker), "
                        "and whether it reranks (GraphitiRuntime.reranking_enabled)",
    "graph/search.py": "first stage, then rank_candidates, typed hits read from the Judgement's order",
    "graphiti_llm_rerank/ollama_reranker.py": "the guard (budget, deadline, breaker, fallback) around the strategy; "
                                              "answers the Judgement",
    "graphiti_llm_rerank/strategies/pointwise.py": "the default strategy: one judge request per passage",
    "graphiti_llm_rerank/judge.py": "the request to the model server (RERANKER_MODEL, RERANKER_SCORE_MODE)",
    "graphiti_llm_rerank/fusion.py": "the Judgement's order: judge, cosine and first stage fused (RERANKER_FUSION)",
    "api/graph.py": "POST /api/graph/<id>/search: the checked request in, the answer out",
}
# Read before any request (Config.from_env), so not traced; the README's list starts with it.
SETTINGS_MODULE = "config.py"
# The most modules the trail (with SETTINGS_MODULE) may hold: one more is a merge to make, or a reason to give.
MAX_TRAIL = 8
README = PACKAGE_ROOT.parent / "README.md"
SEARCH_SUPPORT = {
    "api/body_limit.py": "MAX_REQUEST_BYTES for a body the server streams",
    "api/errors.py": "JSON error bodies",
    "api/metrics.py": "the request's latency, by route, for /metrics",
    "api/request_log.py": "the request's id and its access line",
    "api/validation.py": "request checks",
    "graphiti_llm_rerank/strategies/base.py": "runs the strategy on this call's view of the judge and checks its answer",
    "graph/falkordb_driver.py": "the keyword query names the graph by the words its id was indexed under",
    "graph/local_embedder.py": "the query's embedding (EMBEDDING_PROVIDER=local)",
    "graph/loop.py": "the one asyncio loop graph coroutines run on",
    "graph/operations.py": "graph operations under their locks and deadline",
    "graph/search_hook.py": "the first stage's keyword and cosine halves",
    "graph/search_filters.py": "the request's filters as Graphiti's, and whether each fact still holds",
    "graph/server_process.py": "is the embedded database's process still up?",
    "graph/store.py": "the graph registry (does the graph exist?)",
    "graph/text_rules.py": "text checks of the query",
    "graph/timestamps.py": "ISO dates in the hits",
    "graph/vector_index.py": "the cosine half's hook: the exact path below GRAPH_VECTOR_INDEX_MIN_FACTS facts",
    "graphiti_llm_rerank/circuit_breaker.py": "the model's breaker",
    "graphiti_llm_rerank/observer.py": "the rank call reported to the app's metrics",
    "graphiti_llm_rerank/counters.py": "the judge's counters",
    "graphiti_llm_rerank/judge_prompt.py": "the judge's prompt",
    "graphiti_llm_rerank/request_limit.py": "the process-wide bound on model requests",
    "graphiti_llm_rerank/request_waves.py": "holding back requests once every one in flight timed out",
    "graphiti_llm_rerank/score_cache.py": "the score cache",
    "graphiti_llm_rerank/score_parsing.py": "the yes/no probability read from the answer's logprobs",
    "graph/similarity.py": "the embedder's cosine, the third signal",
    "graphiti_llm_rerank/strategies/strategy_prompts.py": "passages cut to RERANKER_MAX_DOCUMENT_CHARS",
    "graphiti_llm_rerank/types.py": "the strategy result type",
}


def app_module(filename: str) -> str | None:
    path = Path(filename)
    if path.is_relative_to(APP):
        module = path.relative_to(APP).as_posix()
    elif path.is_relative_to(PACKAGE_ROOT):
        module = path.relative_to(PACKAGE_ROOT).as_posix()
    else:
        return None
    return module if module.split("/")[0] in TRACED_PACKAGES else None


def modules_run_by(request) -> tuple[object, set[str]]:
    """`request()`'s result, and the traced app modules whose functions it called, on this thread and
    on the graph loop's."""
    seen: set[str] = set()

    def profile(frame, event, arg):
        if event == "call" and IN_TRACED_REQUEST.get():
            seen.add(frame.f_code.co_filename)

    async def set_loop_profile(function):
        sys.setprofile(function)

    run_on_loop(set_loop_profile(profile))
    token = IN_TRACED_REQUEST.set(True)
    sys.setprofile(profile)
    try:
        result = request()
    finally:
        sys.setprofile(None)
        IN_TRACED_REQUEST.reset(token)
        run_on_loop(set_loop_profile(None))
    return result, {module for module in map(app_module, seen) if module is not None}


def test_a_reranked_search_runs_the_trail_and_its_support_only(backend, scripted_llm):
    gid = unique_graph_id()
    GraphitiAdapter().graph.create(gid)
    GraphitiAdapter().graph.import_facts(gid, WATER_FACTS)
    scripted_llm.responder = judge(lambda query, passage: 0.9 if "reservoir" in passage else 0.2)
    _, client = backend(RERANKER_PROVIDER="ollama", RERANKER_BASE_URL=scripted_llm.base_url,
                        RERANKER_MODEL="judge-model", RERANKER_SCORE_MODE="logprobs", RERANKER_TIMEOUT_S=5)
    # The first request builds the runtime (Graphiti, the reranker): that is start-up, not the path.
    assert client.post(f"/api/graph/{gid}/search", json={"query": "reservoir", "limit": 4}).status_code == 200
    # A query never asked before: every passage goes to the judge (none from the score cache).
    query = f"harbor water utility reservoir town {uuid.uuid4().hex[:6]}"

    response, modules = modules_run_by(
        lambda: client.post(f"/api/graph/{gid}/search", json={"query": query, "limit": 4}))

    body = response.get_json()
    assert response.status_code == 200 and body["reranked"] is True and body["judged"] > 0, body
    assert scripted_llm.count > 0
    expected = SEARCH_TRAIL.keys() | SEARCH_SUPPORT.keys()
    assert {"joined the path": sorted(modules - expected), "left the path": sorted(expected - modules)} == {
        "joined the path": [], "left the path": []}


def test_the_lists_name_existing_modules_once():
    assert not SEARCH_TRAIL.keys() & SEARCH_SUPPORT.keys()
    assert all((APP / module).is_file() or (PACKAGE_ROOT / module).is_file()
               for module in SEARCH_TRAIL.keys() | SEARCH_SUPPORT.keys())


def readme_trail(readme: str) -> list[str]:
    """The numbered modules of the README's "How a setting reaches the answer", as the trail names them."""
    section = readme.split("## How a setting reaches the answer", 1)[1].split("\n## ", 1)[0]
    paths = re.findall(r"^\d+\. `([^`]+)`", section, re.MULTILINE)
    return [path.removeprefix("backend/app/") for path in paths]


def test_the_readme_lists_the_trail_in_order_and_it_stays_short():
    listed = readme_trail(README.read_text(encoding="utf-8"))
    assert listed[0] == SETTINGS_MODULE and sorted(listed[1:]) == sorted(SEARCH_TRAIL)
    assert len(listed) <= MAX_TRAIL and (APP / SETTINGS_MODULE).is_file()


def test_the_readme_trail_check_can_fail():
    readme = ("## How a setting reaches the answer\n\n1. `backend/app/config.py`: read.\n"
              "2. `graphiti_llm_rerank/judgement.py`: gone.\n\n## Next\n3. `not/this.py`\n")
    assert readme_trail(readme) == ["config.py", "graphiti_llm_rerank/judgement.py"]
    assert sorted(readme_trail(readme)[1:]) != sorted(SEARCH_TRAIL)
