"""The measuring half of bench/gpu_check.sh (run by it on the GPU machine).

Sub-commands (all print what they do; errors name what failed):

  free-port               print a free TCP port on 127.0.0.1
  wait-health             wait until the daemon answers GET /health (or has exited)
  find-bench              print llama-bench's path: build_dir/bin/llama-bench of the
                          CUDA entry of ``localllm backends list --json``
  check-doctor            exit 1 unless ``localllm doctor --json`` lists a CUDA device
  measure                 nvidia-smi baseline, then /api/generate (~512-token prompt,
                          128 tokens, greedy): warm-up, N repetitions, medians;
                          /api/ps and nvidia-smi with the model loaded
  anchor                  llama-bench -ngl 99 -p 512 -n 128 -r N -o json, and tg128
                          at depth 512 for a like-for-like decode
  merge                   the rounds of ``measure`` (or of ``anchor``) as one result:
                          medians across rounds, the last round's memory readings
  summary                 ratios against the goals and a block to paste;
                          exit 3 when a goal is missed or could not be measured

Only the standard library and httpx (both in the GPU image); ``measure``
imports localllm only for an optional recomputation of the planner's estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import socket
import statistics
import string
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

TARGET_PROMPT_TOKENS = 512
NUM_PREDICT = 128
NUM_CTX = 4096
GOALS = {"prefill": 0.90, "decode": 0.95, "estimate_tolerance": 0.10}
MiB = 1 << 20


def fail(msg: str) -> int:
    print(f"gpu_check_measure: {msg}", file=sys.stderr)
    return 1


# ---------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------
def cmd_free_port(_: argparse.Namespace) -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        print(s.getsockname()[1])
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (exited, not yet reaped) is not alive
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    except (OSError, IndexError):
        return True


def cmd_wait_health(a: argparse.Namespace) -> int:
    import httpx

    deadline = time.monotonic() + a.timeout
    last = ""
    while time.monotonic() < deadline:
        if a.pid and not _alive(a.pid):
            return fail(f"the daemon (pid {a.pid}) exited before answering /health")
        try:
            r = httpx.get(f"{a.url}/health", timeout=2.0)
            if r.status_code == 200:
                print(f"    daemon up at {a.url}")
                return 0
            last = f"HTTP {r.status_code}"
        except httpx.HTTPError as exc:
            last = type(exc).__name__
        time.sleep(0.5)
    return fail(f"no answer from {a.url}/health within {a.timeout:.0f}s (last: {last})")


def cmd_find_bench(a: argparse.Namespace) -> int:
    try:
        data: Any = json.loads(Path(a.backends).read_text())
    except (OSError, ValueError) as exc:
        return fail(f"cannot read {a.backends}: {exc}")
    if isinstance(data, dict):
        data = data.get("backends", list(data.values()))
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    cuda = [e for e in entries if "cuda" in str(e.get("name", "")).lower()]
    if not cuda:
        print(f"gpu_check_measure: no CUDA entry in backends list: {entries}", file=sys.stderr)
    cuda.sort(key=lambda e: (not e.get("built"), not e.get("loaded")))
    for e in cuda:
        bd = e.get("build_dir")
        if bd:
            exe = Path(bd) / "bin" / "llama-bench"
            if exe.is_file() and os.access(exe, os.X_OK):
                print(exe)
                return 0
            print(f"gpu_check_measure: {exe} is missing (entry {e})", file=sys.stderr)
    # Fallback: any llama-bench next to a libggml-cuda under the given folders.
    for root in a.search:
        for exe in sorted(Path(root).rglob("llama-bench")):
            if exe.is_file() and os.access(exe, os.X_OK) and any(exe.parent.glob("libggml-cuda*")):
                print(
                    f"gpu_check_measure: using {exe} (found under {root}, not via build_dir)",
                    file=sys.stderr,
                )
                print(exe)
                return 0
    return fail("llama-bench was not found: was the backend built with --also llama-bench?")


def cmd_check_doctor(a: argparse.Namespace) -> int:
    rep = json.loads(Path(a.doctor).read_text())
    devices = rep.get("devices") or []
    cuda = [
        d
        for d in devices
        if "cuda" in f"{d.get('name')} {d.get('library')} {d.get('description')}".lower()
    ]
    build = (rep.get("native") or {}).get("build") or {}
    print(
        f"    doctor: native ok={rep.get('native', {}).get('ok')}, "
        f"llama.cpp {build.get('llama_version')}, gpu_offload={build.get('gpu_offload')}"
    )
    for d in devices:
        print(
            f"    device: {d.get('name')} ({d.get('library')}, {d.get('kind')}): "
            f"{d.get('description')}, {(d.get('total') or 0) / MiB:.0f} MiB"
        )
    if not cuda:
        print(f"    gpus present: {rep.get('gpus_present')}; hints: {rep.get('hints')}")
        return fail("no CUDA device in `localllm doctor --json`")
    return 0


# ---------------------------------------------------------------------------
# nvidia-smi
# ---------------------------------------------------------------------------
def _smi(query: str, what: str) -> list[list[str]]:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-{what}={query}", "--format=csv,noheader,nounits"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"    nvidia-smi failed: {exc}", file=sys.stderr)
        return []
    return [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]


def gpu_memory() -> dict[str, Any]:
    """memory.used per GPU and used_memory per compute process, in MiB."""
    gpus = {r[0]: int(r[1]) for r in _smi("index,memory.used", "gpu") if r[1].isdigit()}
    apps: dict[str, int] = {}
    for r in _smi("pid,used_memory", "compute-apps"):
        if len(r) >= 2 and r[1].isdigit():
            apps[r[0]] = apps.get(r[0], 0) + int(r[1])
    return {"gpus_mib": gpus, "used_mib": sum(gpus.values()), "apps_mib": apps}


# ---------------------------------------------------------------------------
# measure: our daemon
# ---------------------------------------------------------------------------
def _words(rng: random.Random, n: int) -> list[str]:
    return ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(3, 8))) for _ in range(n)]


def make_prompt(n_words: int, tag: int) -> str:
    """A prompt of n_words words; its first word differs with ``tag`` so that no
    request can reuse another's KV-cache prefix (only BOS is shared)."""
    first = "".join(random.Random(1000 + tag).choices(string.ascii_lowercase, k=7))
    return " ".join([first, *_words(random.Random(7), n_words - 1)])


