"""`python -m bench import-search` runs end to end on a small scale: the served app, a base graph, an
import with searches sent while it runs. Figures are the command's business, not this test's (they
depend on the machine); here every search answers and the import is stored."""

from __future__ import annotations

from bench.import_search import ImportSearchOptions, run


def test_a_small_import_search_run_measures_searches_during_the_import(tmp_path):
    report = run(ImportSearchOptions(facts=120, base_facts=10, baseline_searches=3, search_delay_s=0.0,
                                     interval_s=0.1), log_dir=tmp_path)

    assert report["import"]["status"] == 201
    assert report["import"]["body"]["imported"] == 120
    assert report["baseline"]["requests"] == 3 and report["baseline"]["errors"] == 0
    during = report["during_import"]
    assert during["requests"] >= 1 and during["errors"] == 0, during
    assert 0 < during["p50_ms"] <= during["p95_ms"] <= during["max_ms"]
    corrected = report["during_import_corrected"]  # the searches sent, plus those due while one waited
    assert corrected["requests"] >= during["requests"] and corrected["max_ms"] == during["max_ms"]
