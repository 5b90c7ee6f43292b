"""RerankerConfig: defaults that work with a local Ollama, refused values named, an app's prefixed settings."""

from __future__ import annotations

import dataclasses

import pytest

from graphiti_llm_rerank import OllamaReranker, RerankerConfig


def test_the_defaults_build_a_reranker_without_any_io():
    reranker = OllamaReranker()
    assert reranker.judge.base_url == "http://localhost:11434/v1" and reranker.judge.model == "qwen2.5:3b"
    assert reranker.deadline_s == 120.0 and reranker.context_tokens == 8192
    assert type(reranker.strategy).__name__ == "PointwiseStrategy"


def test_a_config_reaches_the_judge_the_strategy_and_the_guard():
    config = RerankerConfig(base_url="http://127.0.0.1:9/v1", model="m", api_key="secret", strategy="listwise",
                            timeout_s=2.5, deadline_s=7.0, breaker_threshold=5, max_document_chars=300)
    reranker = OllamaReranker(config)
    assert (reranker.judge.model, reranker.judge.timeout_s, reranker.deadline_s) == ("m", 2.5, 7.0)
    assert reranker.breaker.threshold == 5 and type(reranker.strategy).__name__ == "ListwiseStrategy"
    assert "secret" not in repr(reranker) and "secret" not in repr(config)


@pytest.mark.parametrize("field, value", [("strategy", "bubble"), ("fusion", "max"), ("provider", "olama"),
                                          ("score_mode", "vibes"), ("api_style", "soap")])
def test_an_unknown_choice_is_refused_with_the_allowed_values(field, value):
    with pytest.raises(ValueError) as error:
        RerankerConfig(**{field: value})
    assert repr(value) in str(error.value) and str(RerankerConfig.ALLOWED[field]) in str(error.value)


def test_an_apps_prefixed_settings_become_the_config():
    @dataclasses.dataclass
    class AppSettings:
        reranker_model: str = "judge"
        reranker_strategy: str = "pairwise"
        reranker_pairwise_passes: int = 3
        unrelated: str = "x"

    config = RerankerConfig.from_prefixed(AppSettings())
    assert (config.model, config.strategy, config.pairwise_passes) == ("judge", "pairwise", 3)
    assert config.base_url == RerankerConfig.base_url  # a field the settings lack keeps its default
    assert RerankerConfig.from_prefixed(config) is config
