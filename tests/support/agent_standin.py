"""Stand-ins for the coding agents ``localllm launch`` starts: record, then ask as they would.

``install(bin_dir, name)`` writes an executable ``name`` (claude, codex, opencode,
aider) whose ``main`` records its argv, environment and the files its settings
point at into ``$STANDIN_RECORD`` (JSON), then reads its endpoint, key and model
from those settings the way the real agent does and makes one real request to
the daemon with them (the protocol that agent speaks), printing the answer's
text.  ``STANDIN_PROMPT`` is the user message.  What each real agent reads is
cited next to each reader; a setting the agent would not find fails here.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any

import httpx

REPO = Path(__file__).resolve().parents[2]


def install(bin_dir: Path, name: str) -> Path:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(
        f"#!{sys.executable}\nimport sys\nsys.path.insert(0, {str(REPO)!r})\n"
        f"from tests.support.agent_standin import main\nsys.exit(main({name!r}))\n"
    )
    path.chmod(0o755)
    return path


def _post(url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
    resp = httpx.post(url, json=body, headers=headers, timeout=120, trust_env=False)
    resp.raise_for_status()
    out: dict[str, Any] = resp.json()
    return out


def _flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


def claude(argv: list[str], env: dict[str, str], prompt: str) -> tuple[str, dict[str, Any]]:
    # Claude Code (code.claude.com/docs/en/env-vars): POST {ANTHROPIC_BASE_URL}/v1/messages,
    # "Authorization: Bearer {ANTHROPIC_AUTH_TOKEN}", model ANTHROPIC_MODEL, max_tokens up to
    # CLAUDE_CODE_MAX_OUTPUT_TOKENS; it sends no num_ctx.
    body = {
        "model": env["ANTHROPIC_MODEL"],
        "max_tokens": int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]),
        "messages": [{"role": "user", "content": prompt}],
    }
    out = _post(
        env["ANTHROPIC_BASE_URL"].rstrip("/") + "/v1/messages",
        body,
        {
            "Authorization": f"Bearer {env['ANTHROPIC_AUTH_TOKEN']}",
            "anthropic-version": "2023-06-01",
        },
    )
    return "".join(b["text"] for b in out["content"] if b["type"] == "text"), body


def codex_config(argv: list[str]) -> dict[str, Any]:
    """Codex's ``-c key=value`` overrides as it reads them: dotted keys, TOML values."""
    config: dict[str, Any] = {}
    for i, arg in enumerate(argv):
        if arg in ("-c", "--config"):
            key, _, value = argv[i + 1].partition("=")
            parsed = tomllib.loads(f"{key} = {value}")
            _merge(config, parsed)
    return config


def _merge(into: dict[str, Any], new: dict[str, Any]) -> None:
    for k, v in new.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = v


def codex(argv: list[str], env: dict[str, str], prompt: str) -> tuple[str, dict[str, Any]]:
    # Codex (developers.openai.com/codex/config-reference): the provider named by
    # model_provider, its base_url + "/responses" (wire_api "responses"), the key from the
    # variable env_key names.
    config = codex_config(argv)
    provider = config["model_providers"][config["model_provider"]]
    assert provider["wire_api"] == "responses"
    headers = {}
    if provider.get("env_key"):
        headers["Authorization"] = f"Bearer {env[provider['env_key']]}"
    body = {"model": config["model"], "input": prompt}
    out = _post(provider["base_url"].rstrip("/") + "/responses", body, headers)
    text = "".join(
        part["text"]
        for item in out["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )
    return text, body


def opencode(argv: list[str], env: dict[str, str], prompt: str) -> tuple[str, dict[str, Any]]:
    # opencode (opencode.ai/docs/config, /docs/providers): OPENCODE_CONFIG_CONTENT merged
    # last; "model" is provider/model; an @ai-sdk/openai-compatible provider posts
    # Chat Completions to options.baseURL + "/chat/completions" with options.apiKey,
    # max_tokens from the model's limit.output.
    config = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    provider_id, model = config["model"].split("/", 1)
    provider = config["provider"][provider_id]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    limit = provider["models"][model]["limit"]
    body = {
        "model": model,
        "max_tokens": limit["output"],
        "messages": [{"role": "user", "content": prompt}],
    }
    out = _post(
        provider["options"]["baseURL"].rstrip("/") + "/chat/completions",
        body,
        {"Authorization": f"Bearer {provider['options']['apiKey']}"},
    )
    return str(out["choices"][0]["message"]["content"]), body


def aider(argv: list[str], env: dict[str, str], prompt: str) -> tuple[str, dict[str, Any]]:
    # aider (aider.chat/docs/llms/ollama.html, /docs/config/adv-model-settings.html): --model
    # ollama_chat/NAME posts to {OLLAMA_API_BASE}/api/chat; the settings file (YAML) entry of
    # that name supplies extra_params, whose num_ctx replaces aider's per-request sizing.
    import yaml

    model = _flag(argv, "--model")
    settings = yaml.safe_load(Path(_flag(argv, "--model-settings-file")).read_text())
    extra = next(s for s in settings if s["name"] == model).get("extra_params", {})
    body = {
        "model": model.removeprefix("ollama_chat/"),
        "stream": False,
        "messages": [{"role": "user", "content": prompt}],
        "options": {"num_ctx": extra["num_ctx"]},
    }
    headers = (
        {"Authorization": f"Bearer {env['OLLAMA_API_KEY']}"} if env.get("OLLAMA_API_KEY") else {}
    )
    out = _post(env["OLLAMA_API_BASE"].rstrip("/") + "/api/chat", body, headers)
    return str(out["message"]["content"]), body


def _children() -> list[int]:
    """The pids whose parent is this process (Linux's /proc)."""
    me, out = str(os.getpid()), []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if stat.rpartition(")")[2].split()[1:2] == [me]:
                out.append(int(entry.name))
    return out


def main(name: str) -> int:
    argv, env = sys.argv[1:], dict(os.environ)
    record: dict[str, Any] = {"agent": name, "argv": argv, "env": env, "files": {}}
    record["children"] = _children()  # launch exec'd this process: what it inherited
    for flag in ("--model-settings-file", "--model-metadata-file"):
        if flag in argv:
            path = _flag(argv, flag)
            record["files"][path] = Path(path).read_text()
    answer, body = globals()[name](argv, env, env.get("STANDIN_PROMPT", "hello"))
    record["request"] = body
    record["answer"] = answer
    Path(env["STANDIN_RECORD"]).write_text(json.dumps(record))
    print(answer)
    return 0
