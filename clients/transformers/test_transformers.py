"""The ``hf`` format in transformers itself (run by ``make test-clients`` in its own venv).

* It is what ``DataCollatorWithFlattening(return_flash_attn_kwargs=True)`` makes of the same pieces.
* A tiny random ``LlamaForCausalLM`` (CPU, float32) gives every token of a packed ``hf`` batch the log-prob it gets
  when its piece runs alone, and the batch the loss of its pieces run alone, with sdpa and eager attention:
  transformers finds the pieces from ``position_ids``
  (restarting at 0 in every piece), so no token attends across a document. A document longer than ctx is split
  across rows into pieces, each a sequence of its own (positions restart), so the reference runs each piece alone.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import DataCollatorWithFlattening, LlamaConfig, LlamaForCausalLM

from datatools import materialize, pack_lengths
from datatools.kernels.batch_layouts import IGNORE_INDEX, to_format

VOCAB = 300
CTX = 64


def packed_hf_batch(lengths, seed=0, ctx=CTX):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(1, VOCAB, int(np.sum(lengths))).astype(np.int32)
    offsets = np.concatenate(([0], np.cumsum(lengths)))
    plan = pack_lengths(np.asarray(lengths), ctx, algorithm="best_fit_decreasing")
    canonical = materialize(plan, tokens, offsets)
    return canonical, to_format(canonical, "hf")


def pieces_of(hf):
    cu = hf["cu_seq_lens_q"]
    ids = hf["input_ids"][0]
    return [ids[a:b] for a, b in zip(cu[:-1], cu[1:])]


LENGTHS = [5, 37, 100, 3, 64, 90, 1, 17, 150, 22, 8, 40]  # 100, 90 and 150 are split across rows at ctx 64


def test_hf_format_equals_data_collator_with_flattening():
    _, hf = packed_hf_batch(LENGTHS)
    collator = DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_position_ids=True, return_tensors="np")
    ref = collator([{"input_ids": p.tolist()} for p in pieces_of(hf)])
    for key in ("input_ids", "position_ids", "labels", "cu_seq_lens_q", "cu_seq_lens_k"):
        np.testing.assert_array_equal(np.asarray(ref[key]).reshape(-1), np.asarray(hf[key]).reshape(-1), err_msg=key)
    assert int(ref["max_length_q"]) == hf["max_length_q"] and int(ref["max_length_k"]) == hf["max_length_k"]
    assert set(ref) <= set(hf), set(ref) - set(hf)


def tiny_llama(attn: str) -> LlamaForCausalLM:
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4 * CTX,
        attn_implementation=attn,
    )
    return LlamaForCausalLM(cfg).float().eval()


def token_logprobs(model, ids: np.ndarray, position_ids: np.ndarray | None = None) -> np.ndarray:
    """log p(token j | tokens before j) for j >= 1 of one sequence (or a padding-free batch)."""
    with torch.no_grad():
        # use_cache=False, as in training: transformers looks for packed sequences only without a KV cache
        kwargs = {"input_ids": torch.as_tensor(ids[None, :], dtype=torch.long), "use_cache": False}
        if position_ids is not None:
            kwargs["position_ids"] = torch.as_tensor(position_ids[None, :], dtype=torch.long)
        logits = model(**kwargs).logits[0].double()
    logp = torch.log_softmax(logits, -1)
    nxt = torch.as_tensor(ids[1:], dtype=torch.long)
    return logp[:-1].gather(-1, nxt[:, None])[:, 0].numpy()


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
@pytest.mark.parametrize("seed", [0, 1])
def test_packed_logprobs_equal_each_piece_alone(attn, seed):
    rng = np.random.default_rng(seed)
    lengths = LENGTHS if seed == 0 else rng.integers(1, 150, 16).tolist()
    canonical, hf = packed_hf_batch(lengths, seed)
    assert (canonical["segment_ids"] > 0).sum() == sum(lengths)  # every token, once
    model = tiny_llama(attn)
    ids, pos, labels = hf["input_ids"][0], hf["position_ids"][0], hf["labels"][0]
    packed = token_logprobs(model, ids, pos)  # packed[j - 1] = log p(ids[j] | ...)
    cu = hf["cu_seq_lens_q"]
    worst = 0.0
    checked = 0
    every = []
    for a, b in zip(cu[:-1], cu[1:]):
        if b - a < 2:
            continue
        alone = token_logprobs(model, ids[a:b])
        every.append(alone)
        got = packed[a : b - 1]
        worst = max(worst, float(np.abs(got - alone).max()))
        checked += b - a - 1
        # the labels HF trains on are exactly these predictions
        np.testing.assert_array_equal(labels[a + 1 : b], ids[a + 1 : b])
        assert labels[a] == IGNORE_INDEX
    assert checked == int((labels != IGNORE_INDEX).sum())
    # the whole batch as a trainer feeds it (every key, flash-attention kwargs included): HF's own loss is the
    # mean loss of the pieces run alone
    feed = {
        k: torch.as_tensor(v).long()
        if k in ("input_ids", "position_ids", "labels")
        else (torch.as_tensor(v) if isinstance(v, np.ndarray) else v)
        for k, v in hf.items()
    }
    with torch.no_grad():
        loss = float(model(**feed, use_cache=False).loss)
    np.testing.assert_allclose(loss, -np.concatenate(every).mean(), rtol=1e-5)
    print(f"{attn} seed {seed}: {checked} tokens, max abs log-prob diff {worst:.2e}")
    assert worst < 1e-4, worst


def sequence_starts(position_ids) -> np.ndarray:
    """Where transformers finds each packed sequence of one row, from its ``position_ids`` alone."""
    from transformers.masking_utils import find_packed_sequence_indices

    found = find_packed_sequence_indices(torch.as_tensor(np.asarray(position_ids)[None], dtype=torch.long))
    if found is None:  # no packing seen: the whole row is one sequence
        return np.array([0])
    return np.flatnonzero(np.diff(found[0].numpy(), prepend=-1) != 0)


def test_a_shared_position_run_would_merge_documents():
    """Why positions restart: with continued positions transformers cannot see where a continuation piece
    starts when its offset happens to follow the previous piece's last position.

    The case, built: a row holding document A (5 tokens), then the second piece of a split document B whose first
    piece held 5 tokens (so with ``positions: continue`` it counts 5, 6, 7), then document C (4 tokens). Continued,
    the row reads 0-4, 5-7, 0-3: A and B's piece form one run, and transformers finds two sequences where there are
    three (B's tokens would attend to A). Restarted (datatools' default) it reads 0-4, 0-2, 0-3: three sequences.
    Then the real hf batch of LENGTHS: every piece datatools packed is found."""
    a, b_piece, c = list(range(5)), list(range(3)), list(range(4))
    continued = a + [5 + p for p in b_piece] + c
    restarted = a + b_piece + c
    np.testing.assert_array_equal(sequence_starts(continued), [0, 8])  # A and B merged
    np.testing.assert_array_equal(sequence_starts(restarted), [0, 5, 8])

    _, hf = packed_hf_batch(LENGTHS)
    np.testing.assert_array_equal(sequence_starts(hf["position_ids"][0]), hf["cu_seq_lens_q"][:-1])
