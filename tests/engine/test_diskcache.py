"""Parked prompts on disk (engine/diskcache.py): back bit for bit after a restart, or not at all.

The tiny model with attention on makes every logprob depend on every cell, so
a restored cell with the wrong keys, values or position changes the numbers:
each reuse is compared with the same request run alone in a fresh engine with
no cache.  An engine closed and a new one opened on the same folder is what a
runner restart (a reload, an idle unload, a daemon restart) does.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from localllm.engine import cachefile, diskcache
from localllm.engine.engine import Engine
from localllm.engine.park import Parked
from localllm.runner.messages import CompletionRequest
from tests.support.engine_steps import SYSTEM, Result, opts, req, run, same
from tests.support.tinymodel import make_tiny_model

LONG = SYSTEM * 2  # 496 tokens: past MIN_TOKENS, so worth a file


def engine(model: Path, folder: Path, budget: int = 1 << 30, **kw: object) -> Engine:
    kw = {
        "n_ctx": 1024,
        "n_parallel": 2,
        "n_batch": 64,
        "n_ubatch": 64,
        "prompt_cache_disk": budget,
        "prompt_cache_dir": str(folder),
        "prompt_cache_key": str(key_file(folder)),
        **kw,
    }
    return Engine([str(model)], opts(**kw))


def key_file(folder: Path) -> Path:
    """Where a test's cache keeps its key: beside the folder, as the config folder is."""
    return folder.with_name(folder.name + ".key")


def alone(model: Path, r: CompletionRequest) -> Result:
    with Engine([str(model)], opts(n_ctx=1024, n_batch=64, n_ubatch=64, prompt_cache=0)) as e:
        return run(e, r)[r.id]


def files(folder: Path) -> list[Path]:
    return sorted(folder.glob(f"*/*{diskcache.SUFFIX}"))


def cached(r: Result) -> int:
    assert r.done is not None
    return r.done.cached_tokens


def test_a_restarted_engine_takes_the_prompt_back_from_disk_bit_for_bit(
    tiny_attn: Path, tmp_path: Path
) -> None:
    later = req("c", LONG + "go")
    with engine(tiny_attn, tmp_path) as e:
        run(e, req("a", LONG + "hi"))  # idle afterwards: its slot is written to disk
    (written,) = files(tmp_path)
    with engine(tiny_attn, tmp_path) as e:
        assert e.parked is not None and e.parked.disk is not None
        (entry,) = e.parked.disk.entries
        assert entry.tokens[: len(LONG) + 3] == e.tokenize(LONG + "hi")
        got = run(e, later)["c"]
        assert cached(got) == len(e.tokenize(LONG))  # everything but the new text
    same(got, alone(tiny_attn, later))
    assert written in files(tmp_path) and len(files(tmp_path)) == 2  # and "c"'s own


def test_a_file_from_another_model_is_refused_and_removed(tiny_attn: Path, tmp_path: Path) -> None:
    other = make_tiny_model(tmp_path / "other", attention=True, seed=1)  # same shapes
    with engine(tiny_attn, tmp_path / "cache") as e:
        run(e, req("a", LONG + "hi"))
    (theirs,) = files(tmp_path / "cache")
    with engine(other, tmp_path / "cache") as e:
        assert e.parked is not None and e.parked.disk is not None
        # Put where this model's copies live, under its own name: still not this model's.
        e.parked.disk.dir.mkdir(parents=True, exist_ok=True)
        forged = e.parked.disk.dir / theirs.name
        forged.write_bytes(theirs.read_bytes())
    later = req("c", LONG + "go")
    with engine(other, tmp_path / "cache") as e:
        assert e.parked is not None and e.parked.disk is not None
        assert not e.parked.disk.entries and not forged.exists()
        got = run(e, later)["c"]
        assert cached(got) < 4
    same(got, alone(other, later))


