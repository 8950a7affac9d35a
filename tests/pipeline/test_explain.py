"""``explain`` against what the pipeline delivered: every schedule kind, 1 and 4 hosts, elastic restores, the inverse,
the ledger, and a mixture's weights changed at a restore.

Documents carry their global id in every token (token = id + 1; padding 0) and canonical batches carry each piece's
offset (``positions``), so every delivered segment names (document, first token, tokens): compared piece by piece
with the explanation, row by row and host by host.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from datatools.grain.portable_state import host_state
from datatools.io.formats.plan_file import write_plan
from datatools.io.sources.documents import ArrayDocuments, extent_starts_after
from datatools.kernels.packing import PackOptions
from datatools.pipeline import build_canonical, parse_config
from datatools.pipeline.explain import Explainer, parse_hosts, read_ledger

BATCH = 8  # divides over 1, 2 and 4 hosts
BLOCK = {"kind": "block", "io_block_size": 4, "window_blocks": 4}
MODES = {
    "planned": {"packing": {"ctx": 64}},
    "planned_align": {"packing": {"ctx": 64, "align": 8, "overflow": "truncate"}},
    "plan_file": {"packing": {"plan": "PLAN"}},
    "streaming": {"packing": {"ctx": 64, "mode": "streaming", "window": 12}},
    "lanes": {"packing": {"ctx": 64, "mode": "streaming", "window": 12, "read_order": "lanes"}, "shuffle": BLOCK},
    "lanes_extents": {  # read in extents of 256 tokens: lanes whose first window would cross one's edge begin there
        "packing": {"ctx": 64, "mode": "streaming", "window": 16, "read_order": "lanes"},
        "shuffle": {"kind": "block", "io_block_size": 8, "window_blocks": 2},
        "extent": 256,
    },
    "bucketing": {"bucketing": {"boundaries": [16, 32, 64]}},
    "curriculum": {"curriculum": {"lengths": [32, 64], "tokens_per_batch": 512, "tile": 16}},
    "mixture": {"packing": {"ctx": 64, "mode": "streaming", "window": 12}, "sources": 2},
    "mixture_buckets": {"bucketing": {"boundaries": [16, 32, 64]}, "sources": 2},
}
LEDGER_VARIANTS = {  # windows that do not keep documents whole: planned one by one, not counted from their documents
    "streaming_truncate": {"packing": {"ctx": 64, "mode": "streaming", "window": 12, "overflow": "truncate"}},
    "lanes_truncate": {
        "packing": {"ctx": 64, "mode": "streaming", "window": 12, "read_order": "lanes", "overflow": "truncate"},
        "shuffle": BLOCK,
    },
}
KINDS = [m for m in MODES if m != "plan_file"]  # every schedule kind
MODES |= LEDGER_VARIANTS


class ExtentDocuments(ArrayDocuments):
    """Documents read in aligned extents of ``extent`` tokens (as a store's inner chunks)."""

    def __init__(self, tokens: np.ndarray, offsets: np.ndarray, extent: int):
        super().__init__(tokens, offsets)
        self.extent = extent

    def next_extent_starts(self, doc: np.ndarray) -> np.ndarray:
        return extent_starts_after(self.offsets, self.extent, doc)


def id_sources(lengths, parts: int = 1) -> list[ArrayDocuments]:
    """``parts`` sources cut from ``lengths``; global document i (source after source) is all ``i + 1``."""
    lengths = np.asarray(lengths, np.int64)
    out = []
    for ids in np.array_split(np.arange(lengths.shape[0]), parts):
        part = lengths[ids]
        out.append(ArrayDocuments(np.repeat(ids + 1, part).astype(np.int32), np.concatenate(([0], np.cumsum(part)))))
    return out


def config(mode: str, hosts: int = 1, index: int = 0, *, plan: str = "", weights=(3, 1), **extra):
    section = {k: v for k, v in MODES[mode].items() if k not in ("sources", "extent")}
    if "packing" in section and section["packing"].get("plan") == "PLAN":
        section = {"packing": {"plan": plan}}
    one = {"source": {"path": "ids"}}
    if "sources" in MODES[mode]:
        one = {"sources": [{"path": f"s{k}", "weight": w} for k, w in enumerate(weights)]}
    return parse_config(
        {
            **one,
            "batch_size": BATCH,
            "seed": 9,
            "drop_remainder": False,
            "shuffle": {"kind": "full"},
            **section,
            "shard": {"index": index, "count": hosts},
            **extra,
        }
    )


def documents(mode: str, lengths):
    srcs = id_sources(lengths, 2 if "sources" in MODES[mode] else 1)
    if "extent" in MODES[mode]:
        return ExtentDocuments(srcs[0].tokens, srcs[0].offsets, MODES[mode]["extent"])
    return srcs if len(srcs) > 1 else srcs[0]


def segments(batch: dict, row: int) -> list[tuple[int, int, int]]:
    """(global document, first token, tokens) of each piece of a delivered row, in order."""
    seg, tok, pos = batch["segment_ids"][row], batch["tokens"][row], batch["positions"][row]
    real = np.flatnonzero(seg > 0)
    if not real.size:
        return []
    first = real[np.concatenate(([True], (np.diff(real) > 1) | (np.diff(seg[real]) != 0)))]
    ends = np.append(first[1:], real[-1] + 1)
    out = []
    for a, b in zip(first.tolist(), ends.tolist()):
        n = int(np.count_nonzero(seg[a:b] == seg[a]))
        out.append((int(tok[a]) - 1, int(pos[a]), n))
    return out


def explained(e: Explainer, row) -> list[tuple[int, int, int]]:
    return [(int(e.offsets[s]) + d, a, n) for s, d, a, n in zip(row.source, row.document, row.start, row.length)]


def assert_explains(e: Explainer, step: int, per_host: list[dict]) -> None:
    """Explain's step ``step`` equals the hosts' delivered rows, piece by piece, each on the host explain names."""
    report = e.step(step)
    assert report.hosts == len(per_host)
    share = per_host[0]["tokens"].shape[0]
    assert report.row_length == per_host[0]["tokens"].shape[1]
    rows = {r.row: r for r in report.rows}
    for h, batch in enumerate(per_host):
        for i in range(share):
            got = segments(batch, i)
            row = rows.get(h * share + i)
            if row is None:
                assert got == [], f"step {step}: host {h} row {i} holds data explain does not name"
                continue
            assert row.host == h, f"step {step}: row {row.row} explained on host {row.host}, delivered on {h}"
            assert explained(e, row) == got, f"step {step}: row {row.row}"
            assert row.tokens == sum(n for *_, n in got)


def run_hosts(cfg_of, docs, hosts: int) -> list[list[dict]]:
    """Every step of the run: each host's batch."""
    per_host = [list(build_canonical(cfg_of(hosts, h), docs).dataset) for h in range(hosts)]
    assert len({len(b) for b in per_host}) == 1
    return [list(step) for step in zip(*per_host)]


@pytest.fixture(scope="module")
def lengths():
    rng = np.random.default_rng(3)
    return np.clip(rng.lognormal(3.2, 0.9, 160), 1, 150).astype(np.int64)


def plan_dir(tmp_path_factory, lengths) -> str:
    out = tmp_path_factory.mktemp("plan") / "plan"
    write_plan(out, lengths, PackOptions(64))
    return str(out)


CONFIGS = dict(
    lengths=st.lists(st.integers(0, 150), min_size=8, max_size=90).filter(lambda x: sum(x) > 0),
    seed=st.integers(0, 2**31),
    epochs=st.sampled_from([1, 2]),
)


@pytest.mark.parametrize("hosts", [1, 4])
@pytest.mark.parametrize("mode", KINDS)
@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**CONFIGS)
def test_explain_equals_the_delivered_batches(mode, hosts, lengths, seed, epochs):
    """Any lengths (empty documents included), seed and schedule kind, 1 or 4 hosts, whole epochs: every step's
    every row is what explain says, token for token, on the host it names."""
    check_delivered(mode, hosts, lengths, seed, epochs)


