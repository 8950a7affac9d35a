"""Tokenizing exactly what the user asked for. A published ``tokenizer.json`` often carries a classifier's settings
(BERT: truncation and padding to 128, a ``[CLS] ... [SEP]`` template), so by default (``settings="off"``) those are
off and BOS/EOS are added only when asked (a token name, an id, or ``"auto"``); ``settings="keep"`` applies the
file as it is.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from datatools.base.checks import short_repr
from datatools.io.storage.paths import display, first_line

if TYPE_CHECKING:
    from tokenizers import Encoding, Tokenizer

P = ParamSpec("P")
R = TypeVar("R")

SETTINGS = ("off", "keep")
SPECIAL_NAMES = {
    "bos": ("<s>", "<bos>", "<|begin_of_text|>", "<|startoftext|>", "[CLS]", "<|endoftext|>"),
    "eos": ("</s>", "<eos>", "<|end_of_text|>", "<|endoftext|>", "[SEP]", "<|im_end|>"),
}


def _tokenizer_from_json(text: str, where: str) -> Tokenizer:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(text)
    except Exception as exc:  # tokenizers raises a bare Exception for malformed files
        raise ValueError(f"{where}: not a valid tokenizers JSON file ({first_line(exc)})") from None


_STDERR_LOCK = threading.Lock()


@contextlib.contextmanager
def _native_stderr_held() -> Iterator[None]:
    """File descriptor 2 held in a temporary file while native tokenizer code runs: a Rust panic writes its report
    straight to it, and the command line must stay one line. Replayed afterwards unless a panic was raised; one
    thread holds it at a time (another thread's call runs unheld)."""
    if not _STDERR_LOCK.acquire(blocking=False):
        yield
        return
    try:
        try:
            sys.stderr.flush()
            saved = os.dup(2)
        except (OSError, ValueError, AttributeError):  # no descriptor 2 (an embedded interpreter)
            yield
            return
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            panicked = False
            try:
                yield
            except BaseException as exc:
                panicked = not isinstance(exc, (Exception, KeyboardInterrupt, SystemExit, GeneratorExit))
                raise
            finally:
                with contextlib.suppress(OSError, ValueError, AttributeError):
                    sys.stderr.flush()
                os.dup2(saved, 2)
                os.close(saved)
                if not panicked:
                    held.seek(0)
                    if data := held.read(1 << 20):
                        os.write(2, data)
    finally:
        _STDERR_LOCK.release()


def native_call(source: str, fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """``fn(*args, **kwargs)``, a call into the Rust tokenizer, with a panic (``pyo3_runtime.PanicException``, a
    ``BaseException``: e.g. a pre-tokenizer regex past Oniguruma's retry limit) made a ``ValueError`` naming the
    tokenizer file ``source`` (bad input, exit status 2)."""
    try:
        with _native_stderr_held():
            return fn(*args, **kwargs)
    except (Exception, KeyboardInterrupt, SystemExit, GeneratorExit):
        raise
    except BaseException as exc:  # noqa: BLE001 (a Rust panic: pyo3's PanicException derives BaseException)
        raise ValueError(
            f"{source}: the tokenizer failed inside its native code ({first_line(exc)}); "
            "a pre-tokenizer or normalizer pattern of this file cannot be applied to the text"
        ) from None


def read_tokenizer_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a tokenizer file (a ValueError names a missing one; opened by Python: any file name works)."""
    if not os.path.isfile(path):
        raise ValueError(f"{display(path)}: tokenizer file not found")
    with open(path, "rb") as f:
        return f.read()


def _switch_off(tok: Tokenizer) -> dict[str, Any]:
    """Disable truncation and padding in place; returns what the file had set (for the record)."""
    had = {"truncation": tok.truncation, "padding": tok.padding}
    tok.no_truncation()
    tok.no_padding()
    return {k: v for k, v in had.items() if v}


def load_tokenizer(path: str | os.PathLike[str], settings: str = "off") -> Tokenizer:
    """A ``tokenizers.Tokenizer`` from its JSON file, truncation and padding off unless ``settings="keep"``; a
    ValueError when the file is missing or not a tokenizers JSON file, or ``settings`` is unknown."""
    return open_encoder(path, settings=settings).tokenizer


def resolve_special(tok: Tokenizer, value: str | int | None, which: str) -> int | None:
    """The id of a BOS/EOS token given as an id, a token name or ``"auto"`` (the usual names, in order)."""
    if value is None:
        return None
    vocab = tok.get_vocab_size(with_added_tokens=True)
    text = str(value)
    if isinstance(value, int) or text.isdigit():
        i = int(text)
        if isinstance(value, bool) or not 0 <= i < vocab:
            raise ValueError(f"--{which} {text}: not a token id of this tokenizer (vocabulary of {vocab})")
        return i
    names = SPECIAL_NAMES[which] if text == "auto" else (text,)
    for name in names:
        found = tok.token_to_id(name)
        if found is not None:
            return found
    if text == "auto":
        raise ValueError(
            f"--{which}: the tokenizer has no {which.upper()} token (looked for {', '.join(names)}); "
            f"name it: --{which} TOKEN"
        )
    raise ValueError(f"--{which} {text[:80]!r}: no such token in the tokenizer")


LENGTH_BATCH_TEXTS = 1024  # texts per tokenizer call when only lengths are kept
LENGTH_BATCH_CHARS = 1 << 20  # characters per tokenizer call (1 Mi: ~100 MB of tokenizer output at most)
PIECE_CHARS = 1 << 18  # a longer text is counted in pieces of about this many characters
CUT_WINDOW = 1 << 12  # characters before a piece's end searched for a pre-token boundary


def split_text(tok: Tokenizer, text: str, source: str = "tokenizer") -> Iterator[str]:
    """``text`` in pieces of at most :data:`PIECE_CHARS` characters, yielded one at a time, each cut at the last
    pre-token start (not right after whitespace: GPT-2 splits a whitespace run by what follows it) in the
    :data:`CUT_WINDOW` characters before its end, else in the whole piece, so the pieces' token counts add up to
    the text's; without a pre-tokenizer, before the last space; with no boundary, where it ends (the count may
    then differ by a token or two)."""
    if len(text) <= PIECE_CHARS:
        yield text
        return
    pre = tok.pre_tokenizer
    start = 0
    while len(text) - start > PIECE_CHARS:
        cut = hi = start + PIECE_CHARS
        for lo in dict.fromkeys((max(start + 1, hi - CUT_WINDOW), start + 1)):  # the window, then the piece
            window = text[lo:hi]
            if pre is not None:
                split = native_call(source, pre.pre_tokenize_str, window)
                starts = [a for _, (a, _) in split if a > 0 and not window[a - 1].isspace()]
                found = starts[-1] if starts else -1
            else:
                found = window.rfind(" ")
            if found > 0:
                cut = lo + found
                break
        yield text[start:cut]  # one piece at a time: a 300 MB text is not copied whole into pieces
        start = cut
    yield text[start:]


@dataclass
class TextEncoder:
    """Texts to token ids, as the user asked (see the module docstring). Picklable (it carries the JSON text).

    Attributes:
      tokenizer_json: the tokenizer file's text.
      source: the file it came from (for messages and records).
      sha256: hex digest of the file's bytes.
      settings: ``off`` or ``keep``.
      bos_id, eos_id: ids put before / after every document, or None.
      switched_off: the file's truncation/padding settings that ``off`` disabled.
    """

    tokenizer_json: str = field(repr=False)  # hundreds of KB: a repr shows source and sha256 instead
    source: str
    sha256: str
    settings: str = "off"
    bos_id: int | None = None
    eos_id: int | None = None
    switched_off: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self._tok: Tokenizer | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "_tok"}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, _tok=None)

    @property
    def tokenizer(self) -> Tokenizer:
        if self._tok is None:
            self._tok = _tokenizer_from_json(self.tokenizer_json, self.source)
            if self.settings == "off":
                _switch_off(self._tok)
        return self._tok

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.get_vocab_size(with_added_tokens=True)

    def _encoded(self, texts: Sequence[str]) -> Iterator[tuple[list[int], list[Encoding]]]:
        """``(owners, encodings)`` per tokenizer call, in order, in batches of at most :data:`LENGTH_BATCH_TEXTS`
        texts and :data:`LENGTH_BATCH_CHARS` characters (``tokenizers`` holds ~100 bytes a token). A text over
        :data:`PIECE_CHARS` goes as :func:`split_text` pieces (a 50 MB line whole took 337 s and 3.1 GB), except
        with ``settings="keep"`` (the file's truncation, padding and template apply to the whole text). A caller
        drops each batch before asking for the next: with two batches of 4 Mi characters alive at once, a 50 MB
        line peaked at 1.16 GB."""
        tok = self.tokenizer
        keep = self.settings == "keep"
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets (tokenizers >= 0.21)
        owners: list[int] = []
        pieces: list[str] = []
        chars = 0
        for i, text in enumerate(texts):
            for piece in [text] if keep else split_text(tok, text, source=self.source):
                if pieces and (len(pieces) >= LENGTH_BATCH_TEXTS or chars + len(piece) > LENGTH_BATCH_CHARS):
                    yield owners, native_call(self.source, encode, pieces, add_special_tokens=keep)
                    owners, pieces, chars = [], [], 0
                owners.append(i)
                pieces.append(piece)
                chars += len(piece)
        if pieces:
            yield owners, native_call(self.source, encode, pieces, add_special_tokens=keep)

    def encode(
        self, texts: Sequence[str], dtype: npt.DTypeLike = np.int64
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """Tokens of all ``texts`` back to back (``dtype``) and each text's length (int64 tokens), BOS/EOS
        included; tokenized in bounded batches and pieces (:meth:`_encoded`)."""
        bos = np.array([] if self.bos_id is None else [self.bos_id], dtype)
        eos = np.array([] if self.eos_id is None else [self.eos_id], dtype)
        lengths = np.zeros(len(texts), np.int64)
        parts: list[npt.NDArray[Any]] = []
        last = -1  # the text whose pieces came last: every text has at least one piece
        for owners, encoded in self._encoded(texts):
            for i, ids in zip(owners, (np.asarray(e.ids, dtype) for e in encoded)):
                if i != last:
                    parts.extend((eos, bos) if last >= 0 else (bos,))
                    last = i
                lengths[i] += ids.shape[0]
                parts.append(ids)
            del encoded  # its Encodings (~100 B a token) freed before the next call makes another batch of them
        if last >= 0:
            parts.append(eos)
        lengths += bos.size + eos.size
        return (np.concatenate(parts) if parts else np.zeros(0, dtype)), lengths

    def count_tokens(self, texts: Sequence[str]) -> npt.NDArray[np.int64]:
        """Tokens of each text (int64), BOS/EOS included, without keeping any token (for length analysis)."""
        out = np.zeros(len(texts), np.int64)
        for owners, encoded in self._encoded(texts):
            np.add.at(out, owners, [len(e) for e in encoded])
            del encoded  # freed before the next call (see encode)
        return out + (self.bos_id is not None) + (self.eos_id is not None)

    def describe(self) -> dict[str, Any]:
        """What reports and manifests record about the tokenization."""
        tok = self.tokenizer

        def name(i: int | None) -> dict[str, int | str | None] | None:
            return None if i is None else {"id": i, "token": tok.id_to_token(i)}

        return {
            "file": self.source,
            "sha256": self.sha256,
            "settings": self.settings,
            "bos": name(self.bos_id),
            "eos": name(self.eos_id),
            "switched_off": dict(self.switched_off or {}),
            "vocab_size": self.vocab_size,
        }

    def summary(self) -> str:
        """One line for the terminal: the file, its digest, what was switched off, the special tokens."""
        d = self.describe()
        parts = [f"tokenizer {d['file']} (sha256 {d['sha256'][:12]})"]
        if off := d["switched_off"]:
            what = []
            if "truncation" in off:
                what.append(f"truncation (max_length {off['truncation'].get('max_length')})")
            if "padding" in off:  # a length of None: padded to the longest in a batch
                what.append(f"padding (to {off['padding'].get('length') or 'the longest in a batch'})")
            parts.append(f"its {' and '.join(what)} switched off (--tokenizer-settings keep applies them)")
        elif self.settings == "keep":
            parts.append("its settings kept")
        for which in ("bos", "eos"):
            if d[which]:
                parts.append(f"{which} {d[which]['token']!s}={d[which]['id']}")
        return "; ".join(parts)


def open_encoder(
    path: str | os.PathLike[str], *, settings: str = "off", bos: str | int | None = None, eos: str | int | None = None
) -> TextEncoder:
    """A :class:`TextEncoder` for the tokenizer file at ``path``; BOS/EOS resolved (and checked) here, once."""
    if settings not in SETTINGS:
        raise ValueError(f"tokenizer settings must be one of {', '.join(SETTINGS)}; got {short_repr(settings)}")
    data = read_tokenizer_file(path)
    text = data.decode("utf-8", "replace")
    tok = _tokenizer_from_json(text, display(path))
    switched = _switch_off(tok) if settings == "off" else {}
    enc = TextEncoder(
        text,
        display(path),
        hashlib.sha256(data).hexdigest(),
        settings,
        resolve_special(tok, bos, "bos"),
        resolve_special(tok, eos, "eos"),
        switched,
    )
    enc._tok = tok
    return enc
