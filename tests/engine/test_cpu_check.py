"""LOCALLLM_CPU_REPACK: the extra buffer types' self-test, its verdict, and loads under each mode.

On a machine whose ggml AMX kernels crash (this project's Xeon: ggml-cpu built by
GCC 12, see engine/cpu_check.py) the tests that need a broken type run; elsewhere
they skip, and the rest hold on any CPU.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from localllm.children import child_env
from localllm.engine import cpu_buffers, cpu_check
from localllm.engine.binding import native, quantize
from localllm.engine.cpu_check import Decision, Verdict, decide
from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest, SamplingParams
from tests.support.engine_steps import opts, run
from tests.support.tinymodel import expected_greedy, make_tiny_model

PROMPT = "abcdefghij"  # ten tokens with BOS: a prompt batch, where AMX uses its tiles
CRASHED = "self-test crashed: signal 4, SIGILL"


@pytest.fixture(scope="module")
def machine() -> Verdict:
    """This machine's verdict (cached per boot in the user's cache folder, as in use)."""
    from localllm.engine.binding import system_info

    names = cpu_buffers.buffer_names()
    if "AMX_INT8 = 1" in system_info() and cpu_check.AMX not in names:
        names.insert(0, cpu_check.AMX)  # an earlier load in this process took it out (auto)
    return cpu_check.verdict(names)


@pytest.fixture(scope="module")
def quantized(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The tiny model with its matrices in Q8_0 (AMX takes it) and Q4_0 (AMX and
    CPU_REPACK take it): llama.cpp's own quantizer."""
    folder = tmp_path_factory.mktemp("quant")
    src = make_tiny_model(folder, attention=True)
    out = {}
    for q in ("Q8_0", "Q4_0"):
        out[q] = folder / f"tiny-{q}.gguf"
        quantize(src, out[q], q)
    return out


# ---- the decision -------------------------------------------------------------------


def test_off_uses_none_on_uses_all_auto_leaves_out_the_broken() -> None:
    names = ["AMX", "CPU_REPACK"]
    broken = Verdict({"AMX": CRASHED, "CPU_REPACK": ""})
    assert decide("off", names, broken) == Decision(False)
    assert decide("on", names, broken) == Decision(True, (), ("AMX", "CPU_REPACK"))
    assert decide("auto", names, broken) == Decision(True, ("AMX",), ("CPU_REPACK",))
    assert decide("auto", names, Verdict({"AMX": "", "CPU_REPACK": ""})) == Decision(
        True, (), ("AMX", "CPU_REPACK")
    )
    # A ggml whose list cannot lose one type: auto turns them all off.
    assert decide("auto", names, Verdict(broken.faults, drop_works=False)) == Decision(False)


# ---- the children -------------------------------------------------------------------


def _children(
    monkeypatch: pytest.MonkeyPatch, answers: list[tuple[list[dict[str, Any]], int | None]]
) -> list[list[str]]:
    calls: list[list[str]] = []

    def child(args: list[str], timeout: float) -> tuple[list[dict[str, Any]], int | None]:
        calls.append(args)
        return answers.pop(0)

    monkeypatch.setattr(cpu_check, "_child", child)
    return calls


def test_a_crash_is_pinned_on_the_type_under_test_and_the_rest_tested_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _children(
        monkeypatch,
        [
            ([{"start": "AMX"}], -signal.SIGILL),  # died testing AMX
            ([{"start": "CPU_REPACK"}, {"name": "CPU_REPACK", "fault": ""}], 0),
            (
                [
                    {"dropped": "AMX", "rc": 1},
                    {"start": "CPU_REPACK"},
                    {"name": "CPU_REPACK", "fault": ""},
                ],
                0,
            ),
        ],
    )
    v = cpu_check.run_checks(["AMX", "CPU_REPACK"])
    assert v == Verdict({"AMX": CRASHED, "CPU_REPACK": ""}, drop_works=True, cacheable=True)
    assert calls == [
        ["--only", "AMX", "CPU_REPACK"],
        ["--only", "CPU_REPACK"],
        ["--drop", "AMX", "--only", "CPU_REPACK"],
    ]


def test_a_list_that_keeps_the_type_means_no_dropping(monkeypatch: pytest.MonkeyPatch) -> None:
    _children(
        monkeypatch,
        [
            ([{"start": "AMX"}, {"name": "AMX", "fault": "self-test: off by 1"}], 0),
            ([{"dropped": "AMX", "rc": -1}], 0),
        ],
    )
    assert cpu_check.run_checks(["AMX"]) == Verdict({"AMX": "self-test: off by 1"}, False)


