"""Settings: each parses its default, a typical value and refuses a malformed one;
the shared KV-type and flash-attention parsers; config.py is the only reader."""

from __future__ import annotations

import ast
import logging
import math
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest

from localllm import config
from localllm.runner.messages import LoadOptions
from localllm.scheduler.estimate import KV_BLOCKS, QUANTIZED_KV
from localllm.scheduler.plan_types import PlanOptions

PACKAGE = Path(config.__file__).resolve().parent

# name -> (a typical value, what it parses to, a malformed value or None where any
# text is valid).  A new setting must be added here: see test_every_setting_is_covered.
CASES: dict[str, tuple[str, Any, str | None]] = {
    "LOCALLLM_HOST": ("0.0.0.0:8080", ("0.0.0.0", 8080), "localhost:99999"),
    "LOCALLLM_HOME": ("/srv/localllm", "/srv/localllm", None),
    "LOCALLLM_MODELS": ("/srv/models", "/srv/models", None),
    "LOCALLLM_ORIGINS": ("http://a.test, app://b", ["http://a.test", "app://b"], None),
    "LOCALLLM_MCP_ALLOW": ("http://127.0.0.1:8931/", ["http://127.0.0.1:8931/"], None),
    "LOCALLLM_KEEP_ALIVE": ("1h30m", 5400.0, "5 minutes"),
    "LOCALLLM_NUM_PARALLEL": ("2", 2, "-1"),
    "LOCALLLM_MAX_LOADED_MODELS": ("5", 5, "many"),
    "LOCALLLM_MAX_QUEUE": ("64", 64, "1e3"),
    "LOCALLLM_CONTEXT_LENGTH": ("8192", 8192, "8k"),
    "LOCALLLM_FLASH_ATTENTION": ("On", "on", "sometimes"),
    "LOCALLLM_KV_CACHE_TYPE": ("Q8_0", "q8_0", "q5_1"),
    "LOCALLLM_LOAD_TIMEOUT": ("10m", 600.0, "soon"),
    "LOCALLLM_RUNNER_TIMEOUT": ("2s", 2.0, "later"),
    "LOCALLLM_GPU_OVERHEAD": ("1GiB", 1 << 30, "-5"),
    "LOCALLLM_SCHED_SPREAD": ("true", True, "maybe"),
    "LOCALLLM_NOPRUNE": ("1", True, "2"),
    "LOCALLLM_DRAFT_GATE": ("false", False, "sometimes"),
    "LOCALLLM_DEBUG": ("yes", 1, "verbose"),
    "LOCALLLM_NOHISTORY": ("1", True, "maybe"),
    "LOCALLLM_NO_HINTS": ("yes", True, "sometimes"),
    "LOCALLLM_LLM_LIBRARY": ("cuda_v12", "cuda", "opencl"),
    "LOCALLLM_CPU_REPACK": ("Off", "off", "amx"),
    "LOCALLLM_API_KEY": ("s3cret", "s3cret", None),
    "LOCALLLM_API_KEYS_FILE": ("/etc/localllm/keys", "/etc/localllm/keys", None),
    "LOCALLLM_TLS_CERT": ("/etc/localllm/server.pem", "/etc/localllm/server.pem", None),
    "LOCALLLM_TLS_KEY": ("/etc/localllm/server.key", "/etc/localllm/server.key", None),
    "LOCALLLM_TLS_CA": ("/etc/localllm/ca.pem", "/etc/localllm/ca.pem", None),
    "LOCALLLM_SHUTDOWN_GRACE": ("5s", 5.0, "5x"),
    "LOCALLLM_NUM_THREAD": ("8", 8, "eight"),
    "LOCALLLM_ALLOWED_PATHS": ("/a,/b", ["/a", "/b"], None),
    "LOCALLLM_MAX_BODY": ("64MiB", 64 << 20, "64 parsecs"),
    "LOCALLLM_MAX_BLOB_SIZE": ("200G", 200 << 30, "big"),
    "LOCALLLM_MIN_FREE_DISK": ("1GiB", 1 << 30, "lots"),
    "LOCALLLM_MAX_DOWNLOAD_RATE": ("5M", 5 << 20, "fast"),
    "LOCALLLM_LOG_FORMAT": ("JSON", "json", "xml"),
    "LOCALLLM_BACKENDS": ("/opt/backends", "/opt/backends", None),
    "LOCALLLM_CACHE": ("/var/cache/ll", "/var/cache/ll", None),
    "LOCALLLM_DEBUG_REQUESTS": ("/tmp/refused", "/tmp/refused", None),
    "LOCALLLM_CATALOG_REPO": ("someone/catalog", "someone/catalog", "../catalog"),
    "LOCALLLM_BACKENDS_REPO": ("someone/packs", "someone/packs", "packs"),
    "LOCALLLM_OLLAMA_REGISTRY": ("http://10.0.0.5:5000/", "http://10.0.0.5:5000", "ftp://x"),
    "LOCALLLM_RPC_WORKERS": ("10.0.0.2:50052", ["10.0.0.2:50052"], None),
    "LOCALLLM_LLAMA_PREFIX": ("/opt/llama", "/opt/llama", None),
    "LOCALLLM_CORE_CMAKE_ARGS": ("-DGGML_NATIVE=OFF", "-DGGML_NATIVE=OFF", None),
    "LOCALLLM_FETCH_IMAGE_URLS": ("1", "public", "sometimes"),
    "LOCALLLM_STEP_BUDGET": ("128", config.StepBudget(tokens=128), "-3"),
    "LOCALLLM_PROMPT_CACHE": ("2GiB", 2 << 30, "plenty"),
    "LOCALLLM_PROMPT_CACHE_DISK": ("10GiB", 10 << 30, "lots"),
    "LOCALLLM_MAX_REQUEST_PIXELS": ("64_000_000", 64_000_000, "0"),
    "LOCALLLM_RESPONSES_RETENTION": ("1h", 3600.0, "soon"),
    "LOCALLLM_RESPONSES_MAX_SIZE": ("64MiB", 64 << 20, "big"),
    "LOCALLLM_RUNNER_ENGINE": (
        "tests.support.fake_engine:FakeEngine",
        "tests.support.fake_engine:FakeEngine",
        "tests.support.fake_engine",
    ),
}
SETTINGS = {s.name: s for s in config.REGISTRY}


