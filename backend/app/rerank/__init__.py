"""LLM reranking: the shared relevance judge (`judge.LLMJudge`) and its prompts, parsing and cache."""
