"""The package's tests run from backend/ (`make test`): the real local model server comes from the
backend's test support, which starts llama-server once for every session on this machine."""

pytest_plugins = ["tests.support.local_llm_fixtures"]
