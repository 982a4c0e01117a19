"""Tiny reranker GGUFs, generated at test time, whose scores are known exactly.

Two: a causal one (``make_rerank_model``, Qwen3-Reranker's kind: a KV cache, the
head on the last token, a softmax) and a bidirectional one (``make_bert_reranker``,
bge-reranker's kind: no KV cache, the head on the first token, a logit); the
second is described with its code, at the end.

A one-layer ``qwen3`` model with ``pooling_type = rank``, the classifier labels
``yes``/``no`` and a ``cls.output`` head, as llama.cpp's converter writes
Qwen3-Reranker: llama.cpp reads the last token's state, applies the head and a
softmax, and the score is P(yes).  The vocabulary is tinymodel's (one token a
character; ``<s>`` BOS, ``</s>`` EOS).

How the weights make relevance a known function of the tokens: embeddings are
one-hot; Q and K are zero, so every token attends equally to itself and all the
tokens before it in its own sequence; V and the attention output are the
identity, so the last token's state is its own one-hot vector plus the average
of the (RMS-normed) one-hot vectors of the whole pair; the feed-forward blocks
are zero.  The head's ``yes`` row weighs each token (``WEIGHTS``: the letters of
``RELEVANT`` count for, everything else a little against) and its ``no`` row is
zero, so a pair scores sigmoid(weights · normalised state): the larger the share
of ``RELEVANT`` letters in the pair, the higher.  ``expected_score(tokens)``
computes it in float64 from the token ids; llama.cpp's float32 agrees to ~1e-5.
One pair's score depends on nothing but its own tokens, so a test that batches
many pairs into one decode proves no sequence saw another's.

``make_rerank_model(dir, template=...)``: with ``TEMPLATE`` (the default) the GGUF
carries it as ``tokenizer.chat_template.rerank``; with ``template=None`` it has
none and the pair is llama-server's layout (for this vocabulary: BOS, query,
document: SentencePiece adds no EOS and has no separator).
``make_rerank_model(dir, head=False)`` writes the same model without its head:
rank pooling over hidden states, what must never pass for scores.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tests.support.tinymodel import BOS, EOS, N_EMBD, N_VOCAB, token_id, tokenize, write_vocab

N_HEAD = 6
RELEVANT = "xyz"
TEMPLATE = "<s>q:{query};d:{document}."
"""The pair template: ``<s>`` is read as BOS (control tokens parse in a template)."""
EPS = 1e-6
ATTN = 1.0  # attention output scale


def weights() -> np.ndarray:
    """The head's ``yes`` row, per token id."""
    w = np.full(N_EMBD, -0.02)
    for ch in RELEVANT:
        w[token_id(ch)] = 0.15
    w[BOS] = -0.05
    return w


def pair_ids(query: str, doc: str, template: str | None = TEMPLATE) -> list[int]:
    """The token ids of a pair as the reranker reads it."""
    if template is None:
        return [BOS, *tokenize(query, bos=False), *tokenize(doc, bos=False)]
    head, rest = template.split("{query}")
    mid, tail = rest.split("{document}")
    assert head.startswith("<s>")
    return [BOS, *tokenize(head[3:] + query + mid + doc + tail, bos=False)]


def expected_score(ids: list[int]) -> float:
    """The reranker's score for a pair's token ids (float64)."""
    n = len(ids)
    counts = np.zeros(N_EMBD)
    for t in ids:
        counts[t] += 1
    scale = 1.0 / math.sqrt(1.0 / N_EMBD + EPS)  # RMS norm of a one-hot vector
    h = np.zeros(N_EMBD)
    h[ids[-1]] = 1.0
    h += ATTN * scale * counts / n
    h /= math.sqrt(float(np.mean(h * h)) + EPS)
    logit = float(weights() @ h)
    return 1.0 / (1.0 + math.exp(-logit))