def test_every_setting_is_covered() -> None:
    assert set(CASES) == set(SETTINGS)
    assert len(SETTINGS) == len(config.REGISTRY)  # no name registered twice


@pytest.mark.parametrize("name", sorted(CASES))
def test_unset_or_blank_gives_the_default(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    setting = SETTINGS[name]
    monkeypatch.delenv(name, raising=False)
    assert setting.get() == setting.default
    monkeypatch.setenv(name, "  ")
    assert setting.get() == setting.default


@pytest.mark.parametrize("name", sorted(CASES))
def test_default_is_what_its_parser_would_give(name: str) -> None:
    # Defaults are written as parsed values; where a text form of the default exists,
    # parsing it must give the same value (so the docs' default is a valid setting).
    setting = SETTINGS[name]
    default = setting.default
    if isinstance(default, (str, bool, int, float)) and default != "":
        text = str(default).lower() if isinstance(default, bool) else str(default)
        assert setting.parse(text) == default


@pytest.mark.parametrize("name", sorted(CASES))
def test_typical_value(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    raw, want, _ = CASES[name]
    monkeypatch.setenv(name, raw)
    assert SETTINGS[name].get() == want


@pytest.mark.parametrize("name", sorted(n for n, (_, _, bad) in CASES.items() if bad is not None))
def test_malformed_value_warns_and_falls_back(
    name: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bad = CASES[name][2]
    assert bad is not None
    monkeypatch.setenv(name, bad)
    with caplog.at_level(logging.WARNING, logger="localllm.config"):
        assert SETTINGS[name].get() == SETTINGS[name].default
    assert any(name in r.getMessage() for r in caplog.records)


# -- KV cache type and flash attention: one parser each -----------------------------


def test_kv_types_are_one_list() -> None:
    assert config.KV_TYPES == ("f16", "q8_0", "q4_0", "f32")
    # The runner's LoadOptions, the planner's block sizes and the setting agree.
    hints = get_type_hints(LoadOptions)
    assert get_args(hints["kv_type"]) == config.KV_TYPES
    assert set(KV_BLOCKS) == set(config.KV_TYPES)
    assert QUANTIZED_KV == {"q8_0", "q4_0"}
    assert get_args(hints["flash_attn"]) == config.FLASH_ATTENTION_VALUES


@pytest.mark.parametrize(
    ("raw", "want"), [("f16", "f16"), ("Q8_0", "q8_0"), (" q4_0 ", "q4_0"), ("F32", "f32")]
)
def test_parse_kv_type(raw: str, want: str) -> None:
    assert config.parse_kv_type(raw) == want


@pytest.mark.parametrize("raw", ["", "q5_1", "bf16", "iq4_nl", "q8", "f1"])
def test_parse_kv_type_refuses(raw: str) -> None:
    with pytest.raises(ValueError, match="f16, q8_0, q4_0, f32"):
        config.parse_kv_type(raw)


@pytest.mark.parametrize(
    ("raw", "want"),
    [
        ("auto", "auto"),
        ("AUTO", "auto"),
        ("on", "on"),
        ("1", "on"),
        ("true", "on"),
        ("yes", "on"),
        ("off", "off"),
        ("0", "off"),
        ("False", "off"),
        ("no", "off"),
    ],
)
def test_parse_flash_attention(raw: str, want: str) -> None:
    assert config.parse_flash_attention(raw) == want


@pytest.mark.parametrize("raw", ["", "enabled", "2", "onn"])
def test_parse_flash_attention_refuses(raw: str) -> None:
    with pytest.raises(ValueError, match="on, off or auto"):
        config.parse_flash_attention(raw)


def test_plan_options_use_the_same_parsers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_KV_CACHE_TYPE", "Q4_0")
    monkeypatch.setenv("LOCALLLM_FLASH_ATTENTION", "no")
    o = PlanOptions.from_config()
    assert (o.kv_type, o.flash_attention) == ("q4_0", "off")
    monkeypatch.setenv("LOCALLLM_KV_CACHE_TYPE", "q5_1")  # not offered: the default
    monkeypatch.setenv("LOCALLLM_FLASH_ATTENTION", "sometimes")
    o = PlanOptions.from_config()
    assert (o.kv_type, o.flash_attention) == ("f16", "auto")
    o = PlanOptions.from_load(LoadOptions(kv_type="q8_0", flash_attn="on"))
    assert (o.kv_type, o.flash_attention) == ("q8_0", "on")
    with pytest.raises(ValueError):
        PlanOptions.from_load(LoadOptions(kv_type="bf16"))  # type: ignore[arg-type]


def test_cpu_repack_reaches_the_runner_and_the_planner(monkeypatch: pytest.MonkeyPatch) -> None:
    # The daemon builds LoadOptions (sent to the runner) and PlanOptions from one value.
    assert get_args(get_type_hints(LoadOptions)["cpu_repack"]) == config.CPU_REPACK_VALUES
    assert LoadOptions().cpu_repack == "auto" == PlanOptions.from_config().cpu_repack
    monkeypatch.setenv("LOCALLLM_CPU_REPACK", "0")
    load = LoadOptions()
    assert load.cpu_repack == "off" == PlanOptions.from_load(load).cpu_repack
    assert PlanOptions.from_load(LoadOptions(cpu_repack="on")).cpu_repack == "on"


# -- LOCALLLM_MAX_LOADED_MODELS -----------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "gpus", "want"),
    [
        ("", 0, 3),
        ("0", 0, 3),
        ("", 1, 3),
        ("", 2, 6),
        ("0", 4, 12),
        ("5", 0, 5),
        ("5", 4, 5),
    ],
)
def test_max_loaded_models(
    setting: str, gpus: int, want: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOCALLLM_MAX_LOADED_MODELS", setting)
    assert config.max_loaded_models(gpus) == want


def test_daemon_scheduler_counts_gpus_only_when_a_second_model_loads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from localllm.hardware import detect as detect_mod
    from localllm.server.app import default_scheduler

    calls: list[int] = []

    class FakeHardware:
        gpus = (object(), object())

    def fake_detect(*_: Any, **__: Any) -> FakeHardware:
        calls.append(1)
        return FakeHardware()

    monkeypatch.setattr(detect_mod, "detect", fake_detect)
    monkeypatch.setenv("LOCALLLM_MAX_LOADED_MODELS", "0")
    sched = default_scheduler()
    assert sched.max_loaded is None and calls == []  # nothing probed at start
    placement = object()
    monkeypatch.setattr(sched, "_plan", lambda *_: placement)
    assert sched._place(None, None, []) == (placement, 1)  # type: ignore[arg-type]
    assert calls == []  # one model alone: no limit needed
    assert sched._place(None, None, [object()]) == (placement, 6)  # type: ignore[arg-type,list-item]
    assert sched._place(None, None, [object()]) == (placement, 6)  # type: ignore[arg-type,list-item]
    assert calls == [1] and sched.max_loaded == 6

    monkeypatch.setenv("LOCALLLM_MAX_LOADED_MODELS", "2")
    assert default_scheduler().max_loaded == 2


# -- config.py is the only reader ---------------------------------------------------


def _env_reads(tree: ast.Module) -> list[tuple[int, str | None]]:
    """(line, key) of each read of one environment variable; key None = not a literal."""
    consts: dict[str, str] = {}
    # Bare names count only when imported from os (a parameter called ``environ``,
    # like cli/service.py's mapping of every LOCALLLM_* variable, is not a read).
    from_os = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "os"
        for alias in node.names
    }
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    consts[target.id] = node.value.value

    def key(expr: ast.expr) -> str | None:
        if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
            return expr.value
        if isinstance(expr, ast.Name):
            return consts.get(expr.id)
        return None

    def is_environ(expr: ast.expr) -> bool:
        return (isinstance(expr, ast.Attribute) and expr.attr == "environ") or (
            isinstance(expr, ast.Name) and expr.id == "environ" and "environ" in from_os
        )

    out: list[tuple[int, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            getenv = (isinstance(func, ast.Attribute) and func.attr == "getenv") or (
                isinstance(func, ast.Name) and func.id == "getenv" and "getenv" in from_os
            )
            environ_get = (
                isinstance(func, ast.Attribute)
                and func.attr in ("get", "pop")
                and is_environ(func.value)
            )
            if getenv or environ_get:
                out.append((node.lineno, key(node.args[0])))
        elif (
            isinstance(node, ast.Subscript)
            and isinstance(node.ctx, ast.Load)
            and is_environ(node.value)
        ):
            out.append((node.lineno, key(node.slice)))
        elif (
            isinstance(node, ast.Compare)
            and len(node.ops) == 1
            and isinstance(node.ops[0], (ast.In, ast.NotIn))
            and is_environ(node.comparators[0])
        ):
            out.append((node.lineno, key(node.left)))
    return out


def test_env_read_finder_sees_the_usual_spellings() -> None:
    src = (
        'import os\nENV = "LOCALLLM_X"\n'
        'a = os.environ.get("LOCALLLM_A")\nb = os.getenv("LOCALLLM_B")\n'
        'c = os.environ["LOCALLLM_C"]\nd = os.environ.get(ENV)\ne = "LOCALLLM_E" in os.environ\n'
        'f = os.environ.get(name)\nos.environ["LOCALLLM_W"] = "1"\ng = dict(os.environ)\n'
        'from os import getenv\nh = getenv("LOCALLLM_H")\n'
        'def copy(environ):\n    return environ["LOCALLLM_I"]\n'
    )
    assert _env_reads(ast.parse(src)) == [
        (3, "LOCALLLM_A"),
        (4, "LOCALLLM_B"),
        (5, "LOCALLLM_C"),
        (6, "LOCALLLM_X"),
        (7, "LOCALLLM_E"),
        (8, None),
        (12, "LOCALLLM_H"),
    ]


def test_only_config_reads_localllm_settings() -> None:
    # children.py copies the whole environment for child processes, and
    # cli/service.py every LOCALLLM_* variable into a service file (not reads of
    # one setting).  native/build_ffi.py, outside the package, reads
    # LOCALLLM_LLAMA_PREFIX at build time when localllm cannot be imported.
    # config_setting.py holds Setting, the reader each area's settings module builds on.
    allowed = {PACKAGE / "config.py", PACKAGE / "config_setting.py", PACKAGE / "children.py"}
    offenders = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path in allowed:
            continue
        for line, name in _env_reads(ast.parse(path.read_text(), str(path))):
            # A non-literal key could be a LOCALLLM_* name: it is refused too.
            if name is None or name.startswith("LOCALLLM_"):
                offenders.append(
                    f"{path.relative_to(PACKAGE.parent)}:{line} reads {name or 'a computed name'}"
                )
    assert not offenders, "read settings through localllm.config:\n" + "\n".join(offenders)


def test_setting_reads_at_call_time_not_import(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCALLLM_KEEP_ALIVE", "-1")
    assert math.isinf(config.KEEP_ALIVE.get())
    monkeypatch.setenv("LOCALLLM_KEEP_ALIVE", "2m")
    assert config.KEEP_ALIVE.get() == 120.0


def test_ollama_variables_are_fallbacks_and_ours_win(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LOCALLLM_KEEP_ALIVE", raising=False)
    monkeypatch.setenv("OLLAMA_KEEP_ALIVE", "10m")
    monkeypatch.setenv("OLLAMA_HOST", "0.0.0.0:11500")
    monkeypatch.delenv("LOCALLLM_HOST", raising=False)
    assert config.KEEP_ALIVE.get() == 600.0
    assert config.HOST.get() == ("0.0.0.0", 11500)
    assert ("LOCALLLM_KEEP_ALIVE", "OLLAMA_KEEP_ALIVE") in config.ollama_fallbacks()
    monkeypatch.setenv("LOCALLLM_KEEP_ALIVE", "1m")
    assert config.KEEP_ALIVE.get() == 60.0
    assert ("LOCALLLM_KEEP_ALIVE", "OLLAMA_KEEP_ALIVE") not in config.ollama_fallbacks()
    # Only the documented set: Ollama's names for things we do not share are not read.
    assert {s.ollama for s in config.REGISTRY if s.ollama} == {
        "OLLAMA_HOST",
        "OLLAMA_MODELS",
        "OLLAMA_KEEP_ALIVE",
        "OLLAMA_NUM_PARALLEL",
        "OLLAMA_MAX_LOADED_MODELS",
        "OLLAMA_ORIGINS",
        "OLLAMA_CONTEXT_LENGTH",
        "OLLAMA_FLASH_ATTENTION",
        "OLLAMA_KV_CACHE_TYPE",
        "OLLAMA_MAX_QUEUE",
        "OLLAMA_LOAD_TIMEOUT",
        "OLLAMA_GPU_OVERHEAD",
        "OLLAMA_SCHED_SPREAD",
        "OLLAMA_NOPRUNE",
        "OLLAMA_DEBUG",
        "OLLAMA_NOHISTORY",
        "OLLAMA_LLM_LIBRARY",
    }


def test_doctor_says_which_ollama_variables_are_used(monkeypatch: pytest.MonkeyPatch) -> None:
    from localllm.cli.doctor import collect

    monkeypatch.setenv("OLLAMA_NUM_PARALLEL", "2")
    monkeypatch.delenv("LOCALLLM_NUM_PARALLEL", raising=False)
    report = collect()
    assert {"setting": "LOCALLLM_NUM_PARALLEL", "from": "OLLAMA_NUM_PARALLEL"} in report[
        "ollama_settings"
    ]


def test_step_budget_takes_tokens_or_milliseconds(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in (
        ("0", config.StepBudget()),
        ("256", config.StepBudget(tokens=256)),
        ("250ms", config.StepBudget(ms=250.0)),
        (" 1.5MS", config.StepBudget(ms=1.5)),
    ):
        monkeypatch.setenv("LOCALLLM_STEP_BUDGET", raw)
        assert config.STEP_BUDGET.get() == want
    for bad in ("0ms", "-5ms", "fast", "ms"):
        monkeypatch.setenv("LOCALLLM_STEP_BUDGET", bad)
        assert config.STEP_BUDGET.get() == config.StepBudget()  # warned, default kept
    assert str(config.StepBudget(ms=250.0)) == "250ms" and str(config.StepBudget()) == "0"


def test_prompt_cache_is_auto_a_size_or_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for raw, want in (("auto", -1), ("AUTO", -1), ("0", 0), ("512MiB", 512 << 20)):
        monkeypatch.setenv("LOCALLLM_PROMPT_CACHE", raw)
        assert config.PROMPT_CACHE.get() == want