def generate(client: Any, model: str, prompt: str) -> dict[str, Any]:
    body = {
        "model": model,
        "prompt": prompt,
        "raw": True,
        "stream": False,
        "options": {"num_predict": NUM_PREDICT, "temperature": 0, "num_ctx": NUM_CTX},
    }
    r = client.post("/api/generate", json=body)
    if r.status_code != 200:
        raise RuntimeError(f"/api/generate: HTTP {r.status_code}: {r.text[:500]}")
    d = r.json()
    keys = ("prompt_eval_count", "prompt_eval_duration", "eval_count", "eval_duration")
    missing = [k for k in keys if not d.get(k)]
    if missing:
        raise RuntimeError(
            f"/api/generate answer lacks {missing}: "
            f"{ {k: v for k, v in d.items() if k != 'response'} }"
        )
    return {k: d.get(k) for k in (*keys, "total_duration", "load_duration", "done_reason")}


def rates(m: dict[str, Any]) -> tuple[float, float]:
    return (
        m["prompt_eval_count"] / (m["prompt_eval_duration"] / 1e9),
        m["eval_count"] / (m["eval_duration"] / 1e9),
    )


def planner_estimate(gguf: str) -> dict[str, Any]:
    """The planner's plan for this load, recomputed in this process (informative)."""
    try:
        from localllm.gguf.info import read_model_info
        from localllm.hardware.detect import detect
        from localllm.scheduler.planner import PlanOptions, plan

        hw = detect(refresh=True)
        p = plan(
            read_model_info(gguf),
            hw.devices,
            PlanOptions.from_config(num_ctx=NUM_CTX, num_parallel=1),
        )
        return {
            "vram": p.vram,
            "ram": p.ram,
            "n_ctx": p.n_ctx,
            "n_gpu_layers": p.n_gpu_layers,
            "n_layers": p.n_layers,
            "flash_attention": p.flash_attention,
            "kv_type": p.kv_type,
            "gpus": [
                {"name": g.name, "weights": g.weights, "kv": g.kv, "graph": g.graph} for g in p.gpus
            ],
            "reason": p.reason,
        }
    except Exception as exc:  # the planner's API may move; this part is optional
        return {"error": f"{type(exc).__name__}: {exc}"}


