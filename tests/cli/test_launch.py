"""``localllm launch AGENT``: the real CLI and daemon, stand-in agents on PATH.

Each stand-in (tests/support/agent_standin.py) records what it was started with and
then talks to the daemon the way its real agent would read those settings; the
tests check each agent's documented contract, the answer that request got
(the tiny model's greedy text), and the context the daemon serves it with.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm import paths
from localllm.cli.agents import AGENTS, Launch, Setup, output_budget
from localllm.cli.launch_context import Fit, agent_model, choose, param_context, trained_context
from localllm.errors import LocalLLMError
from localllm.store.local import Store
from localllm.store.names import parse_name
from tests.support import agent_standin
from tests.support.daemon import (
    Daemon,
    cli_env,
    free_port,
    own_daemon,
    run_cli,
    start_daemon,
    stop_pid,
)
from tests.support.hubstub import HubStub
from tests.support.models import import_gguf
from tests.support.tinymodel import GREEDY, make_tiny_model
from tests.support.variants import PLAIN_TEMPLATE

# Reads ``tools`` (so the model lists the tools capability) and renders the last message.
CODER_TEMPLATE = "{% if tools %}{% endif %}{{ messages[-1]['content'] }}"
ANSWER = GREEDY["hello"]  # what the tiny model says to "hello"
# What a user already has in their home: launch must leave every byte of it alone.
USER_FILES = {
    ".claude/settings.json": '{"env": {"ANTHROPIC_MODEL": "mine"}}\n',
    ".codex/config.toml": 'model = "mine"\n',
    ".config/opencode/opencode.json": '{"model": "anthropic/mine"}\n',
    ".aider.model.settings.yml": "- name: mine\n",
}


@pytest.fixture(scope="module")
def agents_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """``coder`` (tools template, trained for 128k tokens) and ``short`` (2048, no tools)."""

    def stock(tmp: Path) -> None:
        store = Store(paths.models())
        for name, template, ctx in (
            ("coder", CODER_TEMPLATE, 131072),
            ("short", PLAIN_TEMPLATE, 2048),
        ):
            # Greedy, so the answer is known whatever the agent sends; and sharp, because
            # the OpenAI-compatible routes default to temperature 1 (as Ollama's do) over
            # the model's 0: at the default sharpness one reply in ten strayed.
            gguf = make_tiny_model(
                tmp / name, chat_template=template, n_ctx_train=ctx, sharpness=40.0
            )
            import_gguf(store, parse_name(name), [gguf], params={"temperature": 0})

    # No pull in these tests may reach the real Hub: nothing answers here.
    with own_daemon(
        tmp_path_factory,
        "launch-daemon",
        stock,
        home="localllm-home",
        HF_ENDPOINT=f"http://127.0.0.1:{free_port()}",
    ) as daemon:
        yield daemon


def agent_env(base: dict[str, str], tmp: Path, *installed: str) -> dict[str, str]:
    """``base`` (a daemon's environment), with the stand-ins first on PATH and a user's home."""
    bin_dir = tmp / "bin"
    for name in installed:
        agent_standin.install(bin_dir, name)
    home = tmp / "home"
    for rel, text in USER_FILES.items():
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text(text)
    env = dict(base)
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        HOME=str(home),
        STANDIN_RECORD=str(tmp / "record.json"),
    )
    return env


def home_files(env: dict[str, str]) -> dict[str, str]:
    """The user's files under the test's home: localllm's own cache folder (the CPU check's
    verdict, written by the planner launch runs) is ours, not the user's."""
    home = Path(env["HOME"])
    return {
        str(p.relative_to(home)): p.read_text()
        for p in home.rglob("*")
        if p.is_file() and not p.relative_to(home).as_posix().startswith(".cache/localllm/")
    }


def loaded(url: str, name: str) -> dict[str, Any]:
    models = httpx.get(url + "/api/ps", trust_env=False).json()["models"]
    return next(m for m in models if m["name"] == name)


