"""Counting tokens for length analysis: bounded batches, only lengths kept, huge texts in exact pieces
(issue 21, defect 9)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import datatools.io.formats.tokenizer as tokenizer_module
from conftest import stdlib_texts
from datatools.io import open_encoder
from datatools.io.formats.tokenizer import split_text
from datatools.io.sources.inputs import InputOptions, open_input, read_lengths


class Spy:
    """A tokenizer that records what each call was given (the longest text, the characters per call)."""

    def __init__(self, tok):
        self.tok, self.calls = tok, []
        self.pre_tokenizer = tok.pre_tokenizer

    def _record(self, texts):
        self.calls.append((len(texts), sum(map(len, texts)), max(map(len, texts), default=0)))

    def encode_batch_fast(self, texts, **kw):
        self._record(texts)
        return self.tok.encode_batch_fast(texts, **kw)

    def encode_batch(self, texts, **kw):
        self._record(texts)
        return self.tok.encode_batch(texts, **kw)


CORPUS = "\n\n".join(stdlib_texts())  # real text (module level: a failing example does not print it whole)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), piece=st.integers(100, 2000), window=st.integers(8, 200))
def test_pieces_count_what_the_whole_text_counts(data, piece, window, tokenizer_file, monkeypatch):
    """Cut at pre-token boundaries, the pieces' counts add up to the whole text's (pieces longer than any one
    pre-token of the text: identifiers, comment rules and indentation of the stdlib are under 100 characters)."""
    monkeypatch.setattr(tokenizer_module, "PIECE_CHARS", piece)
    monkeypatch.setattr(tokenizer_module, "CUT_WINDOW", window)
    enc = open_encoder(tokenizer_file, eos="auto")
    n = data.draw(st.integers(1, 6))
    docs = []
    for _ in range(n):
        a = data.draw(st.integers(0, len(CORPUS) - 1))
        docs.append(CORPUS[a : a + data.draw(st.integers(0, 3000))])
    ids = [e.ids + [enc.eos_id] for e in enc.tokenizer.encode_batch(docs, add_special_tokens=False)]  # whole
    whole = np.array([len(x) for x in ids])
    assert np.array_equal(enc.count_tokens(docs), whole)
    tokens, lengths = enc.encode(docs)  # pretokenize's path: pieces too (issue 36), the same ids
    assert np.array_equal(lengths, whole)
    assert np.array_equal(tokens, np.array([t for x in ids for t in x], np.int64))
    for d in docs:
        parts = list(split_text(enc.tokenizer, d))
        assert "".join(parts) == d and all(len(p) <= max(piece, 1) for p in parts)


@pytest.mark.parametrize("path_kind", ["analysis", "pretokenize"])
def test_analysis_tokenizes_in_bounded_batches_and_a_huge_line_in_pieces(
    tmp_path, tokenizer_file, monkeypatch, path_kind
):
    """read_lengths never hands the tokenizer a text over PIECE_CHARS nor a call over LENGTH_BATCH_CHARS, and
    the counts are exact: a 600 KB line and 3,000 short ones."""
    monkeypatch.setattr(tokenizer_module, "LENGTH_BATCH_CHARS", 1 << 18)
    monkeypatch.setattr(tokenizer_module, "PIECE_CHARS", 1 << 16)
    huge = (CORPUS * (600_000 // len(CORPUS) + 1))[:600_000]
    short = [CORPUS[i : i + 200] for i in range(0, 600_000, 200)][:3000]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in [short[0], huge, *short[1:]]))
    inp = open_input(path, InputOptions(tokenizer=tokenizer_file))
    whole = inp.encoder.tokenizer.encode_batch([short[0], huge, *short[1:]], add_special_tokens=False)
    expected = np.array([len(e.ids) for e in whole])
    want_ids = np.concatenate([np.array(e.ids, np.int64) for e in whole])
    spy = Spy(inp.encoder.tokenizer)
    inp.encoder._tok = spy
    if path_kind == "analysis":
        lengths = read_lengths(inp)
    else:  # what pretokenize's ShardTokenizer calls: ids kept, the same bounds (issue 36: a 50 MB line, 3.16 GB)
        tokens, lengths = inp.encoder.encode([short[0], huge, *short[1:]])
        assert np.array_equal(tokens, want_ids)
    assert np.array_equal(lengths, expected)
    assert spy.calls, "the tokenizer was never called"
    assert max(c[2] for c in spy.calls) <= 1 << 16  # the longest text given at once
    assert max(c[1] for c in spy.calls) <= 1 << 18  # characters per call
    assert max(c[0] for c in spy.calls) <= tokenizer_module.LENGTH_BATCH_TEXTS


class Held:
    """An Encoding as the tokenizer returned it, counted while alive (``tokenizers.Encoding`` takes no weakref)."""

    alive = 0

    def __init__(self, encoding):
        self.ids = encoding.ids
        Held.alive += 1

    def __len__(self):
        return len(self.ids)

    def __del__(self):
        Held.alive -= 1


@pytest.mark.parametrize("keep", ["ids", "lengths"])
def test_one_batch_of_encodings_is_alive_at_a_time(tokenizer_file, monkeypatch, keep):
    """A long document's Encodings (~100 bytes a token in ``tokenizers``) are freed before the next call makes
    more: a 50 MB line held two batches of them at once and peaked at 1.16 GB (issue 57). Counted: at each call,
    no Encoding of an earlier call is still alive; the ids are those of the whole text."""
    monkeypatch.setattr(tokenizer_module, "LENGTH_BATCH_CHARS", 1 << 14)
    monkeypatch.setattr(tokenizer_module, "PIECE_CHARS", 1 << 12)
    enc = open_encoder(tokenizer_file)
    tok = enc.tokenizer
    alive_at_calls: list[int] = []

    class Counting:
        pre_tokenizer = tok.pre_tokenizer

        def encode_batch_fast(self, texts, **kw):
            alive_at_calls.append(Held.alive)
            return [Held(e) for e in tok.encode_batch_fast(texts, **kw)]

        encode_batch = encode_batch_fast

    huge = (CORPUS * (200_000 // len(CORPUS) + 1))[:200_000]
    want = tok.encode(huge, add_special_tokens=False).ids
    enc._tok = Counting()
    Held.alive = 0
    if keep == "ids":
        tokens, lengths = enc.encode([huge, "a short one"])
        assert np.array_equal(tokens[: len(want)], want) and lengths[0] == len(want)
    else:
        assert enc.count_tokens([huge, "a short one"])[0] == len(want)
    assert len(alive_at_calls) >= 10, alive_at_calls  # 200 KB in calls of at most 16 KB
    assert alive_at_calls == [0] * len(alive_at_calls), alive_at_calls