def cmd_measure(a: argparse.Namespace) -> int:
    import httpx

    result: dict[str, Any] = {
        "model": a.model,
        "gguf": a.gguf,
        "reps": a.reps,
        "daemon_pid": a.daemon_pid,
        "options": {"num_predict": NUM_PREDICT, "temperature": 0, "num_ctx": NUM_CTX, "raw": True},
    }
    with httpx.Client(base_url=a.url, timeout=httpx.Timeout(600.0, connect=10.0)) as client:
        ps0 = client.get("/api/ps").json().get("models", [])
        if ps0:
            print(f"    note: models already loaded before the baseline: {ps0}")
        base = gpu_memory()
        result["memory_before"] = base
        print(
            f"    nvidia-smi before loading: {base['used_mib']} MiB used, "
            f"{len(base['apps_mib'])} compute process(es)"
        )

        # Warm-up and calibration: the first request also loads the model.
        n_words, tag, warm = 300, 0, []
        for _ in range(4):
            t0 = time.monotonic()
            m = generate(client, a.model, make_prompt(n_words, tag))
            tag += 1
            warm.append({**m, "n_words": n_words, "wall_s": time.monotonic() - t0})
            n = m["prompt_eval_count"]
            print(
                f"    warm-up: {n_words} words -> {n} prompt tokens, "
                f"{m['eval_count']} generated (load {m.get('load_duration', 0) / 1e9:.2f}s)"
            )
            if abs(n - TARGET_PROMPT_TOKENS) <= 4 and len(warm) >= 2:
                break
            n_words = max(8, round(n_words * (TARGET_PROMPT_TOKENS - 1) / max(n - 1, 1)))
        result["warmup"] = warm
        result["n_words"] = n_words

        runs = []
        for i in range(a.reps):
            m = generate(client, a.model, make_prompt(n_words, tag))
            tag += 1
            pf, dc = rates(m)
            runs.append({**m, "prefill_tps": pf, "decode_tps": dc})
            print(
                f"    run {i + 1}/{a.reps}: prefill {m['prompt_eval_count']} tok "
                f"{pf:9.1f} tok/s | decode {m['eval_count']} tok {dc:8.1f} tok/s"
            )
            if m["eval_count"] != NUM_PREDICT:
                print(
                    f"    note: {m['eval_count']} tokens generated, not {NUM_PREDICT} "
                    f"(done_reason {m.get('done_reason')})"
                )
        result["runs"] = runs
        result["prefill_tps"] = statistics.median(r["prefill_tps"] for r in runs)
        result["decode_tps"] = statistics.median(r["decode_tps"] for r in runs)
        result["prompt_tokens"] = statistics.median(r["prompt_eval_count"] for r in runs)

        after = gpu_memory()
        result["memory_after"] = after
        ps = client.get("/api/ps").json().get("models", [])
        result["ps"] = ps
    entry = next((m for m in ps if m.get("name", "").split(":")[0] == a.model), ps[0] if ps else {})
    new_apps = {p: v for p, v in after["apps_mib"].items() if p not in base["apps_mib"]}
    result["measured"] = {
        "delta_used_mib": after["used_mib"] - base["used_mib"],
        "new_process_mib": sum(new_apps.values()) if new_apps else None,
        "new_processes": new_apps,
    }
    result["estimate_bytes"] = entry.get("size_vram")
    result["size_bytes"] = entry.get("size")
    result["context_length"] = entry.get("context_length")
    result["planner"] = planner_estimate(a.gguf)
    print(
        f"    median: prefill {result['prefill_tps']:.1f} tok/s, "
        f"decode {result['decode_tps']:.1f} tok/s"
    )
    print(
        f"    /api/ps: size {(entry.get('size') or 0) / MiB:.0f} MiB, size_vram "
        f"{(entry.get('size_vram') or 0) / MiB:.0f} MiB, context {entry.get('context_length')}"
    )
    print(
        f"    nvidia-smi: +{result['measured']['delta_used_mib']} MiB memory.used; "
        f"new processes {new_apps or 'none listed'}"
    )
    pl = result["planner"]
    if "vram" in pl:
        print(
            f"    planner (recomputed): vram {pl['vram'] / MiB:.0f} MiB, "
            f"{pl['n_gpu_layers']}/{pl['n_layers']} layers, ctx {pl['n_ctx']}"
        )
    else:
        print(f"    planner (recomputed): unavailable ({pl.get('error')})")
    Path(a.out).write_text(json.dumps(result, indent=1))
    return 0