@pytest.mark.slow
@pytest.mark.parametrize("hosts", [1, 4])
@pytest.mark.parametrize("mode", KINDS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(**CONFIGS)
def test_explain_equals_the_delivered_batches_many_configs(mode, hosts, lengths, seed, epochs):
    """As above, 30 configs of each kind and host count."""
    check_delivered(mode, hosts, lengths, seed, epochs)


def check_delivered(mode, hosts, lengths, seed, epochs):
    docs = documents(mode, lengths)
    if "sources" in MODES[mode] and min(int(d.lengths().sum()) for d in docs) == 0:
        return  # a mixture's source without tokens is refused by its config
    if mode == "curriculum" and max(lengths) == 0:
        return

    def cfg_of(n, h):
        return config(mode, n, h, seed=seed, num_epochs=epochs)

    try:
        steps = run_hosts(cfg_of, docs, hosts)
    except ValueError as exc:  # too little data for one batch, a bucket too small for the hosts
        assert "batch" in str(exc) or "divide" in str(exc), exc
        return
    e = Explainer(cfg_of(hosts, 0), docs)
    event(f"{mode}, {hosts} hosts: explained")
    for step, per_host in enumerate(steps):
        assert_explains(e, step, per_host)
    with pytest.raises(ValueError, match="past the run's end"):
        e.step(len(steps))


def test_a_plan_file_is_explained(tmp_path_factory, lengths):
    docs = documents("plan_file", lengths)
    plan = plan_dir(tmp_path_factory, lengths)
    steps = run_hosts(lambda n, h: config("plan_file", n, h, plan=plan), docs, 4)
    e = Explainer(config("plan_file", 4, 0, plan=plan), docs)
    for step, per_host in enumerate(steps):
        assert_explains(e, step, per_host)


@pytest.mark.parametrize("mode", ["planned", "streaming", "bucketing", "mixture"])
def test_a_restore_on_another_host_count_is_explained_as_run(lengths, mode):
    """4 hosts run into the second epoch and save; 2 hosts restore and run to the end: explain, told the hosts of
    each stretch (``--hosts 4 --hosts 2@K``), names the rows each host delivered."""
    docs = documents(mode, lengths)
    four = [iter(build_canonical(config(mode, 4, h, num_epochs=2), docs).dataset) for h in range(4)]
    total = len(list(build_canonical(config(mode, num_epochs=2), docs).dataset))
    k = total // 2 + 1
    before = [[next(it) for it in four] for _ in range(k)]
    state = host_state([it.get_state() for it in four])
    two = [iter(build_canonical(config(mode, 2, h, num_epochs=2), docs).dataset) for h in range(2)]
    for it in two:
        it.set_state(state)
    after = [list(step) for step in zip(*[list(it) for it in two])]
    assert len(after) == total - k
    e = Explainer(config(mode, num_epochs=2), docs, hosts=parse_hosts(["4", f"2@{k}"]))
    for step, per_host in enumerate(before + after):
        assert_explains(e, step, per_host)


@pytest.mark.parametrize(
    "mode",
    ["planned", "plan_file", "streaming", "lanes", "lanes_extents", "bucketing", "curriculum", "mixture"]
    + ["streaming_truncate"],
)
def test_the_inverse_agrees_with_explain(lengths, mode, tmp_path_factory):
    """Every piece of a document that ``document`` lists is in the step and row explain names, and every piece
    explain names is listed; the run's sightings of all documents cover every piece once."""
    docs = documents(mode, lengths)
    plan = plan_dir(tmp_path_factory, lengths) if mode == "plan_file" else ""
    e = Explainer(config(mode, 4, num_epochs=2, plan=plan, drop_remainder=True), docs)
    seen: dict[int, set] = {}
    steps = len(e.run)
    for step in range(steps):
        for row in e.step(step).rows:
            for s, d, a, n in zip(row.source, row.document, row.start, row.length):
                seen.setdefault(int(e.offsets[s]) + d, set()).add((step, row.row, row.host, a, n))
    for d in range(len(e.lengths)):  # every document: those of a dropped remainder too
        k = int(np.searchsorted(e.offsets, d, side="right")) - 1
        got = e.document(d - int(e.offsets[k]), source=k, epochs=2)
        assert {(x.step, x.row, x.host, x.start, x.length) for x in got.sightings} == seen.get(d, set()), d
        assert [x.step for x in got.sightings] == sorted(x.step for x in got.sightings)


def test_lanes_read_in_extents_begin_at_an_extents_edge(lengths):
    """The ``lanes_extents`` runs above are not those of ``lanes``: with this fixture's lengths some lanes begin an
    epoch past their first block's first document (each at the first document of a later extent), others at it."""
    e = Explainer(config("lanes_extents", 4, num_epochs=2), documents("lanes_extents", lengths))
    starts = np.concatenate([e.schedule._epoch(epoch).start for epoch in (0, 1)])  # noqa: SLF001 -- the lane plan
    assert 0 < np.count_nonzero(starts) < starts.shape[0], starts


@pytest.mark.parametrize(
    "mode",
    ["planned", "plan_file", "streaming", "lanes", "lanes_extents", "bucketing", "curriculum", "mixture"]
    + ["mixture_buckets", *LEDGER_VARIANTS],
)
def test_ledger_counts_sum_to_the_tokens_delivered(lengths, mode, tmp_path, tmp_path_factory):
    """At any step N, the ledger's per-document tokens are those the pipeline delivered in steps [0, N) (summing to
    the tokens delivered), its visits the pieces that start a document; the file holds them."""
    plan = plan_dir(tmp_path_factory, lengths) if mode == "plan_file" else ""
    assert_ledger_is_delivered(mode, lengths, tmp_path, plan)


@pytest.mark.parametrize("mode", ["streaming", "lanes", "curriculum", "mixture"])
def test_ledger_of_empty_documents(lengths, mode, tmp_path):
    """Documents of no tokens (every fifth) are delivered in no piece: the ledger counts no visit of them, also
    where whole windows are counted from their documents."""
    empty = lengths.copy()
    empty[::5] = 0
    assert_ledger_is_delivered(mode, empty, tmp_path)


def assert_ledger_is_delivered(mode: str, lengths, tmp_path, plan: str = "") -> None:
    """The ledger (counts, report, file) at several steps of a 2-epoch run equals what the pipeline delivered."""
    docs = documents(mode, lengths)
    run = list(build_canonical(config(mode, num_epochs=2, plan=plan, drop_remainder=True), docs).dataset)
    e = Explainer(config(mode, num_epochs=2, plan=plan, drop_remainder=True), docs)
    n = len(e.lengths)
    for upto in (0, 1, len(run) // 3, len(run) // 2 + 1, len(run)):
        tokens = np.zeros(n, np.int64)
        visits = np.zeros(n, np.int64)
        for b in run[:upto]:
            real = b["segment_ids"] > 0
            tokens += np.bincount(b["tokens"][real].astype(np.int64) - 1, minlength=n)
            starts = real & (b["positions"] == 0)
            visits += np.bincount(b["tokens"][starts].astype(np.int64) - 1, minlength=n)
        report = e.ledger(tmp_path / "ledger.npz", upto)
        assert report.tokens_delivered == int(tokens.sum()) == sum(e.step(s).tokens for s in range(upto))
        got_tokens, got_visits, steps = read_ledger(tmp_path / "ledger.npz", e.lengths)
        np.testing.assert_array_equal(got_tokens, tokens)
        np.testing.assert_array_equal(got_visits, visits)
        assert steps == upto
        with np.load(tmp_path / "ledger.npz") as f:  # compact: only the documents not delivered whole listed
            assert f["source_names"].tolist() == e.names and f["visits"].dtype.itemsize == 1
            partial = f["partial"].astype(np.int64)
            np.testing.assert_array_equal(partial, np.flatnonzero(tokens != visits * e.lengths))
        assert report.tokens == [int(tokens[a:b].sum()) for a, b in zip(e.offsets[:-1], e.offsets[1:])]


def test_weights_changed_at_a_restore_repeat_or_skip_no_document():
    """A mixture (``sample`` epochs) restored with new weights on another host count: explain, given the history the
    state records, is the delivered run; and at every step each document's visits are the draws of it (source k's
    r-th draw is its document ``r mod n_k``, whatever the weights) up to the one window being packed: at least its
    draws in the windows wholly delivered, at most those in the windows begun. So within a source no document is
    seen a second time more than one window before every other is seen once: per source, visits differ by at most
    2 (1 between windows)."""
    rng = np.random.default_rng(5)
    docs = id_sources(np.clip(rng.lognormal(3.0, 0.8, 300), 1, 150).astype(np.int64), 2)

    def cfg(weights, hosts=1, index=0):
        return config("mixture", hosts, index, weights=weights, num_epochs=3)

    old = [iter(build_canonical(cfg((3, 1), 2, h), docs).dataset) for h in range(2)]
    k = 30
    before = [[next(it) for it in old] for _ in range(k)]
    state = host_state([it.get_state() for it in old])
    new = [iter(build_canonical(cfg((1, 3), 4, h), docs).dataset) for h in range(4)]
    for it in new:
        it.set_state(state)
    after = [list(step) for step in zip(*[list(it) for it in new])]
    history = new[0].get_state()["pipeline"]["mixture_weights"]
    assert history[0] == [0, [3.0, 1.0]] and history[1][1] == [1.0, 3.0]
    e = Explainer(cfg((1, 3)), docs, history=history, hosts=[(0, 2), (k, 4)])
    steps = before + after
    for step, per_host in enumerate(steps):
        assert_explains(e, step, per_host)
    s, order, n = e.schedule, e.schedule.order, len(e.lengths)
    widest = [0, 0]
    for upto in range(len(steps) + 1):
        _, visits = e.counts(upto)
        epoch, j = e.locate(upto) if upto < len(steps) else (2, s.num_batches(2))
        starts = s.window_starts(epoch)
        full = (int(np.searchsorted(starts, j * s.batch_size, side="right")) - 1) * s.window
        begun = s.restart_position(epoch, j) if j < s.num_batches(epoch) else order.n

        def drawn(p: int, epoch: int = epoch) -> np.ndarray:
            seen = [order(np.arange(order.n), x) for x in range(epoch)] + [order(np.arange(min(p, order.n)), epoch)]
            return np.bincount(np.concatenate(seen), minlength=n)

        lengths = e.lengths
        low, high = drawn(full), drawn(begun)
        assert np.all(visits[lengths > 0] >= low[lengths > 0]), upto
        assert np.all(visits <= high), upto
        for src, (a, b) in enumerate(zip(e.offsets[:-1], e.offsets[1:])):
            widest[src] = max(widest[src], int(np.ptp(visits[a:b][lengths[a:b] > 0])))
    print("widest visit spread per source", widest)
    assert max(widest) <= 2, widest