# -- each agent's contract, end to end -----------------------------------------------------
def check_claude(rec: dict[str, Any], url: str, model: str, ctx: int) -> None:
    env = rec["env"]
    # code.claude.com/docs/en/env-vars: the API root (Claude Code appends /v1/messages).
    assert env["ANTHROPIC_BASE_URL"] == url
    assert env["ANTHROPIC_AUTH_TOKEN"] == "localllm"
    assert "ANTHROPIC_API_KEY" not in env  # a real key would win, and go to the daemon
    for var in (
        "ANTHROPIC_MODEL",
        "ANTHROPIC_DEFAULT_OPUS_MODEL",
        "ANTHROPIC_DEFAULT_SONNET_MODEL",
        "ANTHROPIC_DEFAULT_HAIKU_MODEL",
        "CLAUDE_CODE_SUBAGENT_MODEL",
    ):
        assert env[var] == model, var
    # Claude Code takes no window below 100k: the floor, and compaction at 80% of ours.
    assert env["CLAUDE_CODE_AUTO_COMPACT_WINDOW"] == str(max(ctx, 100_000))
    if ctx < 100_000:
        assert env["CLAUDE_AUTOCOMPACT_PCT_OVERRIDE"] == str(max(1, 80 * ctx // 100_000))
    assert int(env["CLAUDE_CODE_MAX_OUTPUT_TOKENS"]) == output_budget(ctx) < ctx


def check_codex(rec: dict[str, Any], url: str, model: str, ctx: int) -> None:
    # developers.openai.com/codex/config-reference: -c overrides, TOML values.
    config = agent_standin.codex_config(rec["argv"])
    assert config["model_provider"] == "localllm"
    assert config["model_providers"]["localllm"] == {
        "name": "localllm",
        "base_url": url + "/v1",
        "wire_api": "responses",
    }
    assert config["model"] == model
    assert config["model_context_window"] == ctx


def check_opencode(rec: dict[str, Any], url: str, model: str, ctx: int) -> None:
    # opencode.ai/docs/config: OPENCODE_CONFIG_CONTENT, a custom openai-compatible provider.
    config = json.loads(rec["env"]["OPENCODE_CONFIG_CONTENT"])
    assert config["model"] == config["small_model"] == f"localllm/{model}"
    provider = config["provider"]["localllm"]
    assert provider["npm"] == "@ai-sdk/openai-compatible"
    assert provider["options"]["baseURL"] == url + "/v1"
    assert provider["models"][model]["limit"] == {"context": ctx, "output": output_budget(ctx)}


def check_aider(rec: dict[str, Any], url: str, model: str, ctx: int) -> None:
    # aider.chat/docs/llms/ollama.html: ollama_chat/ + OLLAMA_API_BASE; settings pin num_ctx.
    argv = rec["argv"]
    assert argv[argv.index("--model") + 1] == f"ollama_chat/{model}"
    assert rec["env"]["OLLAMA_API_BASE"] == url
    metadata = json.loads(rec["files"][argv[argv.index("--model-metadata-file") + 1]])
    assert metadata[f"ollama_chat/{model}"]["max_input_tokens"] == ctx
    assert rec["request"]["options"] == {"num_ctx": ctx}
    # Private files in a folder of their own, outside the user's home.
    folder = Path(argv[argv.index("--model-settings-file") + 1]).parent
    assert folder.name.startswith("localllm-launch-") and oct(folder.stat().st_mode)[-3:] == "700"


CHECKS = {
    "claude": check_claude,
    "codex": check_codex,
    "opencode": check_opencode,
    "aider": check_aider,
}


@pytest.mark.parametrize("agent", list(AGENTS))
def test_the_agent_reaches_the_daemon_with_a_64k_context(
    agents_daemon: Daemon, tmp_path: Path, agent: str
) -> None:
    env = agent_env(agents_daemon.env, tmp_path, agent)
    before = home_files(env)
    out = run_cli("launch", agent, "--model", "coder", "--", "--their-flag", "x", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ANSWER  # the stand-in's real request, answered
    rec = json.loads(Path(env["STANDIN_RECORD"]).read_text())
    assert rec["argv"][-2:] == ["--their-flag", "x"]  # the user's arguments come last
    CHECKS[agent](rec, agents_daemon.url, "coder-agent:64k", 65536)
    # Said what was chosen and why (the planner judged it on this machine's devices).
    assert "coder-agent:64k: coder with a 65536-token context" in out.stderr
    assert "CPU only" in out.stderr and "warning" not in out.stderr
    # The agent's request was served with that context (a request with another num_ctx
    # would have reloaded the model with it), and the derived model carries it.
    assert loaded(agents_daemon.url, "coder-agent:64k")["context_length"] == 65536
    show = httpx.post(
        agents_daemon.url + "/api/show", json={"model": "coder-agent:64k"}, trust_env=False
    ).json()
    assert param_context(show) == 65536
    assert re.search(r"^num_parallel +1$", show["parameters"], re.M), show["parameters"]
    assert home_files(env) == before  # nothing of the user's changed, nothing added


def test_the_daemon_judges_the_contexts(agents_daemon: Daemon, tmp_path: Path) -> None:
    url = agents_daemon.url + "/api/show"
    body = {"model": "coder", "fit_contexts": [65536, 4096], "options": {"num_parallel": 1}}
    fit = httpx.post(url, json=body, trust_env=False).json()["fit"]
    assert [(f["context"], f["fits"], f["on_gpu"]) for f in fit] == [
        (65536, True, True),  # no GPU to use: "on the GPUs" is as good as it gets
        (4096, True, True),
    ]
    assert all("CPU" in f["reason"] for f in fit), fit
    assert "fit" not in httpx.post(url, json={"model": "coder"}, trust_env=False).json()
    for bad in (
        {**body, "fit_contexts": list(range(1, 18))},
        {**body, "fit_contexts": [0]},
        {**body, "options": {"num_parallel": "two"}},
    ):
        assert httpx.post(url, json=bad, trust_env=False).status_code == 400, bad
    # The CLI plans nothing itself: with a store of its own that lacks the model, launch
    # still gets the daemon's verdict (the reason it prints is the daemon's planner's).
    env = agent_env(agents_daemon.env, tmp_path, "claude")
    env["LOCALLLM_HOME"] = str(tmp_path / "elsewhere")
    out = run_cli("launch", "claude", "--model", "coder", env=env)
    assert out.returncode == 0, out.stderr
    assert "coder-agent:64k: coder with a 65536-token context" in out.stderr
    assert "CPU only" in out.stderr


def test_a_model_trained_for_less_gets_its_own_limit_and_a_warning(
    agents_daemon: Daemon, tmp_path: Path
) -> None:
    env = agent_env(agents_daemon.env, tmp_path, "claude")
    out = run_cli("launch", "claude", "--model", "short", env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ANSWER
    assert "short-agent:2k: short with a 2048-token context" in out.stderr
    assert "the model's own limit is 2048 tokens" in out.stderr
    assert "has no tool calls" in out.stderr and "may be too small" in out.stderr
    rec = json.loads(Path(env["STANDIN_RECORD"]).read_text())
    check_claude(rec, agents_daemon.url, "short-agent:2k", 2048)
    assert loaded(agents_daemon.url, "short-agent:2k")["context_length"] == 2048


def test_launching_on_the_derived_model_reuses_it(agents_daemon: Daemon, tmp_path: Path) -> None:
    env = agent_env(agents_daemon.env, tmp_path, "aider")
    assert run_cli("launch", "aider", "-m", "coder", env=env).returncode == 0
    again = run_cli("launch", "aider", "-m", "coder-agent:64k", env=env)
    assert again.returncode == 0, again.stderr
    assert "coder-agent:64k: coder-agent:64k with a 65536-token context" in again.stderr
    rec = json.loads(Path(env["STANDIN_RECORD"]).read_text())
    check_aider(rec, agents_daemon.url, "coder-agent:64k", 65536)
    names = [
        m["name"]
        for m in httpx.get(agents_daemon.url + "/api/tags", trust_env=False).json()["models"]
    ]
    assert not any("agent-agent" in n for n in names)


def test_context_flag_is_loaded_as_given(agents_daemon: Daemon, tmp_path: Path) -> None:
    env = agent_env(agents_daemon.env, tmp_path, "codex")
    out = run_cli(
        "launch", "codex", "-m", "coder", "--context", "8192", "--", "exec", "hi", env=env
    )
    assert out.returncode == 0, out.stderr
    rec = json.loads(Path(env["STANDIN_RECORD"]).read_text())
    check_codex(rec, agents_daemon.url, "coder-agent:8k", 8192)
    assert rec["argv"][-2:] == ["exec", "hi"]  # -c flags first: they apply to subcommands
    assert loaded(agents_daemon.url, "coder-agent:8k")["context_length"] == 8192


@pytest.mark.parametrize("agent", list(AGENTS))
def test_a_missing_agent_is_one_line_with_its_install_command(tmp_path: Path, agent: str) -> None:
    # No daemon: the check comes before anything else is started.
    env = cli_env(free_port(), PATH=str(tmp_path / "empty"), HOME=str(tmp_path))
    out = run_cli("launch", agent, "--model", "coder", env=env)
    assert out.returncode == 1
    assert out.stderr.splitlines() == [
        f"Error: {AGENTS[agent].title} is not installed ({agent} is not on PATH); "
        f"install it with: {AGENTS[agent].install}"
    ]


def test_an_unknown_agent_or_a_non_chat_model_is_refused(
    agents_daemon: Daemon, tmp_path: Path
) -> None:
    env = agent_env(agents_daemon.env, tmp_path, "claude")
    out = run_cli("launch", "cursor", env=env)
    assert out.returncode == 1 and "unknown agent 'cursor'" in out.stderr
    missing = run_cli("launch", "claude", "--model", "no-such-model", env=env)
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1].startswith("Error: model 'no-such-model' is not in")
    assert not Path(env["STANDIN_RECORD"]).exists()  # the agent never started


def test_an_agent_that_cannot_start_is_a_one_line_error(
    agents_daemon: Daemon, tmp_path: Path
) -> None:
    env = agent_env(agents_daemon.env, tmp_path)
    broken = tmp_path / "bin" / "claude"
    broken.parent.mkdir(parents=True, exist_ok=True)
    broken.write_text("#!/nonexistent/interpreter\n")
    broken.chmod(0o755)
    out = run_cli("launch", "claude", "-m", "coder", env=env)
    assert out.returncode == 1
    assert out.stderr.splitlines()[-1] == (
        f"Error: could not start {broken}: No such file or directory"
    )


def test_list_shows_installed_agents_and_what_they_get(
    agents_daemon: Daemon, tmp_path: Path
) -> None:
    env = agent_env(agents_daemon.env, tmp_path, "claude", "aider")
    out = run_cli("launch", "--list", "--model", "coder", "--json", env=env)
    assert out.returncode == 0, out.stderr
    entries = {e["name"]: e for e in json.loads(out.stdout)}
    assert list(entries) == list(AGENTS)
    assert entries["claude"]["path"] == str(tmp_path / "bin" / "claude")
    assert entries["codex"]["installed"] is False
    assert entries["codex"]["install"] == "npm install -g @openai/codex"
    assert entries["claude"]["env"]["ANTHROPIC_MODEL"] == "coder-agent:64k"
    assert entries["claude"]["env"]["ANTHROPIC_BASE_URL"] == agents_daemon.url
    assert "-c" in entries["codex"]["argv"]
    assert entries["aider"]["files"]  # the files it would write, none written
    text = run_cli("launch", "--list", env=env).stdout
    assert f"claude      Claude Code    {tmp_path / 'bin' / 'claude'}" in text
    assert "no: npm install -g opencode-ai" in text
    assert "ANTHROPIC_MODEL=MODEL-agent:64k" in text


def test_launch_starts_the_daemon_and_pulls_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stub = HubStub(tmp_path / "hub").start()
    pid_file = paths.run_dir() / "localllm.pid"
    try:
        monkeypatch.setenv("HF_ENDPOINT", stub.url)
        # Sharp enough that sampling at the default temperature is greedy in practice.
        gguf = make_tiny_model(
            tmp_path / "agent",
            n_ctx_train=131072,
            sharpness=40.0,
            chat_template=CODER_TEMPLATE,
            name="agent-Q4_K_M.gguf",
        )
        stub.add_file("someone/Agent-GGUF", "agent-Q4_K_M.gguf", gguf.read_bytes())
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = agent_env(cli_env(port), tmp_path, "opencode")
        out = run_cli(
            "launch", "opencode", "--model", "hf.co/someone/Agent-GGUF", env=env, timeout=180
        )
        assert out.returncode == 0, out.stderr
        assert "Starting localllm daemon" in out.stderr and "success" in out.stderr
        assert out.stdout.strip() == ANSWER
        assert (
            "Agent-GGUF-agent:64k: hf.co/someone/Agent-GGUF with a 65536-token context"
            in out.stderr
        )
        rec = json.loads(Path(env["STANDIN_RECORD"]).read_text())
        check_opencode(rec, url, "Agent-GGUF-agent:64k", 65536)
        # The daemon launch started is not the agent's child (a double fork): it would
        # be a zombie under the agent if it exited first.
        assert pid_file.is_file() and int(pid_file.read_text()) not in rec["children"]
        assert rec["children"] == [], rec["children"]
        assert loaded(url, "Agent-GGUF-agent:64k")["context_length"] == 65536
    finally:
        if pid_file.is_file():
            stop_pid(int(pid_file.read_text()))
        stub.stop()


def test_a_daemon_that_wants_a_key_gets_it_from_the_agent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_API_KEY", "s3cret")
    # Sharp: codex's Responses call runs at the OpenAI routes' default temperature 1.
    gguf = make_tiny_model(
        tmp_path / "coder", chat_template=CODER_TEMPLATE, n_ctx_train=8192, sharpness=40.0
    )
    import_gguf(Store(paths.models()), parse_name("coder"), [gguf], params={"temperature": 0})
    with start_daemon(tmp_path) as d:
        env = agent_env(d.env, tmp_path, "codex")
        out = run_cli("launch", "codex", "--model", "coder", env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == ANSWER  # a request without the key is a 401
        rec = json.loads(Path(env["STANDIN_RECORD"]).read_text())
        config = agent_standin.codex_config(rec["argv"])
        assert config["model_providers"]["localllm"]["env_key"] == "LOCALLLM_API_KEY"
        assert rec["env"]["LOCALLLM_API_KEY"] == "s3cret"
        assert httpx.get(d.url + "/api/tags", trust_env=False).status_code == 401


# -- the pieces ----------------------------------------------------------------------------
def test_derived_names() -> None:
    assert agent_model("coder", 65536).display == "coder-agent:64k"
    assert agent_model("qwen2.5-coder:7b", 32768).display == "qwen2.5-coder-agent:7b-32k"
    assert agent_model("me/coder:q8", 40960).display == "me/coder-agent:q8-40k"
    assert (
        agent_model("hf.co/bartowski/Qwen-GGUF:Q4_K_M", 65536).display
        == "Qwen-GGUF-agent:Q4_K_M-64k"
    )
    assert agent_model("coder", 50000).display == "coder-agent:50000"
    # Launching on a derived model re-derives from its base's tag, never coder-agent-agent.
    assert agent_model("coder-agent:64k", 32768).display == "coder-agent:32k"
    assert agent_model("qwen-agent:7b-64k", 16384).display == "qwen-agent:7b-16k"


def test_choose_prefers_all_on_gpu_then_the_floor_then_anything_that_fits() -> None:
    def fits(full_gpu: int, any_fit: int) -> Any:
        return lambda c: Fit(c <= any_fit, c <= full_gpu, f"plan at {c}")

    assert choose(65536, 131072, fits(65536, 65536)).context == 65536
    # 64k fits only partly on the GPU, 32k fully: context first down to the floor.
    c = choose(65536, 131072, fits(32768, 65536))
    assert c.context == 32768 and c.notes() == ["reduced from 65536 to fit"]
    # Nothing at 32k+ is fully on the GPU: the largest that fits at all, >= 32k.
    assert choose(65536, 131072, fits(8192, 65536)).context == 65536
    # Below the floor only when nothing above it fits.
    assert choose(65536, 131072, fits(4096, 16384)).context == 16384
    with pytest.raises(LocalLLMError, match=r"does not fit .* 4096-token context"):
        choose(65536, 131072, fits(0, 0))
    capped = choose(65536, 2048, fits(65536, 65536))
    assert capped.context == 2048 and capped.notes() == ["the model's own limit is 2048 tokens"]
    assert choose(65536, 0, None).context == 65536  # not judged: as asked


def test_show_fields_read_for_the_context() -> None:
    show = {
        "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768},
        "parameters": "temperature 0.7\nnum_ctx 16384",
    }
    assert trained_context(show) == 32768 and param_context(show) == 16384
    assert trained_context({}) == 0 and param_context({"parameters": ""}) == 0


def test_an_inline_opencode_config_the_user_exports_is_kept_under_ours() -> None:
    launch: Launch = AGENTS["opencode"].configure(Setup("http://h:1", "m", 4096), Path("/x"))
    theirs = {"theme": "dark", "model": "anthropic/x", "provider": {"other": {"npm": "p"}}}
    env = launch.environ({"OPENCODE_CONFIG_CONTENT": json.dumps(theirs), "KEEP": "1"})
    merged = json.loads(env["OPENCODE_CONFIG_CONTENT"])
    assert merged["theme"] == "dark" and merged["model"] == "localllm/m"
    assert set(merged["provider"]) == {"other", "localllm"} and env["KEEP"] == "1"
    bad = launch.environ({"OPENCODE_CONFIG_CONTENT": "not json"})
    assert json.loads(bad["OPENCODE_CONFIG_CONTENT"])["model"] == "localllm/m"


def test_a_daemon_key_reaches_every_agent() -> None:
    setup = Setup("http://h:1", "m", 8192, api_key="s3cret")
    folder = Path("/x")
    claude = AGENTS["claude"].configure(setup, folder).environ({"ANTHROPIC_API_KEY": "sk-real"})
    assert claude["ANTHROPIC_AUTH_TOKEN"] == "s3cret" and "ANTHROPIC_API_KEY" not in claude
    codex = AGENTS["codex"].configure(setup, folder)
    config = agent_standin.codex_config(codex.argv)
    assert config["model_providers"]["localllm"]["env_key"] == "LOCALLLM_API_KEY"
    assert codex.env["LOCALLLM_API_KEY"] == "s3cret"
    opencode = json.loads(
        AGENTS["opencode"].configure(setup, folder).environ({})["OPENCODE_CONFIG_CONTENT"]
    )
    assert opencode["provider"]["localllm"]["options"]["apiKey"] == "s3cret"
    assert AGENTS["aider"].configure(setup, folder).env["OLLAMA_API_KEY"] == "s3cret"
