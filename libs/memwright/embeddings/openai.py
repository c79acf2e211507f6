"""Any OpenAI-compatible /v1/embeddings endpoint (OpenAI, vLLM, Ollama, LiteLLM)."""

from __future__ import annotations

from openai import AsyncOpenAI


class OpenAIEmbedder:
    name = "openai"

    def __init__(self, base_url: str, model: str, api_key: str, dim: int = 0) -> None:
        self.client = AsyncOpenAI(base_url=base_url, api_key=api_key or "unused", timeout=30, max_retries=2)
        self.model = model
        self.dim = dim  # 0 until probed

    async def embed(self, texts: list[str]) -> list[list[float]]:
        response = await self.client.embeddings.create(model=self.model, input=texts)
        return [d.embedding for d in sorted(response.data, key=lambda d: d.index)]

    async def probe_dim(self) -> int:
        """Ask the endpoint once for the size of its vectors."""
        self.dim = len((await self.embed(["dimension probe"]))[0])
        return self.dim
