"""``localllm run`` as a subprocess against the real daemon and the tiny model, plus its pieces.

The ``echo`` model is the tiny model with a chat template that renders
``role:content`` for each message and nothing after, so the greedy answer is
``expected_greedy`` of the rendered conversation (its last character decides).
"""

from __future__ import annotations

import io
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from localllm.api.wire import Message
from localllm.cli.chatstream import StreamPrinter, WordWrap, go_duration, stats_text, stream_chat
from localllm.cli.repl import Repl
from localllm.cli.session import Session, parse_parameter, parse_think
from localllm.errors import InvalidRequest, NotFound
from tests.support import forkserver
from tests.support.daemon import REPO, Daemon, start_daemon
from tests.support.echo import ECHO_TEMPLATE, answer, in_terminal, read_fd_until, render
from tests.support.hubstub import HubStub
from tests.support.tinymodel import make_tiny_model
from tests.support.variants import serve_shared


def prompt_tokens(messages: list[tuple[str, str]]) -> int:
    return len(render(messages).encode()) + 1  # one token per ASCII character, plus BOS


@pytest.fixture(scope="module")
def echo_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    """``tiny``, ``tiny-embed`` and ``echo``; the tests add nothing but ``/save``'s own model."""
    with serve_shared(
        tmp_path_factory, names=("tiny", "tiny-embed"), templates={"echo": ECHO_TEMPLATE}
    ) as d:
        yield d


