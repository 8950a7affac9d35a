"""One host's share of a global batch sequence, as a ``grain.MapDataset`` (many hosts, elastic resume).

Every host computes the same global batches from document lengths alone (a schedule: :mod:`datatools.grain.schedule`)
and reads only its own rows: host ``h`` of ``N`` takes rows ``[h * R / N, (h + 1) * R / N)`` of every global batch of
``R`` rows. Element ``j`` is its slice of global batch ``j``, so a position depends neither on ``N`` nor on the
prefetch workers (:mod:`datatools.grain.portable_state`): a checkpoint taken on ``N`` hosts restores on ``M``.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait

import numpy as np

import grain
from datatools.base.checks import check_choice, check_int
from datatools.grain.batch import read_batch
from datatools.grain.schedule import EpochCache, ReadAheadSchedule, Schedule
from datatools.io import read_stats
from datatools.kernels.batch_layouts import CANONICAL_KEYS
from datatools.kernels.packing.materialize import new_batch
from datatools.kernels.shuffle import BlockShuffle, FeistelPermutation
from datatools.kernels.warm import warm_in_background

READ_AHEAD = 8  # batches whose reads start before they are asked for (the source's byte budget bounds them)
FIRST_BATCH_ALONE_S = 120.0  # the most other batches wait for a process's first batch (seconds)
FIRST_BATCH_GATHER_S = 0.02  # how long the first calls are gathered to find the lowest batch among them
MAX_STRIDE = 64  # the largest gap between batches one process reads that is taken as its stride
WARM_S = 3.0  # the most a process's first batch is held back while its next batches are read (seconds)
WARM_BATCHES = 2  # batches after its first that a process reads before handing the first over (within WARM_S)
FIRST_BATCH_BY_S = 7.0  # the warm-up ends by this long after the iterator began (seconds; with a build, ~10 s)
STAGGER_S = 30.0  # the most a Grain worker's first read waits for a lower worker's first batch to be read (seconds)
FIRST_SEEN_S = 0.5  # how long a Grain worker waits for a lower worker to say it began its first batch (seconds)
TURNS_FROM_TOKENS = 1 << 19  # first batches of at least this many tokens (a host's rows x ctx) are read in turns
BATCHES_IN_FLIGHT = 2  # batches a process reads at once (a batch waits while lower ones fill the rest)
TURN_WAIT_S = 60.0  # the most a batch waits for its turn (seconds)


def _touch(path: str) -> None:
    """Create the empty file ``path``, a signal between processes (an error only costs a wait)."""
    with contextlib.suppress(OSError):
        open(path, "a").close()


def _wait_until(deadline: float, done: Callable[[], bool]) -> None:
    """Poll ``done`` every 10 ms until it holds or ``time.monotonic()`` reaches ``deadline`` (signals between
    processes are files: a stat per poll)."""
    while time.monotonic() < deadline and not done():
        time.sleep(0.01)


def empty_rows(rows: int, length: int, pad_id: int, *, fill_from: int = 0) -> dict[str, np.ndarray]:
    """A canonical batch of ``rows`` rows of ``length`` tokens; rows from ``fill_from`` on are empty (padding:
    ``segment_ids`` 0), the rows before it are left for the caller to fill."""
    out = new_batch(rows, length)
    out["tokens"][fill_from:] = pad_id
    for key in CANONICAL_KEYS[1:]:
        out[key][fill_from:] = 0
    return out


class DocumentOrder:
    """The order documents are read in, per epoch: ``none`` (storage order), ``full`` (a Feistel permutation of
    (seed, epoch)) or ``block`` (a windowed block shuffle). ``order(positions, epoch)``: the document at each
    position (int64), O(1) per position."""

    def __init__(self, n: int, kind: str, *, seed: int, io_block_size: int = 64, window_blocks: int = 1024):
        self.n = check_int(n, "documents", minimum=1)
        self.kind = check_choice(kind, "shuffle kind", ("none", "full", "block"))
        self.seed = seed
        self._block: BlockShuffle | None = None
        if kind == "block":
            self._block = BlockShuffle(n, io_block_size=io_block_size, window_blocks=window_blocks, seed=seed)
        self._perms = EpochCache(keep=5)

    def __call__(self, positions, epoch: int) -> np.ndarray:
        positions = np.asarray(positions, np.int64)
        if self.kind == "none":
            return positions.copy()
        if self._block is not None:  # kind block
            return np.asarray(self._block.index(positions, epoch), np.int64)
        perm = self._perms.get(epoch, lambda e: FeistelPermutation(self.n, self.seed, epoch=e))
        return np.asarray(perm(positions), np.int64)


class PlannedSchedule:
    """Global batches of ``batch_size`` consecutive rows of ``rows``, a (shuffled) MapDataset of canonical rows of
    ``ctx`` tokens (index ``e * len + i`` is row i of epoch e); ``drop_remainder`` leaves out each epoch's last,
    short batch (else it is padded with empty rows)."""

    def __init__(self, rows: grain.MapDataset, batch_size: int, *, drop_remainder: bool, ctx: int, pad_id: int = 0):
        self.rows, self.n = rows, len(rows)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1)
        self.drop_remainder = bool(drop_remainder)
        self.ctx, self.pad_id = int(ctx), int(pad_id)
        self._batches = self.n // self.batch_size if drop_remainder else -(-self.n // self.batch_size)
        self.row_counts: tuple[int, ...] = (self.batch_size,)
        self.shapes = [(self.batch_size, self.ctx)]

    def num_batches(self, epoch: int) -> int:
        return self._batches

    def batch_rows(self, epoch: int, j: int) -> int:
        return self.batch_size

    def read(self, epoch: int, j: int, lo: int, hi: int) -> dict[str, np.ndarray]:
        index = j * self.batch_size + np.arange(lo, hi, dtype=np.int64)
        valid = index < self.n
        if valid.all():
            return read_batch(self.rows, index + epoch * self.n)
        out = empty_rows(hi - lo, self.ctx, self.pad_id)
        if valid.any():
            batch = read_batch(self.rows, index[valid] + epoch * self.n)
            for key in CANONICAL_KEYS:
                out[key][valid] = batch[key]
        return out


class HostBatchesMapDataset(grain.MapDataset):
    """Element ``j``: host ``index`` of ``count``'s rows of global batch ``j`` of ``schedule``, over the epochs.

    Args:
      schedule: the global batches (:class:`~datatools.grain.schedule.Schedule`).
      index, count: this host and the number of hosts; every batch height must divide by ``count``.
      num_epochs: epochs to run; None: repeat forever.
      stride: the expected gap between the batches one process reads (Grain worker ``w`` of ``P`` reads
        ``w, w + P, ...``: pass ``P``); read-ahead corrects it to the gcd of the gaps it sees.
    """

    def __init__(
        self, schedule: Schedule, *, index: int = 0, count: int = 1, num_epochs: int | None = 1, stride: int = 1
    ):
        super().__init__()
        self._stride = check_int(stride, "stride", minimum=1)
        self._count = check_int(count, "host count", minimum=1)
        self._index = check_int(index, "host index", minimum=0)
        if self._index >= self._count:
            raise ValueError(f"host index {index} out of range [0, {count})")
        bad = [r for r in schedule.row_counts if r % self._count]
        if bad:
            raise ValueError(
                f"a global batch of {bad[0]} rows does not divide over {count} hosts: the batch size "
                f"(every bucket's, when bucketing) must be a multiple of the host count"
            )
        self._schedule = schedule
        carry_host = getattr(schedule, "carry_host", None)  # a schedule that sends only this host's first plans
        if carry_host is not None:
            carry_host(self._index, self._count)
        # read ahead when the schedule says what a batch reads and its source reads ahead: checked once (~10 us)
        self._ahead_of: ReadAheadSchedule | None = None
        if isinstance(schedule, ReadAheadSchedule) and getattr(schedule.docs, "reads_ahead", False):
            self._ahead_of = schedule
        self._epochs = None if num_epochs is None else check_int(num_epochs, "num_epochs", minimum=1)
        self._ends = [0]  # cumulative batches at the end of each epoch computed so far
        self._planned_ahead = 0  # the last epoch counted ahead, in the background (_plan_next_epoch)
        self._lock = threading.Lock()
        self._last, self._step, self._ahead = -1, self._stride, -1  # read-ahead: last batch, stride, prefetched
        self._served = 0  # batches this process has been asked for (the first reads alone)
        self._first: threading.Event | None = None  # set when this process's first batch is read
        self._lead, self._lead_started = -1, False  # the first batch to read, and whether its read began
        self._turn = threading.Condition()  # batches being read (or waiting to be) in this process, by index
        self._active: set[int] = set()
        self._warm: dict[int, Future] = {}  # the batch read while the first is held back (its index: its read)
        self._started: float | None = None  # time.monotonic() when the iterator began (pickled: its workers' start)
        self.stats_folder: str | None = None  # where a worker process writes its read counters (read_stats)
        if schedule.num_batches(0) == 0:
            raise ValueError(
                "the data makes no global batch (fewer rows than one batch; set drop_remainder: false "
                "or a smaller batch_size)"
            )

    def __getstate__(self):
        fresh = {"_last": -1, "_step": self._stride, "_ahead": -1, "_served": 0, "_first": None, "_lead": -1}
        fresh["_planned_ahead"] = 0
        fresh["_lead_started"], fresh["_active"], fresh["_warm"] = False, set(), {}
        fresh["_started"] = time.monotonic()  # sent to Grain's workers as the iterator starts (one clock per machine)
        return {k: v for k, v in self.__dict__.items() if k not in ("_lock", "_turn")} | fresh

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._turn = threading.Condition()
        if self._ahead_of is not None:  # a Grain worker: numba starts while its first reads are issued and fetched
            warm_in_background()

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """The (rows, tokens) shapes of this host's batches."""
        return [(r // self._count, t) for r, t in self._schedule.shapes]

    def _end_of(self, epoch: int) -> int:
        """Global batches before the end of ``epoch``. An epoch is counted outside the lock: planning one takes
        ~0.05-3 s, and batches of the epochs already counted must not wait for it (they did, ~0.2 s a worker, where
        the read-ahead first reached a new epoch)."""
        while True:
            with self._lock:
                if len(self._ends) > epoch + 1:
                    return self._ends[epoch + 1]
                next_epoch = len(self._ends) - 1
            batches = self._schedule.num_batches(next_epoch)  # the schedule's own cache: planned once
            with self._lock:
                if len(self._ends) == next_epoch + 1:
                    self._ends.append(self._ends[-1] + batches)

    def _plan_next_epoch(self, epoch: int, j: int) -> None:
        """From the middle of ``epoch`` on (batch ``j``), count the next epoch in a daemon thread, once: its plan
        (an epoch's Feistel order and window counts, and in a Grain worker the kernels' first loads) is then ready
        before the read-ahead reaches it, instead of holding up the batches where it does."""
        if self._epochs is not None and epoch + 1 >= self._epochs:
            return
        if 2 * j < self._end_of(epoch) - self._ends[epoch]:
            return
        with self._lock:
            if self._planned_ahead > epoch:
                return
            self._planned_ahead = epoch + 1

        def plan() -> None:
            with contextlib.suppress(Exception):  # an error is raised where the epoch is needed, by the same call
                self._end_of(epoch + 1)

        threading.Thread(target=plan, name="datatools-plan-ahead", daemon=True).start()

    def __len__(self) -> int:
        return sys.maxsize if self._epochs is None else self._end_of(self._epochs - 1)

    def locate(self, j: int) -> tuple[int, int]:
        """(epoch, batch within the epoch) of global batch ``j``."""
        if j < 0 or (self._epochs is not None and j >= len(self)):
            raise IndexError(f"batch {j} out of range for {len(self)} batches")
        epoch = int(np.searchsorted(self._ends, j, side="right")) - 1
        while self._end_of(epoch) <= j:
            epoch += 1
        return epoch, j - self._ends[epoch]

    def _rows(self, epoch: int, j: int) -> tuple[int, int]:
        """This host's rows [lo, hi) of global batch ``j`` of ``epoch``."""
        share = self._schedule.batch_rows(epoch, j) // self._count
        return self._index * share, (self._index + 1) * share

    def _read_ahead(self, index: int, *, after_first: bool = False) -> None:
        """Start the reads of batch ``index`` and of this process's next :data:`READ_AHEAD` batches (in its
        stride), nearest first, each once. The first batch reads alone; once it is read (``after_first``), the
        next ones' reads start at once. The source bounds the bytes read ahead and says whether it took a batch."""
        schedule = self._ahead_of
        if schedule is None:
            return
        prefetch = schedule.docs.prefetch
        with self._lock:
            if not after_first:
                gap = abs(index - self._last)
                if self._last >= 0 and 0 < gap <= MAX_STRIDE:  # the stride: the gcd of the gaps seen (calls come
                    step = math.gcd(self._step, gap)  # in any order) and of the one expected
                    if step != self._step:  # corrected: what was read ahead skipped batches; start again here
                        self._step, self._ahead = step, -1
                self._last = index
                self._served += 1
            step = self._step
            depth = READ_AHEAD if after_first or self._served > 1 else 0
            aligned = self._ahead >= index and (self._ahead - index) % step == 0
            first = self._ahead + step if aligned else index
        for k in range(first, index + depth * step + 1, step):
            if self._epochs is not None and k >= len(self):
                break
            epoch, j = self.locate(k)
            near = k <= index + step  # this batch and the next: their own pieces; further: what reads cheapest
            doc, start, length = (schedule.pieces if near else schedule.ahead_pieces)(epoch, j, *self._rows(epoch, j))
            if not prefetch(doc, start, length):
                break  # over the read-ahead budget: try again at the next batch
            with self._lock:
                self._ahead = max(self._ahead, k)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return self.slice(index)
        if self.stats_folder is not None and read_stats.shared_folder() != self.stats_folder:
            read_stats.share_in(self.stats_folder)  # once per process: a Grain worker's counters reach the parent
        epoch, j = self.locate(int(index))
        index = int(index)
        self._plan_next_epoch(epoch, j)
        with self._turn:  # known from the start: a batch asked for later, but higher, waits for it (_wait_turn)
            self._active.add(index)
        leader = False
        first: threading.Event | None = None
        try:
            leader, first = self._elect_first(index)
            if leader:
                self._after_lower_workers_first(index)
            if not leader and not first.is_set():  # the first batch reads alone, before the reads of those after it
                first.wait(FIRST_BATCH_ALONE_S)
            with self._lock:
                warm = self._warm.pop(index, None)
            if warm is not None:  # read (or being read) during the warm-up: once
                self._read_ahead(index)
                return warm.result()
            self._wait_turn(index)
            self._read_ahead(index)
            batch = self._schedule.read(epoch, j, *self._rows(epoch, j))
            if leader:
                if self.stats_folder is not None and self._step > 1:
                    _touch(os.path.join(self.stats_folder, f"read-{index}"))  # this first batch: read
                self._read_ahead(index, after_first=True)
                self._warm_up(index)
            return batch
        finally:
            if leader and first is not None:
                first.set()
            with self._turn:
                self._active.discard(index)
                self._turn.notify_all()

    def _warm_up(self, index: int) -> None:
        """With read-ahead, hold the first batch ``index`` back (at most :data:`WARM_S`, and never past
        :data:`FIRST_BATCH_BY_S` after the iterator began: a first batch slow to read goes at once) while this process
        reads its next :data:`WARM_BATCHES` batches, so the next steps find them read (a cold read from a bucket is
        ~1-1.5 s a batch at +100 ms; issue 31: 0 of 500 steps waiting, against ~0.35 s with one batch ahead); a read not
        done by then is handed over when its batch is asked for.

        Grain workers signal through files in :attr:`stats_folder`: ``read-J`` once batch J is read, ``given-J``
        once first batch J is handed over. A first batch also waits for the other workers' batches among its next
        ``WARM_BATCHES * P`` to be read, until :data:`FIRST_BATCH_BY_S` (their first reads began one after another:
        with only their first batches read, or at most WARM_S, host 0 of 4 at +0-100 ms had step 3 wait 0.13-0.63 s);
        a warm-up stops once batch ``index - 1`` is handed over (this one is then needed within a step: a late worker
        otherwise held it ~1.3 s at +100 ms). The read-ahead of later batches begins before the warm-up (begun
        after it, host 0 of 4 at +100 ms had step 8 wait 71 ms: every lane begins a window at the start)."""
        if self._ahead_of is None:
            return
        assert self._started is not None  # set by _elect_first, before a leader reads
        until = min(time.monotonic() + WARM_S, self._started + FIRST_BATCH_BY_S)
        folder = self.stats_folder if self._step > 1 else None  # Grain workers: the next batches are others'
        futures = []
        for n in range(1, WARM_BATCHES + 1):
            k = index + n * self._step
            if self._epochs is not None and k >= len(self):
                break
            futures.append(self._warm_read(k, folder))
        before = os.path.join(folder, f"given-{index - 1}") if folder is not None and index > 0 else None

        def needed() -> bool:  # the batch before this one is with the parent: this one is asked for next
            return before is not None and os.path.exists(before)

        while time.monotonic() < until and not all(f.done() for f in futures) and not needed():
            wait(futures, timeout=0.01)
        if folder is not None:  # the steps after this one take other workers' batches: wait until they are read
            last = index + WARM_BATCHES * self._step
            if self._epochs is not None:
                last = min(last, len(self) - 1)
            others = [os.path.join(folder, f"read-{i}") for i in range(index + 1, last + 1) if (i - index) % self._step]
            # they began after this one: until FIRST_BATCH_BY_S
            _wait_until(self._started + FIRST_BATCH_BY_S, lambda: all(map(os.path.exists, others)) or needed())
            _touch(os.path.join(folder, f"given-{index}"))  # this first batch: handed over (now)

    def _after_lower_workers_first(self, index: int) -> None:
        """Grain workers: before reading its first batch ``index``, a worker says so (``first-J`` in
        :attr:`stats_folder`) and waits (at most :data:`STAGGER_S`) while a lower worker's first batch is not yet
        read (``read-J``): the first batches then come one by one, each with the whole link, not all at once (2
        workers of 1 host at +100 ms: batch 0 read in ~7.5 s beside batch 1, ~3-4 s alone; issue 31), from
        :data:`TURNS_FROM_TOKENS` tokens a first batch (1 host's 128 x 8192 take turns, host 0 of 4's 32 not). A lower
        worker not yet started (no ``first-J``) is waited for :data:`FIRST_SEEN_S` at most: workers start ~0.2 s
        apart, in no fixed order (on a resumed run the batch before the first was another run's: that long)."""
        folder = self.stats_folder if self._step > 1 else None
        if folder is None or self._ahead_of is None:  # reads that are not requests (local) need no turns
            return
        epoch, j = self.locate(index)
        lo, hi = self._rows(epoch, j)
        if (hi - lo) * max(t for _, t in self._schedule.shapes) < TURNS_FROM_TOKENS:
            return  # a small first batch is a few round trips: two at once barely slow each other, and the next
            # batches' reads begin sooner (in turns, host 0 of 4 had step 3 or 8 wait 71-625 ms in 4 of 5 runs)
        _touch(os.path.join(folder, f"first-{index}"))
        lower = range(max(0, index - self._step + 1), index)
        unseen_until = time.monotonic() + FIRST_SEEN_S

        def before_me() -> bool:  # a lower worker's first batch: begun and not read, or maybe not begun yet
            for i in lower:
                if os.path.exists(os.path.join(folder, f"read-{i}")):
                    continue
                if os.path.exists(os.path.join(folder, f"first-{i}")) or time.monotonic() < unseen_until:
                    return True
            return False

        _wait_until(time.monotonic() + STAGGER_S, lambda: not before_me())

    def _warm_read(self, k: int, folder: str | None) -> Future:
        """Read batch ``k`` in a thread of its own, to be handed over when asked for (``read-K`` in ``folder``)."""
        epoch, j = self.locate(k)
        future: Future = Future()
        with self._lock:
            self._warm[k] = future

        def read() -> None:
            try:
                future.set_result(self._schedule.read(epoch, j, *self._rows(epoch, j)))
            except BaseException as exc:  # noqa: BLE001 -- raised where batch k is asked for
                future.set_exception(exc)

        if folder is not None:
            future.add_done_callback(lambda _: _touch(os.path.join(folder, f"read-{k}")))
        threading.Thread(target=read, name="datatools-warm-up", daemon=True).start()
        return future

    def _wait_turn(self, index: int) -> None:
        """Wait while ``BATCHES_IN_FLIGHT - 1`` lower batches of this process are being read or wait to be: Grain's
        reader threads ask for several batches at once, and the next batch's reads must not queue behind later
        ones' (a sharded store's second round of reads joins the back of the queue)."""
        with self._turn:
            deadline = time.monotonic() + TURN_WAIT_S
            while sum(1 for i in self._active if i < index) >= BATCHES_IN_FLIGHT - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._turn.wait(left)

    def _elect_first(self, index: int) -> tuple[bool, threading.Event]:
        """Whether this call reads the process's first batch, alone (and the event set when it is read): the lowest
        batch asked for in the first :data:`FIRST_BATCH_GATHER_S` seconds (Grain's threads ask in no fixed order)."""
        with self._lock:
            if self._first is None:
                self._first, self._lead, self._lead_started = threading.Event(), index, False
                if self._started is None:  # not sent to a worker: the iterator began with this first call
                    self._started = time.monotonic()
            elif not self._lead_started:
                self._lead = min(self._lead, index)
            first = self._first
        if first.is_set() or self._lead_started:
            return False, first
        time.sleep(FIRST_BATCH_GATHER_S)
        with self._lock:
            leader = not self._lead_started and index == self._lead
            if leader:
                self._lead_started = True
        return leader, first

    def __str__(self) -> str:
        return f"HostBatchesMapDataset(host {self._index} of {self._count}, {type(self._schedule).__name__})"
