"""Idle slots parked in host memory (engine/park.py): out of the KV cache, back bit for bit.

The tiny model with attention on makes every logprob depend on every cell a
request attends over, so a restored cell with the wrong keys, values or
position changes the numbers: each reuse is compared with the same request run
alone in a fresh engine.
"""

from __future__ import annotations

from pathlib import Path

from localllm.engine.engine import Engine
from localllm.runner.messages import CompletionRequest
from tests.support.engine_steps import SYSTEM, Result, alone, opts, req, run, same

OTHER = "0123456789 " * 3


def other(id: str, text: str = OTHER) -> CompletionRequest:
    # No BOS either: it shares no cell with anything, so it goes to the empty slot.
    return req(id, text, add_special=False)


def engine(model: Path, n_parallel: int = 2, **kw: object) -> Engine:
    return Engine(
        [str(model)], opts(n_ctx=512, n_parallel=n_parallel, n_batch=64, n_ubatch=64, **kw)
    )


def holds(e: Engine, seq: int) -> bool:
    return e.ctx.seq_pos_min(seq) >= 0


def cached(r: Result) -> int:
    assert r.done is not None
    return r.done.cached_tokens


def test_a_started_request_parks_the_idle_slot_which_comes_back_bit_for_bit(
    tiny_attn: Path,
) -> None:
    first, later = req("a", SYSTEM + "hi"), req("c", SYSTEM + "go")
    with engine(tiny_attn) as e:
        assert e.parked is not None and e.parked.budget > 0  # on by default: the KV's size
        run(e, first)
        (idle,) = [s for s in e.slots if s.cache]
        assert holds(e, idle.seq)
        run(e, other("b"))  # starting it parks "a"'s slot: its cells leave the KV cache
        assert not holds(e, idle.seq) and not idle.cache
        (parked,) = e.parked.entries
        system = e.tokenize(SYSTEM)
        assert parked.tokens[: len(system) - 1] == system[:-1]
        assert e.parked.used == parked.size > 0
        got = run(e, later)["c"]
        # The system prompt came back from host memory instead of being evaluated again.
        assert cached(got) >= len(e.tokenize(SYSTEM)) - 1
        # The copy stays (the next prompt may want more of it), as the most recently used.
        assert any(x is parked for x in e.parked.entries)
    same(got, alone(tiny_attn, later))


def test_a_slot_taken_over_keeps_a_copy_of_the_cells_it_loses(tiny_attn: Path) -> None:
    later = req("c", SYSTEM + "go")
    with engine(tiny_attn, n_parallel=1) as e:
        run(e, req("a", SYSTEM + "hi"))
        (slot,) = e.slots
        run(e, req("b", OTHER))  # shares only the BOS cell: the rest of "a" is cut
        assert slot.cache[:2] == e.tokenize(OTHER)[:2]
        (kept,) = e.parked.entries
        assert kept.tokens[: len(e.tokenize(SYSTEM)) - 1] == e.tokenize(SYSTEM)[:-1]
        got = run(e, later)["c"]
        assert cached(got) >= len(e.tokenize(SYSTEM)) - 1
    same(got, alone(tiny_attn, later))


def test_with_the_cache_off_idle_slots_keep_their_cells(tiny_attn: Path) -> None:
    with engine(tiny_attn, prompt_cache=0) as e:
        assert e.parked is None
        run(e, req("a", SYSTEM + "hi"))
        (idle,) = [s for s in e.slots if s.cache]
        run(e, other("b"))
        assert holds(e, idle.seq) and idle.cache  # reused from the KV cache itself
        got = run(e, req("c", SYSTEM + "go"))["c"]
        assert cached(got) >= len(e.tokenize(SYSTEM)) - 1


def test_a_copy_over_the_budget_is_dropped_and_the_prompt_evaluated_again(tiny_attn: Path) -> None:
    later = req("c", SYSTEM + "go")
    with engine(tiny_attn, prompt_cache=1024) as e:  # far less than one slot's cells
        run(e, req("a", SYSTEM + "hi"))
        (idle,) = [s for s in e.slots if s.cache]
        run(e, other("b"))
        assert not holds(e, idle.seq) and not e.parked.entries and e.parked.used == 0
        got = run(e, later)["c"]
        assert cached(got) < 4
    same(got, alone(tiny_attn, later))


def test_one_copy_of_slots_holding_the_same_cells_and_the_oldest_goes_first(
    tiny_attn: Path,
) -> None:
    twins = [req(f"t{i}", SYSTEM + "hi") for i in range(2)]  # greedy: the same cells twice
    with engine(tiny_attn, n_parallel=3) as e:
        run(e, *twins)
        run(e, other("b"))
        (parked,) = e.parked.entries
        size = parked.size
        # Room for about two copies this size: the third to arrive pushes out the oldest.
        e.parked.budget = 2 * size + size // 2
        run(e, req("d", "zz" + SYSTEM))
        run(e, req("f", "yy" + SYSTEM))
        run(e, other("g", OTHER + "x"))  # parks "f"'s slot
        assert all(x is not parked for x in e.parked.entries)
        assert e.parked.entries[-1].tokens[:8] == e.tokenize("yy" + SYSTEM)[:8]
        assert e.parked.used == sum(x.size for x in e.parked.entries) <= e.parked.budget


def test_parking_the_slot_to_make_way_never_pushes_out_the_copy_coming_back(
    tiny_attn: Path,
) -> None:
    later = req("c", SYSTEM + "go")
    with engine(tiny_attn, n_parallel=1) as e:
        run(e, req("a", SYSTEM + "hi"))
        run(e, other("b"))  # the only slot: "a" is kept as a copy, then cut
        (kept,) = e.parked.entries
        e.parked.budget = kept.size  # room for that copy alone
        got = run(e, later)["c"]  # "b"'s cells are parked to make way, "a"'s come back
        assert cached(got) >= len(e.tokenize(SYSTEM)) - 1
        assert e.parked.used <= e.parked.budget
    same(got, alone(tiny_attn, later))


def test_a_copy_stays_when_a_prompt_takes_only_part_of_it(tiny_attn: Path) -> None:
    later = req("d", SYSTEM + "go")
    with engine(tiny_attn) as e:
        run(e, req("a", SYSTEM + "hi"))
        run(e, other("b"))
        (parked,) = e.parked.entries
        run(e, req("c", "x"))  # one shared token (BOS): not worth bringing the copy back
        assert any(x is parked for x in e.parked.entries)
        half = req("h", SYSTEM[:120] + "zz")
        assert cached(run(e, half)["h"]) >= 100  # brought back, then cut after ~120 cells
        assert any(x is parked for x in e.parked.entries)  # and still whole here
        got = run(e, later)["d"]
        assert cached(got) >= len(e.tokenize(SYSTEM)) - 1
    same(got, alone(tiny_attn, later))


def test_a_sliding_window_copy_serves_only_prompts_that_continue_it_whole() -> None:
    from localllm.engine.park import Parked

    copy = Parked(tokens=list(range(100)), adapters=(), exact=-1, data=None, size=1)
    longer = [*range(100), 7, 8]
    diverging = [*range(60), 999]
    assert copy.reusable(longer, (), n_swa=32) == 100  # the next position's window is there
    assert copy.reusable(diverging, (), n_swa=32) == 0  # cells 28..59 were never saved
    assert copy.reusable(diverging, (), n_swa=0) == 60  # no window: any prefix
    assert copy.reusable(diverging, (), n_swa=128) == 60  # all of it fits the window
    assert copy.reusable(longer, ("lora",), n_swa=0) == 0  # other adapters, other cells