def make_rerank_model(
    dir: Path,
    *,
    template: str | None = TEMPLATE,
    head: bool = True,
    name: str = "rerank.gguf",
    n_ctx_train: int = 2048,
    pooling: str = "rank",
) -> Path:
    """Write the tiny reranker into ``dir`` and return its path (see the module doc);
    ``pooling`` is the pooling type its metadata names."""
    import gguf

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    w = gguf.GGUFWriter(str(path), "qwen3")
    w.add_name("tiny-rerank")
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD)
    w.add_rope_dimension_count(N_EMBD // N_HEAD)
    w.add_layer_norm_rms_eps(EPS)
    w.add_file_type(0)
    w.add_pooling_type(gguf.PoolingType[pooling.upper()])
    if head:
        w.add_classifier_output_labels(["yes", "no"])
    write_vocab(w)
    if template is not None:
        w.add_chat_template([{"name": "rerank", "template": template}])

    f32 = np.float32
    emb = np.zeros((N_VOCAB, N_EMBD), dtype=f32)
    emb[np.arange(N_VOCAB), np.arange(N_VOCAB)] = 1.0
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=f32))
    if head:
        cls = np.zeros((2, N_EMBD), dtype=f32)
        cls[0] = weights()
        w.add_tensor("cls.output.weight", cls)
    eye = np.eye(N_EMBD, dtype=f32)
    zeros = np.zeros((N_EMBD, N_EMBD), dtype=f32)
    p = "blk.0."
    w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=f32))
    w.add_tensor(p + "attn_q.weight", zeros)
    w.add_tensor(p + "attn_k.weight", zeros)
    w.add_tensor(p + "attn_v.weight", eye)
    w.add_tensor(p + "attn_output.weight", eye * f32(ATTN))
    w.add_tensor(p + "attn_q_norm.weight", np.ones(N_EMBD // N_HEAD, dtype=f32))
    w.add_tensor(p + "attn_k_norm.weight", np.ones(N_EMBD // N_HEAD, dtype=f32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=f32))
    w.add_tensor(p + "ffn_gate.weight", np.zeros((64, N_EMBD), dtype=f32))
    w.add_tensor(p + "ffn_up.weight", np.zeros((64, N_EMBD), dtype=f32))
    w.add_tensor(p + "ffn_down.weight", np.zeros((N_EMBD, 64), dtype=f32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# -- a bidirectional (BERT) reranker -----------------------------------------------------
# A one-layer ``bert`` model with rank pooling and bge-reranker's head (``cls``: a dense
# layer and tanh, ``cls.output``: one logit) over the same one-hot vocabulary.  Q and K
# are zero, so every token attends equally to every token of its pair, both ways; the
# head reads the first token (BOS), which so sees the whole pair.  Its tokenizer lays a
# pair out as XLM-RoBERTa's does: ``<s> query </s> </s> document </s>`` (BOS and EOS
# added, EOS as the separator).  The score is the logit; the daemon's relevance is its
# sigmoid.  No KV cache: every pair is evaluated whole.
BERT_EPS = 1e-5
CLS_SCALE = 0.2


def bert_weights() -> np.ndarray:
    """The head's output row, per unit of the pooled state."""
    w = np.full(N_EMBD, -0.05)
    for ch in RELEVANT:
        w[token_id(ch)] = 1.0
    return w


def bert_pair_ids(query: str, doc: str) -> list[int]:
    return [BOS, *tokenize(query, bos=False), EOS, EOS, *tokenize(doc, bos=False), EOS]


def expected_bert_logit(ids: list[int]) -> float:
    """The BERT reranker's raw score (the head's logit) for a pair's token ids."""

    def norm(x: np.ndarray) -> np.ndarray:
        c = x - x.mean()
        return c / math.sqrt(float(np.mean(c * c)) + BERT_EPS)

    onehot = np.zeros((len(ids), N_EMBD))
    onehot[np.arange(len(ids)), ids] = 1.0
    x = np.stack([norm(r) for r in onehot])  # the embeddings' layer norm
    attended = x.mean(axis=0)  # V and the output are the identity
    h = norm(norm(attended + x[0]))  # attention norm, then (the FFN being zero) the output one
    return float(bert_weights() @ np.tanh(CLS_SCALE * h))


def make_bert_reranker(dir: Path, name: str = "bert-rerank.gguf") -> Path:
    """Write the BERT reranker into ``dir`` and return its path (see above)."""
    import gguf

    from tests.support.tinymodel import EOS as _EOS, UNK, _vocab

    dir.mkdir(parents=True, exist_ok=True)
    path = dir / name
    w = gguf.GGUFWriter(str(path), "bert")
    w.add_name("tiny-bert-rerank")
    w.add_context_length(512)
    w.add_embedding_length(N_EMBD)
    w.add_block_count(1)
    w.add_feed_forward_length(64)
    w.add_head_count(N_HEAD)
    w.add_layer_norm_eps(BERT_EPS)
    w.add_causal_attention(False)
    w.add_file_type(0)
    w.add_pooling_type(gguf.PoolingType.RANK)
    tokens, scores, types = _vocab()
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_token_type_count(2)
    w.add_bos_token_id(BOS)
    w.add_eos_token_id(_EOS)
    w.add_unk_token_id(UNK)
    w.add_sep_token_id(_EOS)
    w.add_add_bos_token(True)
    w.add_add_eos_token(True)
    w.add_add_sep_token(True)
    w.add_add_space_prefix(False)

    f32 = np.float32
    d = N_EMBD
    emb = np.zeros((N_VOCAB, d), dtype=f32)
    emb[np.arange(N_VOCAB), np.arange(N_VOCAB)] = 1.0
    ones, zeros = np.ones(d, dtype=f32), np.zeros(d, dtype=f32)
    w.add_tensor("token_embd.weight", emb)
    w.add_tensor("position_embd.weight", np.zeros((512, d), dtype=f32))
    w.add_tensor("token_embd_norm.weight", ones)
    w.add_tensor("token_embd_norm.bias", zeros)
    w.add_tensor("cls.weight", np.eye(d, dtype=f32) * f32(CLS_SCALE))
    w.add_tensor("cls.bias", zeros)
    w.add_tensor("cls.output.weight", bert_weights().astype(f32)[None, :])
    w.add_tensor("cls.output.bias", np.zeros(1, dtype=f32))
    p = "blk.0."
    w.add_tensor(p + "attn_q.weight", np.zeros((d, d), dtype=f32))
    w.add_tensor(p + "attn_k.weight", np.zeros((d, d), dtype=f32))
    w.add_tensor(p + "attn_v.weight", np.eye(d, dtype=f32))
    w.add_tensor(p + "attn_output.weight", np.eye(d, dtype=f32))
    w.add_tensor(p + "attn_output_norm.weight", ones)
    w.add_tensor(p + "attn_output_norm.bias", zeros)
    w.add_tensor(p + "ffn_up.weight", np.zeros((64, d), dtype=f32))
    w.add_tensor(p + "ffn_down.weight", np.zeros((d, 64), dtype=f32))
    w.add_tensor(p + "layer_output_norm.weight", ones)
    w.add_tensor(p + "layer_output_norm.bias", zeros)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
