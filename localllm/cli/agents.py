"""The coding agents ``localllm launch`` knows, and how each is pointed at the daemon.

One ``Agent`` per program: its executable, how to install it, the protocol it
speaks, and ``configure(setup, folder)``, which returns the argv, environment
and files that make that agent use the daemon, the model and the context in
``setup``.  Each uses only the agent's documented settings (environment
variables, ``-c`` overrides, an inline config, or files in ``folder``, a
private temporary folder); nothing here reads or writes the user's own
configuration files.  Sources for each contract are named next to it.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

# The provider name the agents' configs give the daemon.  Codex reserves
# "openai", "ollama" and "lmstudio" for its built-in providers.
PROVIDER = "localllm"
# Sent as the key when the daemon has none: the agents insist on some value, and a
# daemon without LOCALLLM_API_KEY ignores it.
NO_KEY = "localllm"


@dataclass(frozen=True)
class Setup:
    """What the agent is pointed at."""

    base_url: str  # the daemon's root URL, e.g. http://127.0.0.1:11434
    model: str  # the model name the agent asks for
    context: int  # tokens of context that model is served with
    api_key: str = ""  # LOCALLLM_API_KEY, when the daemon requires one


@dataclass
class Launch:
    """How to start one agent: arguments before the user's, environment, files."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    files: dict[Path, str] = field(default_factory=dict)
    # Variables holding a JSON object: merged over the value the user already exports.
    json_env: dict[str, dict[str, object]] = field(default_factory=dict)

    def environ(self, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` with this launch's variables set and its unset ones removed."""
        out = {k: v for k, v in base.items() if k not in self.unset}
        out.update(self.env)
        for name, ours in self.json_env.items():
            try:
                theirs = json.loads(base.get(name) or "{}")
            except ValueError:
                theirs = {}
            out[name] = json.dumps(merge(theirs, ours) if isinstance(theirs, dict) else ours)
        return out


@dataclass(frozen=True)
class Agent:
    name: str  # what the user types: localllm launch NAME
    title: str
    executable: str
    install: str  # the one command that installs it
    protocol: str  # the API it speaks to the daemon
    configure: Callable[[Setup, Path], Launch]
    tools: bool = True  # it relies on the model's tool calls
    # Also looked for outside PATH (Claude Code's own installer puts it there).
    fallbacks: tuple[str, ...] = ()

    def find(self) -> str | None:
        """The executable's path (PATH first), or None when it is not installed."""
        found = shutil.which(self.executable)
        if found:
            return found
        for candidate in self.fallbacks:
            path = Path(candidate).expanduser()
            if path.is_file() and os.access(path, os.X_OK):
                return str(path)
        return None


def output_budget(context: int) -> int:
    """Tokens an agent may ask for in one reply: a quarter of the context, 1k to 16k.

    Agents reserve this much of the window for the answer when they decide to
    compact the conversation, so it must stay well below the context.
    """
    return max(1024, min(context // 4, 16384))


def _key(setup: Setup) -> str:
    return setup.api_key or NO_KEY


# -- Claude Code ---------------------------------------------------------------------
# https://code.claude.com/docs/en/env-vars and /docs/en/model-config (LLM gateway):
# ANTHROPIC_BASE_URL is the API root (Claude Code adds /v1/messages);
# ANTHROPIC_AUTH_TOKEN is sent as "Authorization: Bearer"; ANTHROPIC_MODEL and
# ANTHROPIC_DEFAULT_{OPUS,SONNET,HAIKU}_MODEL name the model for every alias (the
# HAIKU one serves background tasks; ANTHROPIC_SMALL_FAST_MODEL is its older name);
# CLAUDE_CODE_SUBAGENT_MODEL the subagents' model; CLAUDE_CODE_AUTO_COMPACT_WINDOW
# the context in tokens that auto-compaction counts against (capped at the model's
# window; since 2.1.3xx never below 100k, which it says at every start when asked
# for less), and CLAUDE_AUTOCOMPACT_PCT_OVERRIDE the share of that window at which it
# compacts; CLAUDE_CODE_MAX_OUTPUT_TOKENS the reply limit.  A prompt that outgrows
# the context anyway gets Anthropic's "prompt is too long: N tokens > M maximum",
# from which Claude Code compacts by the difference and retries.  ANTHROPIC_API_KEY
# would win over the token and be sent to the daemon, and the
# CLAUDE_CODE_USE_{BEDROCK,VERTEX,FOUNDRY} switches would send requests elsewhere.
_CLAUDE_MODEL_VARS = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "CLAUDE_CODE_SUBAGENT_MODEL",
)


CLAUDE_MIN_WINDOW = 100_000  # Claude Code's floor for CLAUDE_CODE_AUTO_COMPACT_WINDOW
COMPACT_AT = 80  # percent of our context at which Claude Code should compact


def claude_compaction(context: int) -> dict[str, str]:
    """The variables that make Claude Code compact before ``context`` fills up: the
    window itself when Claude Code takes it, else its floor with a share of it."""
    if context >= CLAUDE_MIN_WINDOW:
        return {"CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(context)}
    share = max(1, COMPACT_AT * context // CLAUDE_MIN_WINDOW)
    return {
        "CLAUDE_CODE_AUTO_COMPACT_WINDOW": str(CLAUDE_MIN_WINDOW),
        "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": str(share),
    }


def _claude(setup: Setup, folder: Path) -> Launch:
    env = {"ANTHROPIC_BASE_URL": setup.base_url, "ANTHROPIC_AUTH_TOKEN": _key(setup)}
    env.update(dict.fromkeys(_CLAUDE_MODEL_VARS, setup.model))
    env.update(claude_compaction(setup.context))
    env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"] = str(output_budget(setup.context))
    return Launch(
        [],
        env,
        unset=(
            "ANTHROPIC_API_KEY",
            "CLAUDE_CODE_USE_BEDROCK",
            "CLAUDE_CODE_USE_VERTEX",
            "CLAUDE_CODE_USE_FOUNDRY",
        ),
    )


# -- Codex ---------------------------------------------------------------------------
# https://developers.openai.com/codex/config-reference (and codex-rs/docs/config.md):
# ``-c key=value`` overrides any config.toml key with a TOML value and wins over the
# user's files; a custom provider is a ``model_providers.<id>`` table with
# ``base_url`` (the API root including /v1) and ``wire_api = "responses"`` (the only
# one current Codex accepts), ``env_key`` names the variable holding its key;
# ``model_provider`` selects it, ``model`` the model, ``model_context_window`` the
# window Codex budgets and compacts against.  ``-c`` before a subcommand (``codex
# exec``) applies to it too, which ``-m`` would not.
def _toml(value: str) -> str:
    # A TOML basic string: JSON's escapes (\" \\ \n \uXXXX) are TOML's too.
    return json.dumps(value, ensure_ascii=True)


def _codex(setup: Setup, folder: Path) -> Launch:
    provider = (
        f"{{name = {_toml(PROVIDER)}, base_url = {_toml(setup.base_url + '/v1')}, "
        f'wire_api = "responses"'
    )
    env: dict[str, str] = {}
    if setup.api_key:
        provider += ', env_key = "LOCALLLM_API_KEY"'
        env["LOCALLLM_API_KEY"] = setup.api_key
    provider += "}"
    argv = [
        "-c",
        f"model_provider={_toml(PROVIDER)}",
        "-c",
        f"model_providers.{PROVIDER}={provider}",
        "-c",
        f"model={_toml(setup.model)}",
        "-c",
        f"model_context_window={setup.context}",
    ]
    return Launch(argv, env)


# -- opencode ------------------------------------------------------------------------
# https://opencode.ai/docs/config and /docs/providers (custom provider): configs merge,
# and OPENCODE_CONFIG_CONTENT (inline JSON) is applied last, over the global, custom
# and project files; a provider with ``"npm": "@ai-sdk/openai-compatible"`` talks
# Chat Completions to ``options.baseURL`` (the root including /v1) with
# ``options.apiKey``; each model needs ``limit.context``/``limit.output`` (without
# them a custom model's output limit is 0 and every request fails); ``model`` and
# ``small_model`` (titles, summaries) are "provider/model".
def _opencode_config(setup: Setup) -> dict[str, object]:
    model = f"{PROVIDER}/{setup.model}"
    return {
        "$schema": "https://opencode.ai/config.json",
        "model": model,
        "small_model": model,
        "provider": {
            PROVIDER: {
                "npm": "@ai-sdk/openai-compatible",
                "name": "localllm",
                "options": {"baseURL": setup.base_url + "/v1", "apiKey": _key(setup)},
                "models": {
                    setup.model: {
                        "name": setup.model,
                        "tool_call": True,
                        "limit": {"context": setup.context, "output": output_budget(setup.context)},
                    }
                },
            }
        },
    }


def merge(base: object, over: object) -> object:
    """``over`` merged into ``base`` (objects key by key, anything else replaced)."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = merge(base.get(key), value)
        return out
    return over


def _opencode(setup: Setup, folder: Path) -> Launch:
    # An inline config the user already exports keeps what it sets, under ours.
    return Launch([], json_env={"OPENCODE_CONFIG_CONTENT": _opencode_config(setup)})


# -- aider ---------------------------------------------------------------------------
# https://aider.chat/docs/llms/ollama.html and /docs/config/adv-model-settings.html:
# ``--model ollama_chat/NAME`` with OLLAMA_API_BASE (the root URL; OLLAMA_API_KEY for
# a key) talks to /api/chat.  Unless a model setting's ``extra_params`` holds
# ``num_ctx``, aider sends num_ctx = 1.25 x the prompt + 8k with every request
# (aider/models.py, send_completion), and each new value would reload the model: the
# settings file (``--model-settings-file``, YAML, a list of settings by ``name``; JSON
# is YAML) pins it to our context.  ``--model-metadata-file`` (JSON, litellm's
# fields) tells aider the window, so it warns before a chat outgrows it.
def _aider(setup: Setup, folder: Path) -> Launch:
    name = f"ollama_chat/{setup.model}"
    settings = folder / "aider.model.settings.yml"
    metadata = folder / "aider.model.metadata.json"
    out = output_budget(setup.context)
    files = {
        settings: json.dumps([{"name": name, "extra_params": {"num_ctx": setup.context}}], indent=2)
        + "\n",
        metadata: json.dumps(
            {
                name: {
                    "max_input_tokens": setup.context,
                    "max_output_tokens": out,
                    "max_tokens": out,
                    "input_cost_per_token": 0.0,
                    "output_cost_per_token": 0.0,
                    "litellm_provider": "ollama_chat",
                    "mode": "chat",
                }
            },
            indent=2,
        )
        + "\n",
    }
    env = {"OLLAMA_API_BASE": setup.base_url}
    if setup.api_key:
        env["OLLAMA_API_KEY"] = setup.api_key
    argv = [
        "--model",
        name,
        "--model-settings-file",
        str(settings),
        "--model-metadata-file",
        str(metadata),
    ]
    return Launch(argv, env, files=files)


AGENTS: dict[str, Agent] = {
    a.name: a
    for a in (
        Agent(
            "claude",
            "Claude Code",
            "claude",
            "npm install -g @anthropic-ai/claude-code",
            "Anthropic Messages (/v1/messages)",
            _claude,
            fallbacks=("~/.claude/local/claude",),
        ),
        Agent(
            "codex",
            "Codex",
            "codex",
            "npm install -g @openai/codex",
            "OpenAI Responses (/v1/responses)",
            _codex,
        ),
        Agent(
            "opencode",
            "opencode",
            "opencode",
            "npm install -g opencode-ai",
            "OpenAI Chat Completions (/v1/chat/completions)",
            _opencode,
        ),
        Agent(
            "aider",
            "aider",
            "aider",
            "python -m pip install aider-install && aider-install",
            "Ollama chat (/api/chat)",
            _aider,
            tools=False,
        ),
    )
}
