"""The ``curriculum:`` pipeline: batches of one of K lengths and tokens_per_batch slots, every (document, token
range) once per epoch (by hash), the same batches for the same config and seed, exact elastic resume from 4 hosts
to 2 in the middle of the schedule, and clear errors for bad configs."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from datatools.grain.portable_state import host_state
from datatools.io.sources.documents import ArrayDocuments
from datatools.pipeline import build_canonical, parse_config

LENGTHS = [32, 64, 128, 256]
TPB = 1024  # rows: 32, 16, 8, 4 (all divide over 1, 2 and 4 hosts)


@pytest.fixture(scope="module")
def docs():
    rng = np.random.default_rng(11)
    return id_documents(np.clip(rng.lognormal(3.8, 1.1, 700), 1, 900).astype(np.int64))


def cfg(hosts=1, index=0, schedule="grow_p2", **extra):
    return parse_config(
        {
            "source": {"path": "ids"},
            "curriculum": {"lengths": LENGTHS, "tokens_per_batch": TPB, "schedule": schedule, "tile": 32},
            "seed": 5,
            "shard": {"index": index, "count": hosts},
            **extra,
        }
    )


def id_documents(lengths) -> ArrayDocuments:
    """Document i is ``len_i`` tokens, all ``i + 1`` (padding 0): every token names its document."""
    lengths = np.asarray(lengths, np.int64)
    return ArrayDocuments(
        np.repeat(np.arange(1, lengths.shape[0] + 1, dtype=np.int32), lengths),
        np.concatenate(([0], np.cumsum(lengths))),
    )


def union(per_host: list[dict]) -> dict:
    return {k: np.concatenate([b[k] for b in per_host]) for k in per_host[0]}


def assert_batches_equal(a: dict, b: dict, where: str):
    for k in ("tokens", "segment_ids", "positions", "loss_mask"):
        np.testing.assert_array_equal(a[k], b[k], err_msg=f"{where}: {k}")


def ranges(batches) -> list[tuple[int, int, int]]:
    """(document, first token, tokens) of every segment delivered: a run of one segment id in a row."""
    out = []
    for b in batches:
        for row in range(b["segment_ids"].shape[0]):
            seg = b["segment_ids"][row]
            for s in np.unique(seg[seg > 0]):
                at = np.flatnonzero(seg == s)
                out.append((int(b["tokens"][row, at[0]]) - 1, int(b["positions"][row, at[0]]), int(at.shape[0])))
    return out


def tokens_hash(triples) -> bytes:
    """Hash of the multiset of (document, token) the ranges cover (ranges cut into single tokens, sorted)."""
    t = np.asarray(triples, np.int64).reshape(-1, 3)
    doc = np.repeat(t[:, 0], t[:, 2])
    first = np.repeat(np.cumsum(t[:, 2]) - t[:, 2], t[:, 2])
    pos = np.repeat(t[:, 1], t[:, 2]) + np.arange(int(t[:, 2].sum())) - first
    both = np.stack([doc, pos], 1)
    return hashlib.sha256(both[np.lexsort(both.T[::-1])].tobytes()).digest()


def data_hash(docs) -> bytes:
    lengths = np.diff(docs.offsets)
    return tokens_hash(np.stack([np.arange(lengths.shape[0]), np.zeros_like(lengths), lengths], 1))


@pytest.mark.parametrize(
    "schedule", ["grow_p2", "mix", [{"until": 0.3, "odds": [8, 4, 1, 0]}, {"until": 1.0, "odds": [1, 1, 1, 1]}]]
)
def test_every_token_once_and_one_length_per_batch(docs, schedule):
    batches = list(build_canonical(cfg(schedule=schedule), docs).dataset)
    for b in batches:
        rows, width = b["tokens"].shape
        assert width in LENGTHS and rows * width == TPB
        for row in range(rows):  # no attention crosses a document: a segment holds one document's tokens
            seg = b["segment_ids"][row]
            for s in np.unique(seg[seg > 0]):
                assert np.unique(b["tokens"][row][seg == s]).shape[0] == 1
    assert tokens_hash(ranges(batches)) == data_hash(docs)  # every (document, token) exactly once
    slots = len(batches) * TPB
    assert 1 - int(np.diff(docs.offsets).sum()) / slots < 0.03  # padding: the shortest's last batch and packing


def test_same_config_and_seed_same_batches_and_grow_p2_grows(docs):
    a = list(build_canonical(cfg(), docs).dataset)
    b = list(build_canonical(cfg(), docs).dataset)
    for i, (x, y) in enumerate(zip(a, b)):
        assert_batches_equal(x, y, f"batch {i}")
    other = list(build_canonical(cfg().replace(seed=6), docs).dataset)
    assert any(
        x["tokens"].shape != y["tokens"].shape or not np.array_equal(x["tokens"], y["tokens"]) for x, y in zip(a, other)
    )
    width = np.asarray([x["tokens"].shape[1] for x in a])
    half = width.shape[0] // 2
    assert width[:half].mean() < width[half:].mean()  # short first, long later


@pytest.mark.parametrize("workers", [0, 2])
def test_elastic_four_hosts_to_two_mid_schedule(docs, workers):
    one = list(build_canonical(cfg(num_epochs=2), docs).dataset)
    per_epoch = len(one) // 2
    k = per_epoch + per_epoch // 2  # the middle of the second epoch's schedule
    four = [iter(build_canonical(cfg(4, h, num_epochs=2), docs).dataset) for h in range(4)]
    seen = []
    for step in range(k):
        rows = [next(it) for it in four]
        assert_batches_equal(union(rows), one[step], f"4 hosts, step {step}")
        if step >= per_epoch:
            seen += rows
    state = host_state([it.get_state() for it in four])
    two = [iter(build_canonical(cfg(2, h, num_epochs=2, workers=workers * (h == 1)), docs).dataset) for h in range(2)]
    for it in two:
        it.set_state(state)
    rest = list(zip(*[list(it) for it in two]))
    two[1].close()
    assert len(rest) == len(one) - k
    for step, rows in enumerate(rest):
        assert_batches_equal(union(list(rows)), one[k + step], f"2 hosts, step {k + step}")
        seen += rows
    assert tokens_hash(ranges(seen)) == data_hash(docs)  # the second epoch: every piece once across the change


@pytest.mark.parametrize(
    "section, message",
    [
        ({"lengths": [64, 32], "tokens_per_batch": 1024}, "curriculum.lengths must be increasing"),
        ({"lengths": [32, 96], "tokens_per_batch": 1024, "tile": 32}, "96 does not divide it"),
        ({"lengths": [100], "tokens_per_batch": 1000}, "multiples of curriculum.tile=128; got 100"),
        ({"lengths": [128, 256], "tokens_per_batch": 1024, "schedule": "grow"}, "'mix', 'grow_p2'; got 'grow'"),
        ({"lengths": [128, 256], "tokens_per_batch": 1024, "odds": [1, 2]}, "odds is for schedule: mix"),
        ({"lengths": [128, 256], "tokens_per_batch": 1024, "schedule": "mix", "odds": [1]}, "one odds per length"),
        (
            {"lengths": [128, 256], "tokens_per_batch": 1024, "schedule": [{"until": 0.5, "odds": [0, 0]}]},
            "some odds > 0",
        ),
        (
            {
                "lengths": [128],
                "tokens_per_batch": 1024,
                "schedule": [{"until": 0.5, "odds": [1]}, {"until": 0.2, "odds": [1]}],
            },
            "until must increase",
        ),
    ],
)
def test_bad_curriculum_named(section, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("[", r"\[")):
        parse_config({"source": {"path": "x"}, "curriculum": section})


@pytest.mark.parametrize("pack", [32, 64])
def test_pack_length_puts_the_remainders_in_rows_of_that_length(docs, pack):
    """pack_length: the remainders share rows of that length (segment ids); a row of any other length but the
    shortest (which also takes the few pieces cut again to complete the batches) is one document's piece."""
    batches = list(build_canonical(_with(pack_length=pack), docs).dataset)
    shared = set()
    for b in batches:
        width = b["tokens"].shape[1]
        several = (b["segment_ids"].max(axis=1) > 1).any()
        if several:
            shared.add(width)
        if width not in (pack, LENGTHS[0]):
            assert not several
    assert pack in shared
    assert tokens_hash(ranges(batches)) == data_hash(docs)
    with pytest.raises(ValueError, match=r"curriculum.pack_length=48 must be one of curriculum.lengths \[32, 64\]"):
        parse_config(
            {
                "source": {"path": "x"},
                "curriculum": {"lengths": [32, 64], "tokens_per_batch": 128, "tile": 16, "pack_length": 48},
            }
        )


def _with(**curriculum):
    base = cfg()
    return parse_config(
        {
            "source": {"path": "ids"},
            "curriculum": {"lengths": LENGTHS, "tokens_per_batch": TPB, "tile": 32, **curriculum},
            "seed": base.seed,
        }
    )


def test_curriculum_is_one_of_packing_and_bucketing():
    with pytest.raises(
        ValueError, match="exactly one of 'packing' and 'bucketing' \\(or 'curriculum'\\); got packing, curriculum"
    ):
        parse_config(
            {
                "source": {"path": "x"},
                "packing": {"ctx": 128},
                "curriculum": {"lengths": [128], "tokens_per_batch": 128},
            }
        )


def test_hosts_must_divide_every_length_rows(docs):
    with pytest.raises(ValueError, match="a global batch of 4 rows does not divide over 8 hosts"):
        build_canonical(cfg(8, 0), docs)
