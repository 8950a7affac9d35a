"""ArrayRecord files (MaxText's default Grain input), read as they are. MaxText writes ``grain_train_files`` as a
glob or a comma list; every record is a serialized ``tf.train.Example`` whose feature is token ids (``int64_list``)
or a text (``bytes_list``, tokenized by the input's tokenizer). The ``Example`` wire format is parsed here, so
reading needs ``array_record`` and no TensorFlow.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import cast

import numpy as np

from datatools.base.install import missing

SUFFIX = ".array_record"
BATCH_RECORDS = 4096  # records decoded at a time: memory holds one batch's bytes, never a file's
TOKEN_FEATURES = ("inputs", "input_ids", "tokens", "token_ids", "targets")
TEXT_FEATURES = ("text", "content", "document")
FeatureValues = list[int] | list[bytes]  # one record's values of a feature: int64_list or bytes_list


def _module() -> ModuleType:
    try:
        from array_record.python import array_record_module
    except ModuleNotFoundError as exc:  # the maxtext extra
        if (exc.name or "").split(".")[0] != "array_record":
            raise
        raise missing("array_record", "reading ArrayRecord files") from None
    module: ModuleType = array_record_module  # untyped (no type information shipped)
    return module


def _patterns(path: str | os.PathLike[str]) -> list[str]:
    return [p.strip() for p in os.fspath(path).split(",") if p.strip()]


def detect(path: str | os.PathLike[str]) -> bool:
    """True when ``path`` (a file, a glob or a comma list of them) names ArrayRecord files: by the
    ``.array_record`` suffix (MaxText's shards are ``name.array_record-00000-of-01024``)."""
    pats = _patterns(path)
    return bool(pats) and all(SUFFIX in Path(p).name for p in pats)


def expand(path: str | os.PathLike[str]) -> list[Path]:
    """The files ``path`` names, as MaxText reads ``grain_train_files``: a comma list of files or globs, each
    glob's matches sorted. A pattern that matches nothing is a ValueError naming it."""
    files: list[Path] = []
    pats = _patterns(path)
    if not pats:
        raise ValueError(f"{os.fspath(path)!r}: no file named")
    for pat in pats:
        found = sorted(glob.glob(pat)) if glob.has_magic(pat) else ([pat] if os.path.exists(pat) else [])
        if not found:
            raise ValueError(f"{pat}: no such file (nothing matches)")
        files.extend(Path(f) for f in found if os.path.isfile(f))
    if not files:
        raise ValueError(f"{os.fspath(path)}: no files")
    return files


def records(f: str | os.PathLike[str]) -> Iterator[list[bytes]]:
    """The raw records of file ``f`` in order, :data:`BATCH_RECORDS` at a time."""
    module = _module()  # a missing package is the environment's, not the file's
    try:
        reader = module.ArrayRecordReader(os.fspath(f))
    except Exception as exc:  # the C++ reader raises RuntimeError / ValueError on a file it cannot parse
        raise ValueError(f"{os.fspath(f)}: not an ArrayRecord file ({str(exc).splitlines()[0][:200]})") from None
    try:
        n = int(reader.num_records())
        for a in range(0, n, BATCH_RECORDS):
            yield list(reader.read(list(range(a, min(n, a + BATCH_RECORDS)))))
    finally:
        reader.close()


# -- tf.train.Example, parsed from its wire format ------------------------------------------------------------


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if i >= len(buf):
            raise ValueError("truncated varint")
        b = buf[i]
        i += 1
        out |= (b & 0x7F) << shift
        if b < 0x80:
            return out, i
        shift += 7
        if shift > 63:
            raise ValueError("varint over 64 bits")


def _fields(buf: bytes) -> Iterator[tuple[int, int, bytes | int]]:
    """(field number, wire type, value) of a protobuf message: bytes for length-delimited, int for varints."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(buf, i)
            yield num, wt, v
        elif wt == 2:
            n, i = _varint(buf, i)
            if i + n > len(buf):
                raise ValueError("truncated field")
            yield num, wt, buf[i : i + n]
            i += n
        elif wt == 1:
            i += 8
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt}")


def _b(v: bytes | int) -> bytes:
    """A length-delimited value (a varint where a message belongs reads as empty)."""
    return v if isinstance(v, bytes) else b""


def parse_example(record: bytes) -> dict[str, FeatureValues]:
    """A ``tf.train.Example``'s features: name -> int64 values or bytes values (floats are skipped)."""
    out: dict[str, FeatureValues] = {}
    for features in (v for n, _, v in _fields(record) if n == 1):
        for entry in (v for n, _, v in _fields(_b(features)) if n == 1):  # Features: map<string, Feature> feature = 1
            name, feature = "", b""
            for enum, _, v in _fields(_b(entry)):
                if enum == 1:
                    name = _b(v).decode("utf-8", "replace")
                elif enum == 2:
                    feature = _b(v)
            for kind, _, lst in _fields(feature):  # Feature: bytes_list = 1, float_list = 2, int64_list = 3
                if kind == 1:
                    out[name] = [bytes(b) for n, _, b in _fields(_b(lst)) if n == 1]
                elif kind == 3:
                    vals: list[int] = []
                    for n, w, v in _fields(_b(lst)):
                        if n == 1 and w == 2:  # packed
                            j, data = 0, _b(v)
                            while j < len(data):
                                x, j = _varint(data, j)
                                vals.append(x - (1 << 64) if x >= 1 << 63 else x)
                        elif n == 1:
                            vals.append(int(v) - (1 << 64) if int(v) >= 1 << 63 else int(v))
                    out[name] = vals
    return out


def _enc_varint(x: int) -> bytes:
    x &= (1 << 64) - 1
    out = bytearray()
    while x > 0x7F:
        out.append(x & 0x7F | 0x80)
        x >>= 7
    out.append(x)
    return bytes(out)


def _ld(n: int, payload: bytes) -> bytes:
    return _enc_varint((n << 3) | 2) + _enc_varint(len(payload)) + payload


def make_example(features: dict[str, list[int] | str | bytes]) -> bytes:
    """Serialize a ``tf.train.Example`` (what TensorFlow writes: int64 lists packed): lists of ints become
    ``int64_list``, ``str``/``bytes`` a one-value ``bytes_list``. For tests and for writing MaxText inputs."""
    entries = b""
    for name, value in features.items():
        if isinstance(value, (str, bytes)):
            raw = value.encode() if isinstance(value, str) else value
            feature = _ld(1, _ld(1, raw))
        else:
            packed = b"".join(_enc_varint(int(v)) for v in value)
            feature = _ld(3, _ld(1, packed))
        entries += _ld(1, _ld(1, name.encode()) + _ld(2, feature))
    return _ld(1, entries)


def write(path: str | os.PathLike[str], examples: list[dict[str, list[int] | str | bytes]]) -> None:
    """Write ``examples`` as one ArrayRecord file of serialized ``tf.train.Example`` records."""
    writer = _module().ArrayRecordWriter(os.fspath(path), "group_size:1")
    try:
        for ex in examples:
            writer.write(make_example(ex))
    finally:
        writer.close()


# -- the feature and the documents -----------------------------------------------------------------------------


def features(f: str | os.PathLike[str]) -> dict[str, bool]:
    """The features of the first record of ``f``, each mapped to whether it holds text (a ``bytes_list``); empty
    for a file of no record. A ValueError names the file when that record is not a ``tf.train.Example``."""
    first = next((batch[0] for batch in records(f) if batch), None)
    if first is None:
        return {}
    try:
        ex = parse_example(first)
    except ValueError as exc:
        raise ValueError(f"{os.fspath(f)}: record 0 is not a tf.train.Example ({exc})") from None
    return {k: bool(v) and isinstance(v[0], bytes) for k, v in ex.items()}


def detect_feature(f: str | os.PathLike[str], feature: str | None) -> tuple[str, bool]:
    """(feature, is_text) of the first record of ``f``: ``feature`` checked, or the first token feature
    (``inputs``, ``input_ids``, ...) or text feature (``text``, ...) present. A ValueError names the file and the
    features it has."""
    found = features(f)
    if feature is not None:
        if feature not in found:
            raise ValueError(f"{os.fspath(f)}: no feature {feature!r} (features: {', '.join(sorted(found)) or 'none'})")
        return feature, found[feature]
    for names in (TOKEN_FEATURES, TEXT_FEATURES):
        hits = [n for n in names if n in found]
        if hits:
            return hits[0], found[hits[0]]
    raise ValueError(
        f"{os.fspath(f)}: no token or text feature among {', '.join(sorted(found)) or 'none'}; name one with --column"
    )


def feature_values(f: str | os.PathLike[str], feature: str) -> Iterator[list[FeatureValues]]:
    """The values of ``feature`` in each record of file ``f``, a batch of records at a time (a ValueError naming
    the file for a record that does not parse)."""
    where = os.fspath(f)
    for batch in records(f):
        values: list[FeatureValues] = []
        for rec in batch:
            try:
                ex = parse_example(rec)
            except ValueError as exc:
                raise ValueError(f"{where}: a record is not a tf.train.Example ({exc})") from None
            if feature not in ex:
                raise ValueError(f"{where}: a record has no feature {feature!r}")
            values.append(ex[feature])
        yield values


def decode_texts(values: list[FeatureValues]) -> list[str]:
    """The texts of a text feature's values (each a list of bytes: the caller chose a text feature), as UTF-8
    (errors replaced)."""
    return [b"".join(cast("list[bytes]", v)).decode("utf-8", "replace") for v in values]


def texts(f: str | os.PathLike[str], feature: str) -> Iterator[list[str]]:
    """The texts of ``feature`` in file ``f``, a batch of records at a time (``datatools pretokenize``)."""
    for values in feature_values(f, feature):
        yield decode_texts(values)


def documents(
    f: str | os.PathLike[str], feature: str, encode: Callable[[list[str]], tuple[np.ndarray, np.ndarray]] | None = None
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(tokens int64, lengths int64) of file ``f``, a batch of records at a time. Text is tokenized by
    ``encode`` (a list of strings -> tokens back to back, tokens per string)."""
    for values in feature_values(f, feature):
        if encode is not None:
            tokens, lengths = encode(decode_texts(values))
            yield np.asarray(tokens, np.int64), np.asarray(lengths, np.int64)
            continue
        lengths = np.fromiter((len(v) for v in values), np.int64, len(values))
        tokens = np.asarray([x for v in values for x in v], np.int64)
        if tokens.size and int(tokens.min()) < 0:
            raise ValueError(f"{os.fspath(f)}: feature {feature!r} holds a negative token id {int(tokens.min())}")
        yield tokens, lengths


def lengths(
    f: str | os.PathLike[str], feature: str, count: Callable[[list[str]], np.ndarray] | None = None
) -> Iterator[np.ndarray]:
    """int64 tokens per record of file ``f``, a batch at a time (text counted by ``count``)."""
    for values in feature_values(f, feature):
        if count is not None:
            yield np.asarray(count(decode_texts(values)), np.int64)
        else:
            yield np.fromiter((len(v) for v in values), np.int64, len(values))