def test_a_whole_file_llama_cpp_refuses_is_dropped(tiny_attn: Path, tmp_path: Path) -> None:
    with engine(tiny_attn, tmp_path / "f32", kv_type="f32") as e:
        run(e, req("a", LONG + "hi"))
    (theirs,) = files(tmp_path / "f32")
    with engine(tiny_attn, tmp_path / "f16") as e:
        assert e.parked is not None and e.parked.disk is not None
        disk = e.parked.disk
    # Its header rewritten to this cache's identity: every check of ours passes, and
    # llama.cpp finds f32 cells where its cache holds f16 ones.
    raw = theirs.read_bytes()
    hlen = struct.unpack("<I", raw[8:12])[0]
    meta = {**json.loads(raw[12 : 12 + hlen]), "identity": disk.identity}
    body = raw[12 + hlen :]
    tokens = body[: 4 * meta["n_tokens"]]
    # Signed with this user's key too (a forger who has it): only llama.cpp can tell.
    meta["mac"] = cachefile.mac(disk.key, meta, tokens, body[len(tokens) :])
    head = json.dumps(meta).encode()
    disk.dir.mkdir(parents=True)
    forged = disk.dir / theirs.name
    forged.write_bytes(raw[:8] + struct.pack("<I", len(head)) + head + raw[12 + hlen :])
    later = req("c", LONG + "go")
    with engine(tiny_attn, tmp_path / "f16") as e:
        assert e.parked is not None and e.parked.disk is not None
        assert len(e.parked.disk.entries) == 1
        got = run(e, later)["c"]
        assert cached(got) < 4 and not forged.exists()
        assert all(x.file != theirs.name for x in e.parked.entries)
    same(got, alone(tiny_attn, later))


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage"])
def test_a_damaged_file_is_ignored_and_the_prompt_evaluated_again(
    tiny_attn: Path, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    with engine(tiny_attn, tmp_path) as e:
        run(e, req("a", LONG + "hi"))
    (path,) = files(tmp_path)
    data = bytearray(path.read_bytes())
    if damage == "flip":  # a flipped bit in llama.cpp's bytes: only the checksum sees it
        data[-100] ^= 0x10
    elif damage == "truncate":
        del data[-1000:]
    else:
        data[:] = b"\0" * len(data)
    path.write_bytes(bytes(data))
    later = req("c", LONG + "go")
    with engine(tiny_attn, tmp_path) as e:
        got = run(e, later)["c"]
        assert cached(got) < 4
    assert not path.exists()
    # A flipped bit passes every check but the MAC, when the file is read for a prompt;
    # a file of the wrong length never makes it into the index.
    why = "its MAC does not match" if damage == "flip" else "not a whole cache file"
    assert why in caplog.text
    same(got, alone(tiny_attn, later))


def test_the_least_recently_used_files_go_first_within_the_budget(
    tiny_attn: Path, tmp_path: Path
) -> None:
    prompts = {k: req(k, f"{k}{k} " + LONG + "hi") for k in "xyz"}  # no shared prefix

    def serve(*keys: str, budget: int) -> None:
        with engine(tiny_attn, tmp_path, budget=budget, n_parallel=1) as e:
            for k in keys:
                run(e, prompts[k])

    serve("x", budget=1 << 30)
    (one,) = files(tmp_path)
    size = one.stat().st_size
    budget = 2 * size + size // 2  # room for two
    serve("y", budget=budget)
    serve("x", budget=budget)  # used again: now "y" is the least recently used
    serve("z", budget=budget)
    left = files(tmp_path)
    assert len(left) == 2 and sum(p.stat().st_size for p in left) <= budget
    with engine(tiny_attn, tmp_path, budget=budget) as e:
        assert e.parked is not None and e.parked.disk is not None
        assert sorted(e.detokenize(x.tokens[1:2]) for x in e.parked.disk.entries) == ["x", "z"]


def test_short_prompts_and_a_zero_budget_write_nothing(tiny_attn: Path, tmp_path: Path) -> None:
    with engine(tiny_attn, tmp_path) as e:
        run(e, req("a", SYSTEM[:100]))  # shorter than MIN_TOKENS
    with engine(tiny_attn, tmp_path, budget=0) as e:
        assert e.parked is not None and e.parked.disk is None
        run(e, req("b", LONG))
        assert not e.has_work()
    assert files(tmp_path) == []


def test_a_conversation_keeps_one_file_its_latest_turn(tiny_attn: Path, tmp_path: Path) -> None:
    with engine(tiny_attn, tmp_path) as e:
        first = run(e, req("a", LONG + "hi"))["a"]
        turn = LONG + "hi" + first.text + ". go"
        run(e, req("b", turn))
    assert len(files(tmp_path)) == 1  # the first turn's file served only what this one does
    with engine(tiny_attn, tmp_path) as e:
        assert e.parked is not None and e.parked.disk is not None
        (entry,) = e.parked.disk.entries
        assert entry.tokens[: len(e.tokenize(turn))] == e.tokenize(turn)


def test_a_sliding_window_copy_on_disk_follows_the_rules_in_memory(tmp_path: Path) -> None:
    disk = diskcache.DiskCache(
        tmp_path, {"model": "m"}, 1 << 20, ffi=None, n_ctx=4096, n_swa=32, key=b"k" * 32
    )
    disk.entries = [Parked(list(range(400)), (), -1, None, 1, "f")]
    assert disk.best([*range(400), 7], ()) == (disk.entries[0], 400)  # continues it whole
    assert disk.best([*range(300), 9], ()) is None  # cells 0..267 of the window layers: gone
    disk.n_swa = 0
    assert disk.best([*range(300), 9], ()) == (disk.entries[0], 300)
    disk.n_ctx = 300
    assert disk.best([*range(400), 7], ()) is None  # more cells than this context's slot


def test_the_cache_is_private_to_its_user(tiny_attn: Path, tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    folder.mkdir(mode=0o755)  # as an older version left it: readable by every account
    with engine(tiny_attn, folder) as e:
        run(e, req("a", LONG + "hi"))
    (written,) = files(folder)
    assert oct(written.stat().st_mode & 0o777) == "0o600"
    assert oct(written.parent.stat().st_mode & 0o777) == "0o700"
    assert oct(folder.stat().st_mode & 0o777) == "0o700"  # closed, being ours
    assert oct(key_file(folder).stat().st_mode & 0o777) == "0o600"


@pytest.mark.parametrize("who", ["group-writable", "world-writable", "another user's"])
def test_a_folder_others_may_write_is_refused_with_its_reason(
    tiny_attn: Path, tmp_path: Path, who: str, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "cache"
    folder.mkdir()
    if who == "another user's":
        if os.geteuid() != 0:
            pytest.skip("giving a folder to another account needs root")
        os.chown(folder, 65534, 65534)
    else:
        folder.chmod(0o770 if who == "group-writable" else 0o707)
    with engine(tiny_attn, folder) as e:
        assert e.parked is not None and e.parked.disk is None  # no disk tier at all
        run(e, req("a", LONG + "hi"))
    assert files(folder) == []
    why = "belongs to another user" if who == "another user's" else "may be written by other"
    assert f"no disk cache for this model: {folder} {why}" in caplog.text


def test_a_planted_file_is_refused_even_where_the_folder_was_opened(
    tiny_attn: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Someone who can write the folder (its mode loosened after the fact) but cannot read
    the key writes a file whose every other check passes: its MAC gives it away."""
    folder = tmp_path / "cache"
    with engine(tiny_attn, folder) as e:
        run(e, req("a", LONG + "hi"))
    (ours,) = files(folder)
    raw = ours.read_bytes()
    hlen = struct.unpack("<I", raw[8:12])[0]
    meta = json.loads(raw[12 : 12 + hlen])
    body = raw[12 + hlen :]
    tokens, cells = body[: 4 * meta["n_tokens"]], bytearray(body[4 * meta["n_tokens"] :])
    cells[len(cells) // 2] ^= 0x40  # the planted state
    meta["mac"] = cachefile.mac(b"a key of their own, not ours....", meta, tokens, bytes(cells))
    head = json.dumps(meta).encode()
    ours.write_bytes(raw[:8] + struct.pack("<I", len(head)) + head + tokens + bytes(cells))
    later = req("c", LONG + "go")
    with engine(tiny_attn, folder) as e:
        got = run(e, later)["c"]
        assert cached(got) < 4  # evaluated again, nothing of theirs restored
    assert not ours.exists() and "its MAC does not match" in caplog.text
    same(got, alone(tiny_attn, later))


def test_a_key_others_may_read_turns_the_disk_tier_off(
    tiny_attn: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "cache"
    key_file(folder).write_bytes(b"k" * cachefile.KEY_BYTES)
    key_file(folder).chmod(0o644)
    with engine(tiny_attn, folder) as e:
        assert e.parked is not None and e.parked.disk is None
    assert "may be read or written by other users (mode 644)" in caplog.text
