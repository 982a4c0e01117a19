"""A tiny GGUF whose greedy output is a given text: the "script model" for parser tests.

Owned by the test suite; used by the tool-call, reasoning and agent-API tests,
which need a real model (through libllama and our binding) that answers with
exactly a family's raw output, e.g. ``<tool_call>{"name": ...}</tool_call>``.

How it works: like ``tinymodel``, embeddings are one-hot and every block adds
nothing, so the next token is a fixed successor of the current token.  Each
script is reached from a *trigger*: a control token whose text is the tail of
the generation prompt (``"<|im_start|>assistant\\n"`` for a ChatML template).
The prompt is tokenized with special tokens parsed, longest first, so the
trigger is the prompt's last token, and greedy decoding walks

    trigger -> piece 1 -> piece 2 -> ... -> piece n -> EOS

Pieces: the script text is cut into pieces that are unique across the whole
vocabulary (successors are per token id, so a repeated piece would loop).
The strings named in ``control`` become CONTROL tokens, as markers such as
Mistral's ``[TOOL_CALLS]`` are in real GGUFs: detokenized without ``special``
they are empty, which is what the marker-preservation code must handle.  A
token has one successor, so a control marker is that token only where it first
occurs over all scripts (in order); later occurrences are cut into ordinary
pieces of the same text (harmony, for one, repeats ``<|channel|>``), and so is a
marker right after a text too short to be a new piece (see ``_script_tokens``).
Other pieces are USER_DEFINED tokens, whose text llama.cpp returns verbatim (no ``▁``
unescaping), so any text, DeepSeek's full-width markers included, round-trips.

Several scripts in one model: give each its own trigger, e.g. the tail after
a tool result (``"</tool_response><|im_end|>\\n<|im_start|>assistant\\n"``) for
the second turn of a tool round trip and the plain tail for the first; the
longer trigger wins when both match.

Every other token's successor is EOS, so a prompt without a trigger answers
with nothing.  The vocabulary also has the 256 byte-fallback tokens, so any
prompt tokenizes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

UNK, BOS = 0, 1
BYTE0 = 3
SHARPNESS = 10.0
_NORMAL, _UNKNOWN, _CONTROL, _USER, _BYTE = 1, 2, 3, 4, 6
_HEAD_DIM = 64


def segment(text: str, taken: set[str], *, longest: int = 6) -> list[str]:
    """Cut ``text`` into pieces none of which is in ``taken`` (updated in place).

    Prefers pieces of ``longest`` characters, shorter when that one is taken,
    then longer ones; a tail that fits nowhere is merged into the piece before.
    """
    pieces: list[str] = []
    i = 0
    while i < len(text):
        lengths = itertools.chain(
            range(min(longest, len(text) - i), 0, -1), range(longest + 1, len(text) - i + 1)
        )
        for n in lengths:
            cand = text[i : i + n]
            if cand not in taken:
                pieces.append(cand)
                taken.add(cand)
                i += n
                break
        else:
            if not pieces:
                raise ValueError(f"cannot cut {text!r} into unique pieces")
            prev = pieces.pop()
            taken.discard(prev)
            i -= len(prev)
            merged = text[i:]
            if merged in taken:
                raise ValueError(f"cannot cut {text!r} into unique pieces")
            pieces.append(merged)
            taken.add(merged)
            i = len(text)
    return pieces


def _cut(text: str, taken: set[str], longest: int = 6) -> list[str] | None:
    """``segment`` that leaves ``taken`` as it was and answers None where it fails."""
    trial = set(taken)
    try:
        pieces = segment(text, trial, longest=longest)
    except ValueError:
        return None
    taken |= trial
    return pieces


def _script_tokens(
    text: str, control: Sequence[str], taken: set[str], used: set[str], longest: int = 6
) -> list[str]:
    """The script as token texts: control markers whole where not ``used`` before (the
    set is updated), the rest cut into pieces.

    Text between two markers too short to be a new piece (a second ``"\\n"``) cannot
    be a token of its own: the marker after it is then text too, at that occurrence."""
    out: list[str] = []
    head, rest = "", text
    while rest:
        hits = [(rest.find(c), c) for c in control if c in rest and c not in used]
        if not hits:
            out += segment(head + rest, taken, longest=longest)
            break
        at, marker = min(hits, key=lambda h: (h[0], -len(h[1])))
        before = head + rest[:at]
        pieces = _cut(before, taken, longest) if before else []
        if pieces is None:
            head = before + marker
        else:
            out += [*pieces, marker]
            used.add(marker)
            head = ""
        rest = rest[at + len(marker) :]
    else:
        if head:
            out += segment(head, taken, longest=longest)
    return out


def make_script_model(
    dir: Path,
    scripts: Mapping[str, str],
    *,
    control: Sequence[str] = (),
    chat_template: str | None = None,
    eos: str = "</s>",
    bos: str = "<s>",
    add_bos: bool = True,
    name: str = "script.gguf",
    context: int = 2048,
    longest: int = 6,
) -> Path:
    """Write a model whose greedy reply to a prompt ending in trigger ``t`` is ``scripts[t]``.

    ``control`` lists marker strings that are CONTROL tokens (where each first
    occurs; see the module docstring).  ``eos`` is the end-of-generation token's text
    (``"<|im_end|>"`` for a ChatML family); ``bos`` and ``add_bos`` set the
    beginning-of-sequence token; ``context`` the training context (prompts with a
    long preamble are long here: most of their text is byte tokens).  Returns the
    file's path.  ``longest``: the longest piece a script is cut into (long replies in
    few tokens).
    """
    import gguf  # heavy import kept out of module import

    texts: list[str] = ["<unk>", bos, eos] + [f"<0x{b:02X}>" for b in range(256)]
    types: list[int] = [_UNKNOWN, _CONTROL, _CONTROL] + [_BYTE] * 256
    taken = set(texts)
    for t in [*scripts, *control]:
        if t in taken:
            raise ValueError(f"token text {t!r} used twice")
        texts.append(t)
        types.append(_CONTROL)
        taken.add(t)
    chains: list[list[str]] = []
    used: set[str] = set()
    for trigger, text in scripts.items():
        chains.append([trigger, *_script_tokens(text, control, taken, used, longest)])
    index = {t: i for i, t in enumerate(texts)}
    for chain in chains:
        for t in chain[1:]:
            if t not in index:
                index[t] = len(texts)
                texts.append(t)
                types.append(_USER)
    eos_id = index[eos]
    succ = {i: eos_id for i in range(len(texts))}
    for chain in chains:
        ids = [index[t] for t in chain] + [eos_id]
        for a, b in itertools.pairwise(ids):
            succ[a] = b
    n_vocab = len(texts)
    n_embd = -(-n_vocab // _HEAD_DIM) * _HEAD_DIM
    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("script")
    w.add_context_length(context)
    w.add_embedding_length(n_embd)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(n_embd // _HEAD_DIM)
    w.add_head_count_kv(n_embd // _HEAD_DIM)
    w.add_rope_dimension_count(_HEAD_DIM)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(0)
    w.add_tokenizer_model("llama")
    w.add_token_list(texts)
    w.add_token_scores([0.0] * n_vocab)
    w.add_token_types(types)
    w.add_bos_token_id(index[bos])
    w.add_eos_token_id(eos_id)
    w.add_unk_token_id(UNK)
    w.add_add_bos_token(add_bos)
    w.add_add_eos_token(False)
    w.add_add_space_prefix(False)
    if chat_template:
        w.add_chat_template(chat_template)
    f32 = np.float32
    emb = np.zeros((n_vocab, n_embd), dtype=f32)
    emb[np.arange(n_vocab), np.arange(n_vocab)] = 1.0
    out = np.zeros((n_vocab, n_embd), dtype=f32)
    for t, nxt in succ.items():
        out[nxt, t] = SHARPNESS / np.sqrt(n_embd)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(n_embd, dtype=f32))
    w.add_tensor("output.weight", out)
    zeros = np.zeros((n_embd, n_embd), dtype=f32)
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(n_embd, dtype=f32))
    for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
        w.add_tensor(p + part + ".weight", zeros)
    w.add_tensor(p + "ffn_norm.weight", np.ones(n_embd, dtype=f32))
    w.add_tensor(p + "ffn_gate.weight", np.zeros((64, n_embd), dtype=f32))
    w.add_tensor(p + "ffn_up.weight", np.zeros((64, n_embd), dtype=f32))
    w.add_tensor(p + "ffn_down.weight", np.zeros((n_embd, 64), dtype=f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