# ---------------------------------------------------------------------------
# anchor: llama-bench
# ---------------------------------------------------------------------------
def run_bench(exe: str, args: list[str], log: Path) -> list[dict[str, Any]]:
    cmd = [exe, *args, "-o", "json"]
    print("    $ " + " ".join(cmd))
    t0 = time.monotonic()
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    log.with_suffix(".log").write_text(p.stderr)
    log.with_suffix(".json").write_text(p.stdout)
    if p.returncode != 0:
        tail = "\n".join(p.stderr.splitlines()[-20:])
        raise RuntimeError(f"llama-bench exited with {p.returncode}:\n{tail}")
    rows: list[dict[str, Any]] = json.loads(p.stdout)
    print(f"    ({time.monotonic() - t0:.1f}s)")
    return rows


def _row(rows: list[dict[str, Any]], n_prompt: int, n_gen: int, depth: int) -> dict[str, Any]:
    for r in rows:
        if (r.get("n_prompt"), r.get("n_gen"), r.get("n_depth", 0)) == (n_prompt, n_gen, depth):
            samples = r.get("samples_ts") or [r["avg_ts"]]
            return {
                "avg_ts": r["avg_ts"],
                "stddev_ts": r.get("stddev_ts"),
                "median_ts": statistics.median(samples),
                "samples_ts": samples,
                "n_gpu_layers": r.get("n_gpu_layers"),
                "backends": r.get("backends"),
                "gpu_info": r.get("gpu_info"),
                "flash_attn": r.get("flash_attn"),
                "n_threads": r.get("n_threads"),
                "build_commit": r.get("build_commit"),
            }
    raise RuntimeError(f"no pp{n_prompt}/tg{n_gen}@d{depth} row in llama-bench's output")


def cmd_anchor(a: argparse.Namespace) -> int:
    logs = Path(a.logs)
    base = ["-m", a.model, "-ngl", "99", "-r", str(a.reps)]
    out: dict[str, Any] = {"bench": a.bench, "model": a.model, "reps": a.reps}
    try:
        rows = run_bench(
            a.bench, [*base[:4], "-p", "512", "-n", "128", *base[4:]], logs / "llama-bench"
        )
        out["pp512"] = _row(rows, 512, 0, 0)
        out["tg128"] = _row(rows, 0, 128, 0)
    except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        return fail(str(exc))
    try:  # ours decodes after a ~512-token prompt: the like-for-like llama-bench row
        rows = run_bench(
            a.bench,
            [*base[:4], "-p", "0", "-n", "128", "-d", "512", *base[4:]],
            logs / "llama-bench-d512",
        )
        out["tg128_d512"] = _row(rows, 0, 128, 512)
    except (RuntimeError, ValueError, subprocess.SubprocessError) as exc:
        print(f"    note: tg128 @ d512 unavailable: {exc}")
    for k in ("pp512", "tg128", "tg128_d512"):
        if k in out:
            r = out[k]
            print(
                f"    llama-bench {k}: {r['avg_ts']:.1f} ± {r['stddev_ts'] or 0:.1f} tok/s "
                f"(median {r['median_ts']:.1f}; backends {r['backends']}, "
                f"ngl {r['n_gpu_layers']})"
            )
    Path(a.out).write_text(json.dumps(out, indent=1))
    return 0


def cmd_merge(a: argparse.Namespace) -> int:
    """Rounds run alternately with the other side (gpu_check.sh): a slow minute of the
    machine lands on both, and the medians compare like with like."""
    rounds = [json.loads(Path(f).read_text()) for f in a.files]
    if not rounds:
        return fail("merge: no round files")
    out: dict[str, Any] = {**rounds[-1], "rounds": len(rounds)}
    if a.kind == "ours":
        for k in ("prefill_tps", "decode_tps", "prompt_tokens"):
            vals = [r[k] for r in rounds if r.get(k)]
            out[k] = statistics.median(vals) if vals else None
        out["per_round"] = [
            {"prefill_tps": r.get("prefill_tps"), "decode_tps": r.get("decode_tps")} for r in rounds
        ]
        per = [r.get("decode_tps") for r in rounds]
    else:
        for k in ("pp512", "tg128", "tg128_d512"):
            rows = [r[k] for r in rounds if k in r]
            if rows:
                med = statistics.median(x["median_ts"] for x in rows)
                out[k] = {**rows[-1], "median_ts": med, "per_round": [x["median_ts"] for x in rows]}
        per = (out.get("tg128") or {}).get("per_round")
    Path(a.out).write_text(json.dumps(out, indent=1))
    print(f"    {a.kind}: {len(rounds)} rounds, decode per round {per}")
    return 0


