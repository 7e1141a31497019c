"""Text files as batches of numbered lines, streamed so memory stays bounded for GB-sized logs.

Bytes are read in blocks (``.gz`` decompressed on the fly), cut at the last newline, decoded once
per block (invalid UTF-8 becomes U+FFFD, so those lines can be rejected by name) and split into a
Polars frame ``line`` (1-based), ``text``, ``bad_utf8``. No Python loop runs per line.

A truncated ``.gz`` ends the stream early: the lines before the cut are kept and the cut-off point
counts as one more line, with ``truncated`` set, so it can be rejected with the reason.

A ``.gz`` may not decompress to more than ``max_bytes`` (default :data:`MAX_DECOMPRESSED_BYTES`):
a few MB of compressed zeros can expand to terabytes, so a "gzip bomb" stops with an
:class:`InputError` instead of filling memory or disk. A UTF-8 byte order mark at the start of the
file is dropped (Windows tools write one), so the first line parses like the others.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from pipeline.ingest.common import InputError

BLOCK_BYTES = 8 << 20
MAX_DECOMPRESSED_BYTES = 16 << 30
"""Default limit on what one ``.gz`` input may expand to (16 GiB; ``--max-decompressed-mb``)."""
BOM = "\ufeff"


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


def _frame(data: bytes, first_line: int, truncated: bool = False) -> pl.DataFrame:
    decoded = data.decode("utf-8", errors="replace")
    text = pl.Series("text", [decoded.removeprefix(BOM) if first_line == 1 else decoded])
    lines = text.str.split("\n").explode()
    if not truncated:
        lines = lines.slice(0, lines.len() - 1)  # the block ends with a newline
    frame = pl.DataFrame({"text": lines}).with_columns(pl.col("text").str.strip_suffix("\r"))
    return frame.with_row_index("line", offset=first_line).with_columns(
        pl.col("line").cast(pl.Int64),
        bad_utf8=pl.col("text").str.contains("\ufffd", literal=True),
        truncated=pl.lit(False),
    )


def read_lines(
    path: Path, block_bytes: int | None = None, max_bytes: int = MAX_DECOMPRESSED_BYTES
) -> Iterator[LineBatch]:
    """Yield the file's lines in batches; a last line without a newline is still a line."""
    block_bytes = block_bytes or BLOCK_BYTES
    next_line = 1
    carry = b""
    compressed = is_gzip(path)
    expanded = 0
    with path.open("rb") as raw:
        stream = gzip.GzipFile(fileobj=raw, mode="rb") if compressed else raw
        while True:
            block, truncated = bytearray(), False
            try:
                while len(block) < block_bytes:
                    piece = stream.read1(block_bytes - len(block))
                    if not piece:
                        break
                    block += piece
                    expanded += len(piece)
                    if compressed and expanded > max_bytes:
                        raise too_big(path, max_bytes)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                if next_line == 1 and not block and not carry:
                    raise InputError(
                        f"{path}: cannot read ({exc}); a damaged or truncated .gz? copy it again"
                    ) from exc
                truncated = True
            data = carry + bytes(block)
            if truncated:
                frame = _frame(data, next_line, truncated=True)
                frame = frame.with_columns(truncated=pl.col("line") == pl.col("line").max())
                yield LineBatch(frame, raw.tell())
                return
            if not block:  # end of file: a last line without a newline
                if carry:
                    yield LineBatch(_frame(carry + b"\n", next_line), raw.tell())
                return
            cut = data.rfind(b"\n") + 1
            carry = data[cut:]
            if cut:
                frame = _frame(data[:cut], next_line)
                next_line += frame.height
                yield LineBatch(frame, raw.tell())
