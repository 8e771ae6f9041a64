"""`GET /v1/models/{id}` through the real demo: the openai SDK's
`models.retrieve` gets the simulated model as OpenAI returns one, and an
unknown name OpenAI's 404 `model_not_found`."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from proxy.demo.wire import MODELS
from tests.harness import running_demo


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[openai.OpenAI]:
    with running_demo(tmp_path_factory.mktemp("demo") / "output.txt") as base:
        yield openai.OpenAI(base_url=base + "/v1", api_key="demo", max_retries=0)


@pytest.mark.parametrize("name", list(MODELS))
def test_every_demo_model_is_retrieved_as_it_is_listed(client: openai.OpenAI, name: str) -> None:
    model = client.models.retrieve(name)
    listed = {m.id: m for m in client.models.list()}
    assert model.id == name
    assert model.object == "model"
    assert model == listed[name]
    assert (model.model_extra or {})["description"].startswith("SIMULATED")


def test_an_unknown_model_is_openais_404(client: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as caught:
        client.models.retrieve("gpt-4o")
    assert caught.value.code == "model_not_found"
    assert "demo-kimi" in caught.value.message