def test_a_child_that_hangs_or_fails_fails_its_type_but_is_not_cached(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path))
    _children(monkeypatch, [([{"start": "AMX"}], None), ([{"dropped": "AMX", "rc": 1}], 0)])
    v = cpu_check.verdict(["AMX"])
    assert v.faults == {"AMX": "self-test did not finish in time"} and not v.cacheable
    assert not list(tmp_path.iterdir())
    # Nor is one that failed in Python rather than in a kernel.
    _children(monkeypatch, [([], 1), ([{"dropped": "AMX", "rc": 1}], 0)])
    v = cpu_check.verdict(["AMX"])
    assert v.faults == {"AMX": "self-test failed: exit status 1"} and not v.cacheable
    assert not list(tmp_path.iterdir())


def test_the_verdict_is_kept_for_this_boot_and_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("LOCALLLM_CACHE", str(tmp_path))
    runs: list[list[str]] = []

    def checks(names: list[str]) -> Verdict:
        runs.append(list(names))
        return Verdict({n: CRASHED if n == "AMX" else "" for n in names})

    monkeypatch.setattr(cpu_check, "run_checks", checks)
    first = cpu_check.verdict(["AMX", "CPU_REPACK"])
    assert cpu_check.verdict(["AMX", "CPU_REPACK"]) == first
    assert cpu_check.verdict(["CPU_REPACK"]).faults == {"CPU_REPACK": ""}  # a subset: cached
    assert runs == [["AMX", "CPU_REPACK"]]
    [saved] = tmp_path.iterdir()
    assert saved.name == f"cpu-check-{cpu_check.cache_key()}.json"
    cpu_check.verdict(["KLEIDIAI"])  # a type it has not seen: tested
    cpu_check.verdict(["AMX"], refresh=True)
    assert runs[1:] == [["KLEIDIAI"], ["AMX"]]


def test_this_machine_gets_an_answer_for_every_type(machine: Verdict) -> None:
    # Whatever this CPU offers; the types that passed in their child pass here too,
    # which shows the comparison with the plain CPU buffer agrees where kernels work.
    names = cpu_buffers.buffer_names()
    assert set(machine.faults) >= set(names)
    for i, name in enumerate(names):
        if not machine.faults[name]:
            assert cpu_check._test_buffer(i) == "", name


def test_the_self_test_refuses_what_it_cannot_make() -> None:
    ffi, lib = native()
    err = ffi.new("double *")
    n = lib.ll_cpu_extra_buft_count()
    assert lib.ll_cpu_extra_buft_selftest(n, 8, 512, 128, 1, 1, 1, err) == -1  # no such type
    assert lib.ll_cpu_extra_buft_selftest(0, 0, 512, 128, 1, 1, 1, err) == -1  # F32: no copy
    assert lib.ll_cpu_extra_buft_selftest(0, 8, 512, 128, 0, 1, 1, err) == -1  # no tokens


def _python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env({"LOCALLLM_CPU_REPACK": "on"}),
        cwd=Path(__file__).resolve().parents[2],
    )


def test_a_type_taken_out_of_the_list_is_gone_for_every_later_load() -> None:
    if not cpu_buffers.buffer_names():
        pytest.skip("this CPU backend has no extra buffer types")
    out = _python(
        "from localllm.engine import cpu_buffers\n"
        "from localllm.engine.binding import native\n"
        "_, lib = native()\n"
        "names = cpu_buffers.buffer_names()\n"
        "assert lib.ll_cpu_extra_buft_drop(names[0].encode()) == 1\n"
        "assert cpu_buffers.buffer_names() == names[1:], cpu_buffers.buffer_names()\n"
        "assert lib.ll_cpu_extra_buft_drop(names[0].encode()) == 0\n"
        "assert lib.ll_cpu_extra_buft_drop(b'NOT_A_TYPE') == 0\n"
    )
    assert out.returncode == 0, out.stderr


def test_a_crash_after_the_hint_is_armed_says_what_to_set() -> None:
    out = _python(
        "import os, signal\n"
        "from localllm.engine import cpu_check\n"
        "from localllm.engine.binding import native\n"
        "_, lib = native()\n"
        "assert lib.ll_crash_hint(cpu_check.CRASH_HINT.encode()) == 0\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n"
        "print('survived')\n"
    )
    assert out.returncode == -signal.SIGSEGV and "survived" not in out.stdout
    assert out.stderr.strip().splitlines()[-1] == cpu_check.CRASH_HINT


def test_the_daemon_quotes_the_hint_as_why_the_runner_died() -> None:
    from localllm.runner.lastwords import reason

    tail = ["llama_context: CPU compute buffer size = 0.60 MiB", cpu_check.CRASH_HINT]
    assert reason(tail) == cpu_check.CRASH_HINT
    assert "LOCALLLM_CPU_REPACK=off" in cpu_check.CRASH_HINT


