"""Text files as batches of numbered lines, streamed so memory stays bounded for GB-sized logs.

Bytes are read in blocks (``.gz`` decompressed on the fly), cut at the last newline, checked for
UTF-8 once per block (invalid bytes become U+FFFD, so those lines can be rejected by name) and cut
at the newline positions into a Polars frame ``line`` (1-based), ``text``, ``bad_utf8``. No Python
loop runs per line.

A truncated ``.gz`` ends the stream early: the lines before the cut are kept and the cut-off point
counts as one more line, with ``truncated`` set, so it can be rejected with the reason.

A ``.gz`` may not decompress to more than ``max_bytes`` (default :data:`MAX_DECOMPRESSED_BYTES`):
a few MB of compressed zeros can expand to terabytes, so a "gzip bomb" stops with an
:class:`InputError` instead of filling memory or disk. A UTF-8 byte order mark at the start of the
file is dropped (Windows tools write one), so the first line parses like the others.

A plain file can also be read as byte spans (``span``): a span holds the lines that begin in it,
so spans cut at any byte split the file into whole lines, each read by exactly one span (the
kernel-log reader parses spans in parallel).
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl
import pyarrow as pa

from pipeline.ingest.common import InputError

BLOCK_BYTES = 8 << 20
MAX_DECOMPRESSED_BYTES = 16 << 30
"""Default limit on what one ``.gz`` input may expand to (16 GiB; ``--max-decompressed-mb``)."""
BOM = "\ufeff"
BOM_BYTES = BOM.encode()


@dataclass
class LineBatch:
    frame: pl.DataFrame  # line Int64, text String, bad_utf8 Boolean, truncated Boolean
    bytes_done: int  # position in the file on disk (compressed bytes for .gz), for progress


def is_gzip(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(2) == b"\x1f\x8b"


def head_text(path: Path, size: int = 64 << 10) -> str:
    """The start of the (decompressed) file, for format sniffing."""
    try:
        with gzip.open(path, "rb") if is_gzip(path) else path.open("rb") as f:
            data = f.read1(size) if hasattr(f, "read1") else f.read(size)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"{path}: cannot read ({exc}); a damaged or truncated .gz? copy it again") from exc
    return data.decode("utf-8", errors="replace")


def too_big(path: Path, limit: int) -> InputError:
    return InputError(
        f"{path}: decompresses to more than {limit / (1 << 20):g} MB, the limit for one .gz input (a gzip "
        "bomb?); if the file is genuine, raise --max-decompressed-mb (config: [ingest] max_decompressed_mb)"
    )


def check_decompressed_size(path: Path, limit: int = MAX_DECOMPRESSED_BYTES) -> None:
    """For readers that load a whole ``.gz`` at once: stream it first and stop past ``limit``."""
    if not is_gzip(path):
        return
    seen = 0
    try:
        with gzip.open(path, "rb") as f:
            while piece := f.read1(BLOCK_BYTES):
                seen += len(piece)
                if seen > limit:
                    raise too_big(path, limit)
    except (OSError, EOFError, zlib.error):
        return  # a damaged .gz: the reader reports it with its own message


def _frame(data: bytes | bytearray | memoryview, first_line: int, file_start: bool) -> pl.DataFrame:
    """The lines of ``data``, which ends with a newline. The block is cut at its newline positions
    (NumPy) into one Arrow string array: no Python string per line and no copy per line.
    ``file_start``: ``data`` begins the file (a byte order mark there is dropped)."""
    if file_start and bytes(data[: len(BOM_BYTES)]) == BOM_BYTES:
        data = data[len(BOM_BYTES) :]
    raw = np.frombuffer(data, np.uint8)
    ascii_only = raw.max(initial=0) < 0x80
    if not ascii_only:  # valid UTF-8 stays as is; undecodable bytes become U+FFFD
        raw = np.frombuffer(bytes(data).decode("utf-8", errors="replace").encode(), np.uint8)
    ends = np.flatnonzero(raw == ord("\n"))
    offsets = np.concatenate([[0], ends + 1]).astype(np.int64)  # each line with its newline
    with_newline = pa.LargeStringArray.from_buffers(len(ends), pa.py_buffer(offsets), pa.py_buffer(raw))
    text = pl.Series("text", with_newline).str.head(-1)
    if (raw[ends - 1] == ord("\r")).any():  # CRLF: drop the \r too (ends - 1 = -1 is the last \n)
        text = text.str.strip_suffix("\r")
    frame = pl.DataFrame({"text": text})
    return frame.with_row_index("line", offset=first_line).with_columns(
        pl.col("line").cast(pl.Int64),
        bad_utf8=pl.lit(False) if ascii_only else pl.col("text").str.contains("\ufffd", literal=True),
        truncated=pl.lit(False),
    )


def _skip_to_line_start(stream, start: int) -> int:
    """Position ``stream`` on the first line that begins at or after byte ``start``; returns it."""
    if start == 0:
        return 0
    stream.seek(start - 1)
    pos = start - 1
    while piece := stream.read1(1 << 16):
        newline = piece.find(b"\n")
        if newline >= 0:
            pos += newline + 1
            stream.seek(pos)
            return pos
        pos += len(piece)
    return pos


def read_lines(
    path: Path,
    block_bytes: int | None = None,
    max_bytes: int = MAX_DECOMPRESSED_BYTES,
    span: tuple[int, int] | None = None,
) -> Iterator[LineBatch]:
    """Yield the file's lines in batches; a last line without a newline is still a line.

    ``span`` (plain files only): just the lines that begin in bytes ``[start, stop)``, numbered from 1,
    so that byte ranges cut anywhere split a file into disjoint runs of whole lines."""
    block_bytes = block_bytes or BLOCK_BYTES
    next_line = 1
    carry = b""
    compressed = is_gzip(path)
    if span is not None and compressed:
        raise ValueError("a byte span of a .gz file cannot be read without the bytes before it")
    expanded = 0
    with path.open("rb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        start, stop = (0, float("inf")) if span is None else span
        pos = _skip_to_line_start(stream, start)
        file_start = pos == 0
        while True:
            block, truncated = bytearray(), False
            try:
                while len(block) < block_bytes:
                    want = min(block_bytes - len(block), stop - pos)
                    piece = stream.read1(want) if want > 0 else b""
                    if not piece:
                        break
                    block += piece
                    pos += len(piece)
                    expanded += len(piece)
                    if compressed and expanded > max_bytes:
                        raise too_big(path, max_bytes)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                if next_line == 1 and not block and not carry:
                    raise InputError(
                        f"{path}: cannot read ({exc}); a damaged or truncated .gz? copy it again"
                    ) from exc
                truncated = True
            data = carry + block
            if truncated:  # the piece after the last newline (maybe empty) is the cut-off line
                frame = _frame(data + b"\n", next_line, file_start)
                frame = frame.with_columns(truncated=pl.col("line") == pl.col("line").max())
                yield LineBatch(frame, raw.tell())
                return
            if not block:  # end of file or span: the last line, which may run past the span's end
                if carry:
                    while not carry.endswith(b"\n") and (piece := stream.read1(1 << 16)):
                        newline = piece.find(b"\n")
                        carry += piece if newline < 0 else piece[: newline + 1]
                    ended = carry if carry.endswith(b"\n") else carry + b"\n"
                    yield LineBatch(_frame(ended, next_line, file_start), raw.tell())
                return
            cut = data.rfind(b"\n") + 1
            carry = bytes(data[cut:])
            if cut:
                frame = _frame(memoryview(data)[:cut], next_line, file_start)
                file_start = False
                next_line += frame.height
                yield LineBatch(frame, raw.tell())
