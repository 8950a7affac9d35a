"""SentencePiece tokenizers (MaxText's usual ``tokenizer_path``), with
:class:`~datatools.io.formats.tokenizer.TextEncoder`'s interface, read by the ``sentencepiece`` package itself (the ids
MaxText gets). Nothing is added to a text unless asked: ``bos``/``eos`` (``"auto"``: the model's ``<s>``/``</s>``, a
piece or an id).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from datatools.base.install import missing
from datatools.io.formats.tokenizer import read_tokenizer_file
from datatools.io.storage.paths import display

if TYPE_CHECKING:
    from sentencepiece import SentencePieceProcessor

SUFFIXES = (".model", ".spm")


def is_sentencepiece(path: str | os.PathLike[str]) -> bool:
    """True for a SentencePiece model file: a ``.model``/``.spm`` name, or a file whose first byte is not
    ``{`` (a tokenizers JSON file starts with ``{``; a SentencePiece model is a binary protobuf)."""
    p = Path(os.fspath(path))
    if p.suffix.lower() in SUFFIXES:
        return True
    if p.name.endswith(".json") or not p.is_file():
        return False
    with open(p, "rb") as f:
        head = f.read(64).lstrip()
    return bool(head) and not head.startswith(b"{")


def _processor(data: bytes, where: str) -> SentencePieceProcessor:
    try:
        import sentencepiece as spm
    except ModuleNotFoundError as exc:  # the maxtext extra
        if (exc.name or "").split(".")[0] != "sentencepiece":
            raise
        raise missing("sentencepiece", f"{where}: a SentencePiece tokenizer") from None
    proc = spm.SentencePieceProcessor()
    try:
        proc.LoadFromSerializedProto(data)
    except Exception as exc:  # sentencepiece raises RuntimeError/OSError on a file that is not a model
        raise ValueError(f"{where}: not a SentencePiece model ({str(exc).splitlines()[0][:200]})") from None
    return proc


class SentencePieceEncoder:
    """Texts to token ids by a SentencePiece model. Picklable (the model's bytes travel; workers reload them).

    Attributes:
      source: the file it came from (for messages and records).
      sha256: hex digest of the file's bytes.
      settings: always ``off`` (a SentencePiece model has no truncation or padding).
      bos_id, eos_id: ids put before / after every document, or None.
    """

    def __init__(self, data: bytes, source: str, bos: str | int | None = None, eos: str | int | None = None):
        self.model = data
        self.source = source
        self.sha256 = hashlib.sha256(data).hexdigest()
        self.settings = "off"
        self.switched_off: dict[str, Any] = {}
        self._proc = _processor(data, source)
        self.bos_id = self._special(bos, "bos")
        self.eos_id = self._special(eos, "eos")

    def _special(self, value: str | int | None, which: str) -> int | None:
        if value is None:
            return None
        proc, n = self._proc, self._proc.get_piece_size()
        if value == "auto":
            i = proc.bos_id() if which == "bos" else proc.eos_id()
            if i < 0:
                raise ValueError(f"{self.source}: the model has no {which.upper()} token; name one with --{which}")
            return int(i)
        if isinstance(value, int) and not isinstance(value, bool) or (isinstance(value, str) and value.isdigit()):
            i = int(value)
            if not 0 <= i < n:
                raise ValueError(f"{self.source}: --{which} id {i} is not in [0, {n})")
            return i
        i = proc.piece_to_id(str(value))
        if i == proc.unk_id() and str(value) != proc.id_to_piece(proc.unk_id()):
            raise ValueError(f"{self.source}: no token {str(value)!r} for --{which}")
        return int(i)

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_proc"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._proc = _processor(self.model, self.source)

    @property
    def vocab_size(self) -> int:
        return int(self._proc.get_piece_size())

    def _ids(self, texts: Sequence[str]) -> list[list[int]]:
        return cast("list[list[int]]", self._proc.encode(list(texts), out_type=int))  # a list in: a list out

    def encode(
        self, texts: Sequence[str], dtype: npt.DTypeLike = np.int64
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """(token ids back to back, tokens per text) with BOS/EOS as asked."""
        ids = self._ids(texts)
        b, e = self.bos_id, self.eos_id
        docs = [([b] if b is not None else []) + d + ([e] if e is not None else []) for d in ids]
        lengths = np.fromiter((len(d) for d in docs), np.int64, len(docs))
        flat = np.fromiter((t for d in docs for t in d), dtype, int(lengths.sum()))
        return flat, lengths

    def count_tokens(self, texts: Sequence[str]) -> npt.NDArray[np.int64]:
        """Tokens per text (BOS/EOS included), no ids kept."""
        extra = (self.bos_id is not None) + (self.eos_id is not None)
        return np.fromiter((len(d) + extra for d in self._ids(texts)), np.int64, len(texts))

    def describe(self) -> dict[str, Any]:
        return {
            "file": self.source,
            "sha256": self.sha256,
            "kind": "sentencepiece",
            "vocab_size": self.vocab_size,
            "bos": None if self.bos_id is None else {"id": self.bos_id, "token": self._proc.id_to_piece(self.bos_id)},
            "eos": None if self.eos_id is None else {"id": self.eos_id, "token": self._proc.id_to_piece(self.eos_id)},
        }

    def summary(self) -> str:
        bos, eos = ("none" if i is None else i for i in (self.bos_id, self.eos_id))
        return f"tokenizer {self.source} (SentencePiece, {self.vocab_size:,} pieces); bos {bos}; eos {eos}"


def open_sentencepiece(
    path: str | os.PathLike[str], *, bos: str | int | None = None, eos: str | int | None = None
) -> SentencePieceEncoder:
    """A :class:`SentencePieceEncoder` for the model file at ``path`` (a ValueError names a missing file)."""
    return SentencePieceEncoder(read_tokenizer_file(path), display(path), bos, eos)
