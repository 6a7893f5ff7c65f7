"""What `--model` names (models.remote.ref): the reference syntax, and a repository's files grouped into models."""

import pytest

from llamalab.core.errors import ModelError
from llamalab.models.remote import ref as mr
from llamalab.models.remote.ref import HfFile, HfRepo, Ollama, RepoFile, Url


@pytest.mark.parametrize("text, want", [
    ("hf://unsloth/Qwen3-8B-GGUF/Qwen3-8B-Q4_K_M.gguf", HfFile("unsloth/Qwen3-8B-GGUF", "Qwen3-8B-Q4_K_M.gguf")),
    ("hf://unsloth/Qwen3-8B-GGUF@v2/Q8_0/Qwen3-8B-Q8_0-00001-of-00002.gguf",
     HfFile("unsloth/Qwen3-8B-GGUF", "Q8_0/Qwen3-8B-Q8_0-00001-of-00002.gguf", "v2")),
    ("hf://o/r/m.gguf@refs%2Fpr%2F1", HfFile("o/r", "m.gguf", "refs/pr/1")),
    ("hf://o/r@refs%2Fpr%2F1/m.gguf", HfFile("o/r", "m.gguf", "refs/pr/1")),
    ("hf://unsloth/Qwen3-8B-GGUF", HfRepo("unsloth/Qwen3-8B-GGUF")),
    ("hf://unsloth/Qwen3-8B-GGUF/", HfRepo("unsloth/Qwen3-8B-GGUF")),
    ("hf://unsloth/Qwen3-8B-GGUF:Q4_K_M", HfRepo("unsloth/Qwen3-8B-GGUF", quant="Q4_K_M")),
    ("hf://unsloth/Qwen3-8B-GGUF@main:q8_0", HfRepo("unsloth/Qwen3-8B-GGUF", "main", "q8_0")),
    ("https://example.org/models/m.gguf?x=1", Url("https://example.org/models/m.gguf?x=1")),
    ("ollama://llama3.2:3b", Ollama("library", "llama3.2", "3b")),
    ("ollama://qwen3", Ollama("library", "qwen3", "latest")),
    ("ollama://someone/model:q4_K_M", Ollama("someone", "model", "q4_K_M")),
])
def test_references(text, want):
    assert mr.is_reference(text)
    assert mr.parse(text) == want


@pytest.mark.parametrize("text, said", [
    ("hf://onlyowner", "needs OWNER/REPO"),
    ("hf://o/r/README.md", "is not a .gguf file"),
    ("hf://o/r/../../etc/passwd.gguf", "'.' or '..'"),
    ("hf://o/r//m.gguf", "empty"),
    ("hf://-o/r/m.gguf", "is not a repository name"),
    ("hf://o/r@bad rev/m.gguf", "is not a revision"),
    ("hf://o/r:Q4 K", "is not a quant name"),
    ("ollama://Llama3:8b", "not an ollama model name"),
    ("https:///nohost.gguf", "not a URL with a host"),
    ("https://h/a b.gguf", "spaces or control characters"),
])
def test_bad_references_say_why(text, said):
    with pytest.raises(ModelError, match=said) as e:
        mr.parse(text)
    assert e.value.tip


def test_local_paths_are_not_references():
    for text in ("~/models/m.gguf", "/abs/m.gguf", "m.gguf", "hf:/x", "ollama:x"):
        assert not mr.is_reference(text)


@pytest.mark.parametrize("name, quant", [
    ("Qwen3-8B-Q4_K_M.gguf", "Q4_K_M"), ("gemma-3-270m-it-qat-Q4_0.gguf", "Q4_0"),
    ("Llama-3.3-70B-Instruct-UD-IQ2_XXS-00001-of-00002.gguf", "UD-IQ2_XXS"), ("model-bf16.gguf", "BF16"),
    ("Q8_0/Qwen3-30B-A3B-Q8_0-00002-of-00002.gguf", "Q8_0"), ("phi-4-f16.gguf", "F16"),
    ("GLM-4.5-Air-Q2_K_L.gguf", "Q2_K_L"), ("plain-model.gguf", None),
])
def test_quant_in_a_file_name(name, quant):
    assert mr.quant_of(name) == quant


def test_a_repository_grouped_into_models():
    files = [RepoFile(".gitattributes", 1519), RepoFile("README.md", 10),
             RepoFile("M-Q4_K_M.gguf", 4_000), RepoFile("M-F16.gguf", 16_000),
             RepoFile("Q8_0/M-Q8_0-00002-of-00003.gguf", 3_000), RepoFile("Q8_0/M-Q8_0-00001-of-00003.gguf", 3_000),
             RepoFile("Q8_0/M-Q8_0-00003-of-00003.gguf", 2_000),
             RepoFile("BF16/M-BF16-00001-of-00002.gguf", 9_000),  # part 2 missing
             RepoFile("mmproj-F16.gguf", 800)]
    g = mr.group(files)
    assert [(m.quant, m.name, m.size) for m in g.models] == [("F16", "M-F16", 16_000), ("Q8_0", "M-Q8_0", 8_000),
                                                              ("Q4_K_M", "M-Q4_K_M", 4_000)]
    q8 = g.models[1]
    assert q8.split and [f.path for f in q8.files] == [f"Q8_0/M-Q8_0-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert dict(g.skipped) == {"BF16/M-BF16-00001-of-00002.gguf": "an incomplete split model: parts 1 of 2 are listed",
                               "mmproj-F16.gguf": "a vision projector (mmproj), not a model"}
    assert mr.select(g, "q8_0") is q8
    with pytest.raises(ModelError, match=r"no IQ1_S model \(its quants: F16, Q4_K_M, Q8_0\)"):
        mr.select(g, "IQ1_S")


def test_two_models_of_one_quant_are_told_apart():
    g = mr.group([RepoFile("a-Q4_K_M.gguf", 1), RepoFile("b-Q4_K_M.gguf", 2)])
    with pytest.raises(ModelError, match="2 models of Q4_K_M: b-Q4_K_M, a-Q4_K_M"):
        mr.select(g, "Q4_K_M")
    assert mr.select(g, "a-Q4_K_M").name == "a-Q4_K_M"


def test_split_names_and_safe_file_names():
    assert mr.split_name("M-Q8_0", 2, 3) == "M-Q8_0-00002-of-00003.gguf"
    assert mr.safe_name("x%2Fy.gguf") == "model.gguf" and mr.safe_name("blob") == "blob.gguf"
    assert mr.safe_name("..") == "model.gguf" and mr.safe_name("ok.gguf") == "ok.gguf"
