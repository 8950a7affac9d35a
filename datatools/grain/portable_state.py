"""Checkpoints that restore with any number of prefetch workers.

Grain's ``mp_prefetch`` iterator saves one read position per worker (worker ``i``
reads elements ``i, i + W, i + 2W, ...``), so a state saved with 2 workers cannot
be restored into a pipeline with 0 or 4 (``KeyError: 'next_index'``). The position
is really one number: the elements consumed so far, the sum of the workers'
positions. :class:`PortableStateIterDataset` wraps a pipeline's final dataset and
writes every prefetch state in that portable form ``{"next_index": k}`` (which is
also what the single-process iterator saves); restoring converts it back into the
current pipeline's form, for any worker count. Only the read position is rewritten;
the rest of the state (a streaming packer's window, a bucketer's buffer) is kept.
"""

from __future__ import annotations

import grain

MP_KEYS = {"next_index_in_cycle", "next_index_in_datasets", "iterators_in_use_indices", "iterators_in_use_states",
           "exhausted"}
MARK = "elements_read"  # the portable position: elements read from the prefetched dataset


def portable(state):
    """``state`` with every multi-worker read position replaced by the elements read so far."""
    if isinstance(state, dict):
        if MP_KEYS <= set(state):
            if state.get("future_states"):
                raise ValueError("this pipeline state holds pending worker states and cannot be made portable")
            per_worker = [s["next_index"] for s in state["iterators_in_use_states"]]
            return {MARK: int(sum(per_worker))}
        if set(state) == {"next_index"}:
            return {MARK: int(state["next_index"])}
        return {k: portable(v) for k, v in state.items()}
    return state


def localized(state, like):
    """A portable ``state`` in the form of ``like`` (a state of the pipeline being restored)."""
    if isinstance(state, dict) and set(state) == {MARK}:
        k = state[MARK]
        if isinstance(like, dict) and MP_KEYS <= set(like):
            workers = len(like["iterators_in_use_states"])
            return {"next_index_in_cycle": k % workers, "next_index_in_datasets": workers,
                    "iterators_in_use_indices": list(range(workers)),
                    "iterators_in_use_states": [{"next_index": k // workers + (1 if i < k % workers else 0)}
                                                for i in range(workers)],
                    "exhausted": [0] * workers, "future_states": {}}
        return {"next_index": k}
    if isinstance(state, dict) and isinstance(like, dict):
        return {k: localized(v, like.get(k)) for k, v in state.items()}
    return state


class _PortableStateIterator(grain.DatasetIterator):
    def __next__(self):
        return next(self._parent)

    def get_state(self):
        return {"portable": portable(self._parent.get_state())}

    def set_state(self, state):
        if not isinstance(state, dict) or "portable" not in state:
            raise ValueError("not a datatools pipeline state (expected the dict get_state() returned, with a "
                             "'portable' entry)")
        self._parent.set_state(localized(state["portable"], self._parent.get_state()))

    def close(self) -> None:
        close = getattr(self._parent, "close", None)
        if close is not None:
            close()


class PortableStateIterDataset(grain.IterDataset):
    """The parent's elements unchanged; its iterator's state restores with any number of prefetch workers.

    Args:
      parent: the pipeline's final dataset.
    """

    def __iter__(self):
        return _PortableStateIterator(self._parent.__iter__())

    def __str__(self) -> str:
        return "PortableStateIterDataset"