# ---- loads --------------------------------------------------------------------------


def _answer(path: Path, mode: str) -> tuple[str, str]:
    """The greedy text of ``PROMPT`` and the load's log, loaded under ``mode``."""
    with Engine([str(path)], opts(cpu_repack=mode, n_threads=2)) as e:
        req = CompletionRequest("a", PROMPT, SamplingParams(temperature=0), num_predict=8)
        return run(e, req)["a"].text, e._load_log


def _buffers(log: str) -> set[str]:
    return {ln.split()[1] for ln in log.splitlines() if "model buffer size" in ln}


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0"])
def test_a_quantized_model_answers_with_repacking_off(
    quantized: dict[str, Path], quant: str
) -> None:
    text, log = _answer(quantized[quant], "off")
    assert text == expected_greedy(PROMPT, 8)
    assert _buffers(log) <= {"CPU", "CPU_Mapped"}, log  # no extra buffer type


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0"])
def test_a_quantized_model_answers_with_auto(
    quantized: dict[str, Path], machine: Verdict, quant: str
) -> None:
    text, log = _answer(quantized[quant], "auto")
    assert text == expected_greedy(PROMPT, 8)
    assert not _buffers(log) & set(machine.broken), log
    if quant == "Q4_0" and "CPU_REPACK" in machine.faults and not machine.faults["CPU_REPACK"]:
        assert "CPU_REPACK" in _buffers(log), log  # kept where only AMX is broken


@pytest.fixture
def amx_broken(machine: Verdict) -> Iterator[None]:
    if "AMX" not in machine.broken:
        pytest.skip("AMX is absent or works on this machine")
    yield


def test_where_amx_is_broken_on_crashes_and_names_the_setting(
    quantized: dict[str, Path], amx_broken: None
) -> None:
    # What every quantized model did here before auto: the runner dies on its first prompt.
    out = _python(
        "import sys\n"
        "from localllm.engine.engine import Engine\n"
        "from localllm.runner.messages import CompletionRequest, SamplingParams\n"
        "from tests.support.engine_steps import opts, run\n"
        "with Engine([sys.argv[1]], opts(n_threads=2)) as e:\n"
        "    run(e, CompletionRequest('a', 'abcdefghij', SamplingParams(temperature=0),\n"
        "                             num_predict=8))\n"
        "print('answered')\n",
        str(quantized["Q8_0"]),
    )
    assert out.returncode in (-signal.SIGILL, -signal.SIGSEGV), (out.returncode, out.stderr)
    assert cpu_check.CRASH_HINT in out.stderr


def test_where_amx_is_broken_the_probe_planner_and_doctor_leave_it_out(
    amx_broken: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    from dataclasses import replace

    from localllm.hardware.cpu_buffers import parse_extra_buffers
    from localllm.hardware.detect import run_probe
    from localllm.scheduler.repack import describe, usable_extras
    from tests.support.shapes import cpu

    monkeypatch.setenv("LOCALLLM_CPU_REPACK", "auto")
    answer = run_probe()  # the daemon's probe child: its list is whole
    extras = parse_extra_buffers(answer["cpu_buffers"])
    amx = next(b for b in extras if b.name == "AMX")
    assert not amx.auto and amx.fault.startswith("self-test crashed")
    host = replace(cpu(), extra_buffers=extras)
    assert amx not in usable_extras(host, (), "auto")
    assert amx in usable_extras(host, (), "on") and not usable_extras(host, (), "off")
    assert "AMX left out (self-test crashed" in describe("auto", host)


def test_through_a_runner_auto_answers_and_on_dies_with_the_setting_named(
    quantized: dict[str, Path], amx_broken: None
) -> None:
    # The daemon's view: LoadOptions.cpu_repack crosses the runner protocol, and the
    # client's error for a runner that died says what to set.
    from localllm.errors import RunnerCrashed
    from localllm.runner.messages import LoadOptions
    from localllm.runner.process import RunnerProcess
    from tests.support.runners import arun, collect, greedy, running

    def load(mode: str) -> LoadOptions:
        return LoadOptions(n_ctx=256, n_threads=2, cpu_repack=mode)  # type: ignore[arg-type]

    async def answer(mode: str) -> str:
        async with running(
            RunnerProcess.start([str(quantized["Q8_0"])], load(mode), load_timeout=60)
        ) as runner:
            return (await collect(runner, greedy("g", PROMPT, 8)))[0]

    assert arun(answer("auto")) == expected_greedy(PROMPT, 8)
    with pytest.raises(RunnerCrashed, match="set LOCALLLM_CPU_REPACK=off") as err:
        arun(answer("on"))
    assert "SIGSEGV" in str(err.value) or "SIGILL" in str(err.value)