# ---------------------------------------------------------------------------
# summary
# ---------------------------------------------------------------------------
def _gpu_line() -> str:
    rows = _smi("name,driver_version,compute_cap,memory.total", "gpu")
    text = "; ".join(f"{r[0]} (driver {r[1]}, sm {r[2]}, {r[3]} MiB)" for r in rows)
    return text or "unknown GPU"


def _nvcc_line(preflight: str) -> str:
    try:
        lines = Path(preflight).read_text().splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in lines if ln.startswith("Cuda compilation tools")), "")


def cmd_summary(a: argparse.Namespace) -> int:
    ours = json.loads(Path(a.ours).read_text())
    anchor = json.loads(Path(a.anchor).read_text())
    timings = []
    if a.timings and Path(a.timings).exists():
        timings = [ln.split("\t") for ln in Path(a.timings).read_text().splitlines() if ln]

    def ratio(x: float | None, y: float | None) -> float | None:
        return x / y if x and y else None

    pf = ratio(ours["prefill_tps"], anchor["pp512"]["median_ts"])
    dc = ratio(ours["decode_tps"], anchor["tg128"]["median_ts"])
    dc_d = ratio(ours["decode_tps"], (anchor.get("tg128_d512") or {}).get("median_ts"))
    meas = ours["measured"]
    measured_mib = meas["new_process_mib"] or meas["delta_used_mib"]
    measured_src = (
        "nvidia-smi, the runner process"
        if meas["new_process_mib"]
        else "nvidia-smi, memory.used delta"
    )
    est = ours.get("estimate_bytes")
    est_ratio = ratio(est / MiB if est else None, measured_mib)
    planner = ours.get("planner") or {}
    planner_ratio = ratio(planner["vram"] / MiB if "vram" in planner else None, measured_mib)

    def verdict(ok: bool | None) -> str:
        return "n/a" if ok is None else ("PASS" if ok else "MISS")

    checks = {
        "prefill": None if pf is None else pf >= GOALS["prefill"],
        "decode": None if dc is None else dc >= GOALS["decode"],
        "estimate": None
        if est_ratio is None
        else abs(est_ratio - 1) <= GOALS["estimate_tolerance"],
    }

    def f(v: float | None, d: int = 1) -> str:
        return "n/a" if v is None else f"{v:.{d}f}"

    size = ours.get("size_bytes")
    placed = (
        f"size_vram {f(est / MiB if est else None, 0)} of size "
        f"{f(size / MiB if size else None, 0)} MiB"
    )
    if "n_gpu_layers" in planner:
        placed += f", planner: {planner['n_gpu_layers']}/{planner['n_layers']} layers on the GPU"
    lines = [
        f"### localllm GPU check, {time.strftime('%Y-%m-%d')}",
        "",
        f"GPU: {_gpu_line()}. {_nvcc_line(a.preflight)}",
        f"Model: {Path(a.gguf).name} (bench/gen_models.py, Llama-3.2-1B dims), "
        f"context {ours.get('context_length')}, 1 slot; {placed}.",
        f"Medians of {ours['reps']} (ours) and {anchor['reps']} (llama-bench) runs.",
        "",
        "| Metric | Ours | llama-bench | Ratio | Goal | |",
        "|---|---|---|---|---|---|",
        f"| prefill, {ours['prompt_tokens']:.0f}-token prompt vs pp512 (tok/s) | "
        f"{f(ours['prefill_tps'])} | {f(anchor['pp512']['median_ts'])} | {f(pf, 3)} | "
        f"≥ {GOALS['prefill']:.2f} | {verdict(checks['prefill'])} |",
        f"| decode, 128 tokens vs tg128 (tok/s) | {f(ours['decode_tps'])} | "
        f"{f(anchor['tg128']['median_ts'])} | {f(dc, 3)} | ≥ {GOALS['decode']:.2f} | "
        f"{verdict(checks['decode'])} |",
    ]
    if dc_d is not None:
        lines.append(
            f"| decode vs tg128 @ depth 512 (like-for-like) | {f(ours['decode_tps'])} | "
            f"{f(anchor['tg128_d512']['median_ts'])} | {f(dc_d, 3)} | (info) | |"
        )
    lines += [
        f"| VRAM: /api/ps size_vram vs measured (MiB) | {f(est / MiB if est else None, 0)} | "
        f"{measured_mib} ({measured_src}) | {f(est_ratio, 3)} | "
        f"± {GOALS['estimate_tolerance']:.0%} | {verdict(checks['estimate'])} |",
    ]
    if planner_ratio is not None:
        lines.append(
            f"| VRAM: planner estimate (recomputed) vs measured (MiB) | "
            f"{planner['vram'] / MiB:.0f} | {measured_mib} | {f(planner_ratio, 3)} "
            f"| (info) | |"
        )
    lines += [
        "",
        f"memory.used delta {meas['delta_used_mib']} MiB; "
        f"new GPU processes {meas['new_processes'] or 'none listed'}.",
    ]
    if timings:
        lines.append(
            "Steps: " + "; ".join(f"{k} {v if v == 'skipped' else v + 's'}" for k, v in timings)
        )
    block = "\n".join(lines)
    print("\n" + "=" * 78 + "\n" + block + "\n" + "=" * 78)
    missed = [k for k, ok in checks.items() if ok is False]
    unknown = [k for k, ok in checks.items() if ok is None]
    print(
        f"goals: {'all met' if not missed and not unknown else ''}"
        f"{' missed: ' + ', '.join(missed) if missed else ''}"
        f"{' not measured: ' + ', '.join(unknown) if unknown else ''}"
    )
    result = {
        "ratios": {
            "prefill": pf,
            "decode": dc,
            "decode_depth512": dc_d,
            "estimate": est_ratio,
            "planner_estimate": planner_ratio,
        },
        "goals": GOALS,
        "checks": checks,
        "measured_vram_mib": measured_mib,
        "measured_vram_source": measured_src,
        "ours": ours,
        "anchor": anchor,
        "timings": dict(timings),
        "summary": block,
    }
    Path(a.out).write_text(json.dumps(result, indent=1))
    if a.text:
        Path(a.text).write_text(block + "\n")
    return 3 if missed or unknown else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("free-port").set_defaults(func=cmd_free_port)
    p = sub.add_parser("wait-health")
    p.add_argument("--url", required=True)
    p.add_argument("--pid", type=int, default=0)
    p.add_argument("--timeout", type=float, default=60.0)
    p.set_defaults(func=cmd_wait_health)
    p = sub.add_parser("find-bench")
    p.add_argument("--backends", required=True)
    p.add_argument(
        "--search", action="append", default=[], help="folders to search when build_dir has none"
    )
    p.set_defaults(func=cmd_find_bench)
    p = sub.add_parser("check-doctor")
    p.add_argument("doctor")
    p.set_defaults(func=cmd_check_doctor)
    p = sub.add_parser("measure")
    p.add_argument("--url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--gguf", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--daemon-pid", type=int, default=0)
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_measure)
    p = sub.add_parser("anchor")
    p.add_argument("--bench", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--logs", default=".")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_anchor)
    p = sub.add_parser("merge")
    p.add_argument("--kind", choices=("ours", "anchor"), required=True)
    p.add_argument("--out", required=True)
    p.add_argument("files", nargs="+")
    p.set_defaults(func=cmd_merge)
    p = sub.add_parser("summary")
    p.add_argument("--ours", required=True)
    p.add_argument("--anchor", required=True)
    p.add_argument("--timings", default="")
    p.add_argument("--preflight", default="")
    p.add_argument("--gguf", default="")
    p.add_argument("--out", required=True)
    p.add_argument("--text", default="")
    p.set_defaults(func=cmd_summary)
    a = ap.parse_args(argv)
    try:
        return int(a.func(a))
    except Exception as exc:
        return fail(f"{a.cmd}: {type(exc).__name__}: {exc}")


if __name__ == "__main__":
    sys.exit(main())