def run_cli_input(
    d: Daemon, *args: str, stdin: str, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return forkserver.run(list(args), d.env, cwd=REPO, input=stdin, timeout=timeout)


def stats(stderr: str) -> list[dict[str, str]]:
    """The --verbose blocks of a run, one dict per answer."""
    blocks: list[dict[str, str]] = []
    for line in stderr.splitlines():
        m = re.match(r"^([a-z ]+):\s+(.+)$", line)
        if not m:
            continue
        if m.group(1) == "total duration":
            blocks.append({})
        blocks[-1][m.group(1)] = m.group(2)
    return blocks


# -- end to end --------------------------------------------------------------------------
def test_one_shot_prints_the_exact_greedy_answer(echo_daemon: Daemon) -> None:
    out = echo_daemon.cli("run", "echo", "hello")
    assert out.returncode == 0, out.stderr
    assert answer([("user", "hello")]) == "pqrstuvwxyz"
    assert out.stdout == "pqrstuvwxyz\n"
    several = echo_daemon.cli("run", "echo", "say", "x")  # prompt words joined by spaces
    assert several.stdout == answer([("user", "say x")]) + "\n" == "yz\n"


def test_piped_stdin_is_joined_before_the_prompt_and_verbose_stats(echo_daemon: Daemon) -> None:
    out = run_cli_input(echo_daemon, "run", "echo", "--verbose", "x", stdin="abc")
    assert out.returncode == 0, out.stderr
    assert out.stdout == answer([("user", "abc x")]) + "\n"
    (block,) = stats(out.stderr)
    assert block["prompt eval count"] == f"{prompt_tokens([('user', 'abc x')])} token(s)"
    assert block["eval count"] == "2 token(s)"  # "yz"
    for key in (
        "total duration",
        "load duration",
        "prompt eval duration",
        "eval duration",
        "time to first token",
    ):
        assert re.fullmatch(r"\d+(\.\d+)?(ns|µs|ms|s)", block[key]), (key, block[key])
    for key in ("prompt eval rate", "eval rate"):
        assert re.fullmatch(r"\d+\.\d\d tokens/s", block[key]), (key, block[key])
        assert float(block[key].split()[0]) > 0

    only_stdin = run_cli_input(echo_daemon, "run", "echo", stdin="hello")
    assert only_stdin.stdout == "pqrstuvwxyz\n", only_stdin.stderr


def test_interactive_session_through_stdin(echo_daemon: Daemon) -> None:
    script = (
        "\n".join(
            [
                "/set parameter num_predict 3",
                "/set parameter temperature 0",
                "/set parameter stop q r",
                "/set parameter bogus 1",
                "/set verbose",
                "a",
                "x",
                "/show parameters",
                "/clear",
                "x",
                '"""',
                "hello",
                'a"""',
                "/set system zz",
                "/show system",
                "/show template",
                "a",
                "/save mine",
                "/?",
                "/load tiny",
                "a",
                "/nonsense",
                "/bye",
                "this line is never read",
            ]
        )
        + "\n"
    )
    out = run_cli_input(echo_daemon, "run", "echo", "--interactive", stdin=script)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "Set parameter 'num_predict' to '3'" in text
    assert "Set parameter 'stop' to 'q, r'" in text
    assert "Couldn't set parameter: unknown parameter 'bogus'" in text
    assert "Set 'verbose' mode." in text
    assert f">>> {answer([('user', 'a')], 3)}\n\n>>> yz\n\n" in text  # "bcd", then "yz"
    params = text[text.index("User defined parameters:") :]
    assert re.search(r"num_predict\s+3\n", params)
    assert re.search(r"temperature\s+0.0\n", params)
    assert re.search(r'stop\s+"q"\nstop\s+"r"\n', params)
    assert "Cleared session context" in text
    assert "Created new model 'mine'" in text
    shown = httpx.post(
        echo_daemon.url + "/api/show", json={"model": "mine"}, trust_env=False
    ).json()
    assert shown["system"] == "zz"  # the session's system prompt and parameters were saved
    assert re.search(r"num_predict\s+3", shown["parameters"])
    assert "Unknown command '/nonsense'" in text
    assert "\n>>> zz\n" in text and f"\n>>> {ECHO_TEMPLATE}\n" in text
    assert "/set            Set session variables" in text
    assert "Loading model 'tiny'" in text
    assert "never read" not in text + out.stderr

    # The history is sent each turn, /clear empties it, the system message is prepended.
    turns = [
        [("user", "a")],
        [("user", "a"), ("assistant", "bcd"), ("user", "x")],
        [("user", "x")],  # after /clear
        [("user", "x"), ("assistant", "yz"), ("user", "hello\na")],  # the """ block
        [
            ("system", "zz"),
            ("user", "x"),
            ("assistant", "yz"),
            ("user", "hello\na"),
            ("assistant", "bcd"),
            ("user", "a"),
        ],
    ]
    counts = [b["prompt eval count"] for b in stats(out.stderr)]
    # /load empties the history; tiny's own template renders "role:content." + "assistant:".
    tiny_prompt = len("system:zz.user:a.assistant:") + 1
    assert counts == [f"{prompt_tokens(t)} token(s)" for t in turns] + [f"{tiny_prompt} token(s)"]


def read_until(
    proc: subprocess.Popen[bytes], marker: bytes, seen: bytes = b"", timeout: float = 30
) -> bytes:
    """Read the child's stdout until ``marker`` has appeared (everything read so far)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while marker not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"no {marker!r} in {seen[-300:]!r}"
        if select.select([proc.stdout], [], [], left)[0]:
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"stdout closed; read so far {seen[-300:]!r}"
            seen += chunk
    return seen


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_answer_and_the_session_goes_on(echo_daemon: Daemon) -> None:
    # `with` closes the pipes even when an assertion fails: an unclosed pipe found by
    # the garbage collector later fails whichever test is running then.
    with subprocess.Popen(
        [sys.executable, "-m", "localllm", "run", "echo", "--interactive", "--verbose"],
        cwd=REPO,
        env=echo_daemon.env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        # As from a terminal: a suite started in the background (`cmd &` in a script)
        # inherits SIGINT ignored, and Python then never raises KeyboardInterrupt.
        preexec_fn=_default_sigint,
    ) as proc:
        assert proc.stdin is not None
        try:
            # 8000 tokens of "AAAA...": seconds even for the tiny model on one thread
            # (2000 were once all written before the interrupt landed).
            proc.stdin.write(b"/set parameter num_ctx 8192\n/set parameter num_predict 8000\nA\n")
            proc.stdin.flush()
            start = time.monotonic()
            seen = read_until(proc, b"A" * 20)
            proc.send_signal(signal.SIGINT)
            seen = read_until(proc, b"\n\n>>> ", seen)
            partial = seen.split(b">>> ")[-2].strip().decode()
            assert set(partial) == {"A"} and 20 <= len(partial) < 8000
            proc.stdin.write(b"x\n/bye\n")
            proc.stdin.flush()
            out, err = proc.communicate(timeout=30)
            assert time.monotonic() - start < 15  # cut long before the 8000 tokens
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == 0, err
    assert out.decode().startswith("yz\n")
    # The cut answer stays in the history: the next prompt carries it.
    (block,) = stats(err.decode())
    history = [("user", "A"), ("assistant", partial), ("user", "x")]
    assert block["prompt eval count"] == f"{prompt_tokens(history)} token(s)"


def test_terminal_session_with_readline_history(echo_daemon: Daemon) -> None:
    with in_terminal(echo_daemon.env, "run", "echo") as (proc, controller):
        seen = read_fd_until(controller, b">>> ")
        os.write(controller, b"hello\n")
        seen = read_fd_until(controller, b">>> ", seen.split(b">>> ", 1)[1])
        assert b"pqrstuvwxyz" in seen
        os.write(controller, b"\x04")  # Ctrl-D leaves
        assert proc.wait(30) == 0
    try:
        import readline  # noqa: F401
    except ImportError:  # no line editing here: no history file either
        return
    home = Path(echo_daemon.env["LOCALLLM_HOME"])  # the CLI's home: the daemon's env
    assert "hello" in (home / "history").read_text()


def test_embedding_model_prints_its_vector(echo_daemon: Daemon) -> None:
    out = echo_daemon.cli("run", "tiny-embed", "abc")
    assert out.returncode == 0, out.stderr
    vector = json.loads(out.stdout)
    assert len(vector) > 0 and abs(sum(x * x for x in vector) - 1) < 1e-3
    chat = run_cli_input(echo_daemon, "run", "tiny-embed", "-i", stdin="hi\n")
    assert chat.returncode == 1 and "embedding models need input text" in chat.stderr


def test_run_reports_errors_without_tracebacks(echo_daemon: Daemon) -> None:
    bad = echo_daemon.cli("run", "echo", "--keepalive", "soon", "x")
    assert bad.returncode == 1 and "invalid keepalive" in bad.stderr
    think = echo_daemon.cli("run", "echo", "--think=sideways", "x")
    assert think.returncode == 1 and "invalid think value" in think.stderr
    missing = echo_daemon.cli("run", "nothing-here", "x")
    assert missing.returncode == 1
    assert missing.stderr.splitlines()[-1].startswith("Error: ")
    for result in (bad, think, missing):
        assert "Traceback" not in result.stderr


@pytest.fixture
def hub_echo_daemon(
    hub: HubStub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Daemon]:
    monkeypatch.setenv("LOCALLLM_CONTEXT_LENGTH", "512")
    gguf = make_tiny_model(tmp_path / "echo-gguf", chat_template=ECHO_TEMPLATE)
    hub.add_file("someone/Echo-GGUF", "echo-Q4_K_M.gguf", gguf)
    with start_daemon(tmp_path) as d:
        yield d


def test_run_pulls_a_missing_model_first(hub_echo_daemon: Daemon) -> None:
    out = hub_echo_daemon.cli("run", "hf.co/someone/Echo-GGUF", "hello")
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert lines[0] == "pulling manifest" and lines[-1] == "success"
    assert any(re.match(r"pulling [0-9a-f]{12}: 100% ", ln) for ln in lines)
    assert out.stdout == "pqrstuvwxyz\n"
    again = hub_echo_daemon.cli("run", "hf.co/someone/Echo-GGUF", "x")
    assert (again.stdout, again.stderr) == ("yz\n", "")  # stored now: no pull


# -- pieces ------------------------------------------------------------------------------
def test_word_wrap_breaks_at_spaces_only() -> None:
    out = io.StringIO()
    wrap = WordWrap(out, 12)
    for piece in ["the quick br", "own fox jumps", " over\nthe lazy dog"]:
        wrap.write(piece)
    wrap.flush()
    assert out.getvalue() == "the quick\nbrown fox\njumps over\nthe lazy dog"
    coloured = io.StringIO()
    wrap = WordWrap(coloured, 12)
    wrap.write("\x1b[2mthe quick\x1b[0m brown")  # colour codes take no columns
    wrap.flush()
    assert coloured.getvalue() == "\x1b[2mthe quick\x1b[0m\nbrown"


def test_printer_shows_thinking_apart_or_hides_it() -> None:
    chunks: list[Message] = [
        {"role": "assistant", "content": "", "thinking": "hmm"},
        {"role": "assistant", "content": "", "thinking": " ok"},
        {"role": "assistant", "content": "Hi"},
        {"role": "assistant", "content": "!"},
    ]
    out = io.StringIO()
    printer = StreamPrinter(out, wordwrap=False, color=False)
    for c in chunks:
        printer.feed(c)
    printer.finish()
    assert out.getvalue() == "Thinking...\nhmm ok\n...done thinking.\n\nHi!\n"
    dim = io.StringIO()
    printer = StreamPrinter(dim, wordwrap=False, color=True)
    for c in chunks:
        printer.feed(c)
    assert dim.getvalue() == "\x1b[2mThinking...\nhmm ok\n...done thinking.\x1b[0m\n\nHi!"
    hidden = io.StringIO()
    printer = StreamPrinter(hidden, hide_thinking=True, wordwrap=False, color=False)
    for c in chunks:
        printer.feed(c)
    printer.finish()
    assert hidden.getvalue() == "Hi!\n"


class _Client:
    """Streams two chunks, then the user presses Ctrl-C."""

    def __init__(self) -> None:
        self.closed = False
        self.payload: dict[str, Any] = {}

    def chat(self, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        self.payload = payload
        try:
            yield {"message": {"content": "par"}, "done": False}
            yield {"message": {"content": "tial"}, "done": False}
            raise KeyboardInterrupt
        finally:
            self.closed = True


def test_ctrl_c_closes_the_stream_and_keeps_what_arrived() -> None:
    client, out = _Client(), io.StringIO()
    turn = stream_chat(client, {"model": "m"}, StreamPrinter(out, wordwrap=False, color=False))
    assert turn.interrupted and client.closed and turn.final is None
    assert (turn.content, out.getvalue()) == ("partial", "partial\n")
    assert turn.ttft is not None


class _CreateClient:
    """Answers ``create`` as a daemon with (``has_create``) or without that route."""

    def __init__(self, has_create: bool) -> None:
        self.has_create = has_create
        self.created: list[dict[str, Any]] = []

    def create(self, payload: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if not self.has_create:
            raise NotFound("404 page not found: /api/create")
        if not payload:
            raise InvalidRequest("model is required")
        self.created.append(payload)
        yield {"status": "success"}


def test_save_creates_a_model_only_where_the_daemon_can(capsys: pytest.CaptureFixture[str]) -> None:
    session = Session(
        "echo",
        system="be brief",
        options={"num_predict": 3},
        messages=[{"role": "user", "content": "a"}, {"role": "assistant", "content": "bcd"}],
    )
    able = _CreateClient(True)
    Repl(able, session, tty=False).command("/save mine")  # type: ignore[arg-type]
    assert able.created == [
        {
            "model": "mine",
            "from": "echo",
            "messages": session.messages,
            "system": "be brief",
            "parameters": {"num_predict": 3},
        }
    ]
    assert "Created new model 'mine'" in capsys.readouterr().out
    unable = _CreateClient(False)
    Repl(unable, session, tty=False).command("/save mine")  # type: ignore[arg-type]
    assert unable.created == []
    assert "needs a daemon with model creation" in capsys.readouterr().out


def test_session_payload_and_value_parsing() -> None:
    s = Session("m", system="sys", format="json", keep_alive="5m", think="high")
    s.options["num_predict"] = 3
    body = s.payload([{"role": "user", "content": "q"}])
    assert body["messages"][0] == {"role": "system", "content": "sys"}
    assert (body["format"], body["keep_alive"], body["think"]) == ("json", "5m", "high")
    assert body["options"] == {"num_predict": 3} and body["stream"] is True
    assert parse_parameter("num_predict", ["3"]) == 3
    assert parse_parameter("temperature", ["0.5"]) == 0.5
    assert parse_parameter("use_mmap", ["false"]) is False
    assert parse_parameter("stop", ["a", "b c"]) == ["a", "b c"]
    for name, values in [("top_k", ["many"]), ("nope", ["1"]), ("seed", [])]:
        with pytest.raises(InvalidRequest):
            parse_parameter(name, values)
    assert [parse_think(v) for v in (None, "true", "false", "HIGH")] == [None, True, False, "high"]


def test_verbose_block_formats_go_durations_and_rates() -> None:
    assert [go_duration(n) for n in (512, 1500, 12_500_000, 1_234_567_890, 75e9)] == [
        "512ns",
        "1.5µs",
        "12.5ms",
        "1.23456789s",
        "1m15s",
    ]
    text = stats_text(
        {
            "total_duration": 2_000_000_000,
            "eval_count": 10,
            "eval_duration": 500_000_000,
            "prompt_eval_count": 4,
        },
        0.25,
    )
    assert "eval rate:            20.00 tokens/s" in text
    assert "prompt eval rate:     n/a" in text
    assert text.splitlines()[-1] == "time to first token:  250ms"
