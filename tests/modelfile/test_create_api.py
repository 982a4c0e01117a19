"""``/api/create`` through the ASGI app: statuses, layers, inheritance, and refusals.

Every refusal is checked to leave the store as it was: no manifest, so no
half-made model (blobs alone are content-addressed and collected later).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.modelfile.parser import parse
from localllm.store.local import Store
from localllm.store.manifests import Media
from localllm.store.names import parse_name
from tests.support.create_api import create, upload
from tests.support.routes import ndjson
from tests.support.tinylora import make_tiny_lora
from tests.support.tinymodel import make_tiny_model

pytestmark = pytest.mark.anyio


FULL = {
    "template": "{{ range .Messages }}{{ .Content }}{{ end }}q",
    "system": "You are terse.",
    "parameters": {"temperature": 0.5, "stop": ["<|end|>", "User:"], "num_ctx": "256"},
    "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}],
    "license": ["MIT", "Apache"],
}


async def test_create_from_uploaded_file_streams_statuses_and_writes_layers(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path
) -> None:
    digest = await upload(client, tiny_gguf)
    r = await create(client, {"model": "mine", "files": {"tiny.gguf": digest}, **FULL})
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("application/x-ndjson")
    statuses = [e["status"] for e in ndjson(r.text)]
    assert statuses[0] == "parsing GGUF"
    assert f"using existing layer {digest}" in statuses
    assert sum(s.startswith("creating new layer sha256:") for s in statuses) == 6
    assert statuses[-2:] == ["writing manifest", "success"]

    entry = store.get(parse_name("mine"))
    types = [ly.media_type for ly in entry.manifest.layers]
    assert types == [
        Media.MODEL,
        Media.TEMPLATE,
        Media.SYSTEM,
        Media.PARAMS,
        Media.MESSAGES,
        Media.LICENSE,
        Media.LICENSE,
    ]
    assert store.params(entry) == {"temperature": 0.5, "stop": ["<|end|>", "User:"], "num_ctx": 256}
    assert store.read_json_layer(entry, Media.MESSAGES) == FULL["messages"]
    assert store.config_json(entry)["model_family"] == "llama"

    # Again: every layer is reused.
    r = await create(client, {"model": "mine2", "files": {"tiny.gguf": digest}, **FULL})
    statuses = [e["status"] for e in ndjson(r.text)]
    assert not any(s.startswith("creating new layer") for s in statuses)


async def test_show_modelfile_round_trips(client: httpx.AsyncClient, tiny_gguf: Path) -> None:
    digest = await upload(client, tiny_gguf)
    await create(client, {"model": "mine", "files": {"tiny.gguf": digest}, **FULL})
    shown = (await client.post("/api/show", json={"model": "mine"})).json()
    mf = parse(shown["modelfile"])
    assert mf.template == FULL["template"] and mf.system == FULL["system"]
    assert mf.parameters == {"temperature": 0.5, "stop": ["<|end|>", "User:"], "num_ctx": 256}
    assert mf.messages == FULL["messages"] and mf.licenses == FULL["license"]
    assert mf.from_.endswith("sha256-" + digest.split(":")[1])
    # FROM the blob path is allowed (inside the store): re-creating gives the same manifest.
    body = {
        "model": "copy",
        "from": mf.from_,
        "template": mf.template,
        "system": mf.system,
        "parameters": mf.parameters,
        "messages": mf.messages,
        "license": mf.licenses,
    }
    assert (await create(client, {**body, "stream": False})).json() == {"status": "success"}
    again = (await client.post("/api/show", json={"model": "copy"})).json()
    assert again["modelfile"].replace("copy:latest", "mine:latest") == shown["modelfile"]


async def test_from_existing_model_inherits_and_overrides(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path
) -> None:
    digest = await upload(client, tiny_gguf)
    await create(client, {"model": "base", "files": {"tiny.gguf": digest}, **FULL})
    r = await create(
        client,
        {
            "model": "child",
            "from": "base",
            "system": "Be loud.",
            "parameters": {"temperature": 0.9},
            "stream": False,
        },
    )
    assert r.json() == {"status": "success"}
    base, child = store.get(parse_name("base")), store.get(parse_name("child"))
    assert store.template(child) == FULL["template"]
    assert store.system(child) == "Be loud."
    assert store.params(child)["temperature"] == 0.9 and store.params(child)["num_ctx"] == 256
    assert store.model_paths(child) == store.model_paths(base)
    assert store.read_json_layer(child, Media.MESSAGES) == FULL["messages"]


async def test_adapter_layer_is_stored(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, tmp_path: Path
) -> None:
    model = await upload(client, tiny_gguf)
    lora = await upload(client, make_tiny_lora(tmp_path / "lora"))
    r = await create(
        client,
        {
            "model": "tuned",
            "files": {"tiny.gguf": model},
            "adapters": {"lora.gguf": lora},
            "stream": False,
        },
    )
    assert r.status_code == 200, r.text
    layers = store.get(parse_name("tuned")).manifest.by_type(Media.ADAPTER)
    assert [(ly.digest, ly.name) for ly in layers] == [(lora, "lora.gguf")]
    shown = (await client.post("/api/show", json={"model": "tuned"})).json()
    assert parse(shown["modelfile"]).adapters == [str(store.blobs.path(lora))]


async def test_from_hf_pulls_first(client: httpx.AsyncClient, store: Store, hub: Any) -> None:
    r = await create(
        client, {"model": "fromhub", "from": "hf.co/someone/Tiny-GGUF:Q8_0", "system": "hello"}
    )
    assert r.status_code == 200
    statuses = [e["status"] for e in ndjson(r.text)]
    assert statuses[0] == "pulling manifest"
    assert statuses.count("success") == 1 and statuses[-1] == "success"
    assert store.system(store.get(parse_name("fromhub"))) == "hello"
    assert store.manifests.exists(parse_name("hf.co/someone/Tiny-GGUF:Q8_0"))


async def test_quantize_runs_in_a_child_with_progress(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path
) -> None:
    digest = await upload(client, tiny_gguf)
    r = await create(client, {"model": "small", "files": {"tiny.gguf": digest}, "quantize": "Q8_0"})
    assert r.status_code == 200
    events = ndjson(r.text)
    assert events[-1] == {"status": "success"}, events[-3:]
    quant = [e for e in events if e["status"] == "quantizing F32 model to Q8_0"]
    assert quant and quant[-1]["completed"] == quant[-1]["total"] == 12
    entry = store.get(parse_name("small"))
    assert store.config_json(entry)["file_type"] == "Q8_0"
    assert entry.manifest.first(Media.MODEL).digest != digest  # type: ignore[union-attr]


def _manifests(store: Store) -> list[str]:
    return sorted(e.name.display for e in store.list())


HOSTILE = {
    "endless range": "{{ range 1000000000 }}x{{ end }}",
    "deep nesting": "{{ if 1 }}" * 200 + "{{ end }}" * 200,
    "huge output": "{{ range 100000 }}" + "y" * 100 + "{{ end }}",
    "doubling": '{{ $x := "ab" }}{{ range 40 }}{{ $x = printf "%s%s" $x $x }}{{ end }}',
    "recursion": '{{ define "r" }}{{ template "r" . }}{{ end }}{{ template "r" . }}',
    "bad syntax": "{{ if .Prompt }}unclosed",
    "jinja loop": "{% for i in range(100000000) %}x{% endfor %}",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_hostile_templates_are_refused(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, case: str
) -> None:
    digest = await upload(client, tiny_gguf)
    r = await create(
        client, {"model": "bad", "files": {"tiny.gguf": digest}, "template": HOSTILE[case]}
    )
    assert r.status_code == 400, r.text
    assert r.json()["error"].startswith("invalid TEMPLATE: ")
    assert _manifests(store) == []


@pytest.mark.parametrize(
    ("body", "status", "words"),
    [
        ({"parameters": {"nope": 1}}, 400, 'unknown parameter "nope"'),
        ({"parameters": {"num_ctx": "lots"}}, 400, "must be of type integer"),
        ({"parameters": {"top_p": 7}}, 400, "between 0 and 1"),
        ({"messages": [{"role": "robot", "content": "x"}]}, 400, "role must be one of"),
        ({"quantize": "q2_K"}, 400, 'unsupported quantization type "q2_K"'),
        ({"files": {"tiny.gguf": "sha256:" + "0" * 64}}, 400, "not found; upload it first"),
        ({"files": {"model.safetensors": "UPLOADED"}}, 400, "only GGUF files"),
        ({"files": {"x": "LICENSE_BLOB"}}, 400, "not a valid GGUF file"),
        ({"files": {}, "from": "missing-model"}, 404, 'FROM model "missing-model" not found'),
        ({"files": {}, "from": "/etc/passwd"}, 403, "outside the folders this server may read"),
        ({"files": {}, "from": "../relative.gguf"}, 400, "is relative"),
        ({"files": {}}, 400, "neither 'from' nor 'files'"),
        ({"adapters": {"a.gguf": "MODEL"}}, 400, "is not a LoRA adapter"),
        ({"adapters": {"a.gguf": "QWEN_LORA"}}, 400, 'made for a "qwen2" model'),
        ({"model": "bad name!"}, 400, "invalid"),
    ],
)
async def test_bad_requests_are_refused_without_writing(
    client: httpx.AsyncClient,
    store: Store,
    tiny_gguf: Path,
    tmp_path: Path,
    body: dict[str, Any],
    status: int,
    words: str,
) -> None:
    model = await upload(client, tiny_gguf)
    qwen = await upload(client, make_tiny_lora(tmp_path / "q", arch="qwen2"))
    text = tmp_path / "license.txt"
    text.write_text("just some text, long enough to not be a GGUF header at all")
    subst = {
        "UPLOADED": model,
        "MODEL": model,
        "QWEN_LORA": qwen,
        "LICENSE_BLOB": await upload(client, text),
    }
    full = {"model": "bad", "files": {"tiny.gguf": model}, **body}
    full = json.loads(
        json.dumps(full),
        object_hook=lambda d: {
            k: subst.get(v, v) if isinstance(v, str) else v for k, v in d.items()
        },
    )
    r = await create(client, full)
    assert r.status_code == status, r.text
    assert words in r.json()["error"]
    assert _manifests(store) == []


async def test_from_path_in_allowed_folder(
    client: httpx.AsyncClient, store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "shared-models"
    path = make_tiny_model(folder)
    r = await create(client, {"model": "x", "from": str(path), "stream": False})
    assert r.status_code == 403
    monkeypatch.setenv("LOCALLLM_ALLOWED_PATHS", f"/nonexistent,{folder}")
    r = await create(client, {"model": "x", "from": str(path), "stream": False})
    assert r.json() == {"status": "success"}
    # A symlink out of the allowed folder does not escape the check.
    (folder / "escape.gguf").symlink_to(make_tiny_model(tmp_path / "elsewhere"))
    r = await create(client, {"model": "y", "from": str(folder / "escape.gguf")})
    assert r.status_code == 403
    assert _manifests(store) == ["x:latest"]


async def test_split_files_in_order(
    client: httpx.AsyncClient, store: Store, tmp_path: Path
) -> None:
    from tests.support.tinymodel import split_paths

    parts = split_paths(make_tiny_model(tmp_path / "split", splits=3))
    files = {p.name: await upload(client, p) for p in reversed(parts)}
    r = await create(client, {"model": "split", "files": files, "stream": False})
    assert r.json() == {"status": "success"}
    layers = store.get(parse_name("split")).manifest.by_type(Media.MODEL)
    assert [ly.name for ly in layers] == [p.name for p in parts]


@pytest.mark.parametrize("field", ["system", "template", "license", "messages", "parameters"])
async def test_text_layers_over_the_read_limit_are_refused_at_create(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path, field: str
) -> None:
    from localllm.store.blobs import MAX_TEXT_LAYER

    digest = await upload(client, tiny_gguf)
    huge = "x" * (MAX_TEXT_LAYER + 1)
    value: Any = {
        "system": huge,
        "template": huge,
        "license": ["MIT", huge],
        "messages": [{"role": "user", "content": huge}],
        "parameters": {"stop": [huge]},
    }[field]
    r = await create(
        client, {"model": "big", "files": {"tiny.gguf": digest}, field: value, "stream": False}
    )
    assert r.status_code == 400, r.text[:200]
    assert "too large" in r.json()["error"]
    assert (await client.get("/api/tags")).json()["models"] == []
    # Just under the limit is stored, and show can read it back.
    if field == "system":
        fits = "y" * MAX_TEXT_LAYER
        r = await create(
            client,
            {"model": "fits", "files": {"tiny.gguf": digest}, "system": fits, "stream": False},
        )
        assert r.status_code == 200, r.text[:200]
        r = await client.post("/api/show", json={"model": "fits"})
        assert r.status_code == 200 and r.json()["system"] == fits


async def test_num_parallel_is_stored_and_shown(
    client: httpx.AsyncClient, store: Store, tiny_gguf: Path
) -> None:
    digest = await upload(client, tiny_gguf)
    r = await create(
        client,
        {
            "model": "two",
            "files": {"tiny.gguf": digest},
            "parameters": {"num_parallel": 2},
            "stream": False,
        },
    )
    assert r.json() == {"status": "success"}
    assert store.params(store.get(parse_name("two")))["num_parallel"] == 2
    shown = (await client.post("/api/show", json={"model": "two"})).json()
    assert "PARAMETER num_parallel 2" in shown["modelfile"]
    assert parse(shown["modelfile"]).parameters == {"num_parallel": 2}
    r = await create(
        client,
        {
            "model": "zero",
            "files": {"tiny.gguf": digest},
            "parameters": {"num_parallel": 0},
            "stream": False,
        },
    )
    assert r.status_code == 400 and "num_parallel" in r.json()["error"]
