"""Text files as batches of numbered lines, streamed so memory stays bounded for GB-sized logs.

Bytes are read in blocks (``.gz`` decompressed on the fly), cut at the last newline, checked for
UTF-8 once per block (invalid bytes become U+FFFD, so those lines can be rejected by name) and cut
at the newline positions (:class:`Block`, :func:`read_blocks`). :func:`read_lines` makes every line
a Polars string (frame ``line`` (1-based), ``text``, ``bad_utf8``, ``truncated``); a reader that
wants few lines finds them in the bytes first and makes strings of those only (the kernel-log
reader: lines naming ``Xid`` or ``NVRM``). No Python loop runs per line.

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

from pipeline.store.files import InputError

BLOCK_BYTES = 8 << 20
MAX_DECOMPRESSED_BYTES = 16 << 30
"""Default limit on what one ``.gz`` input may expand to (16 GiB; ``--max-decompressed-mb``)."""
RAW_CHARS = 2000
"""A reject's raw text (a JSON item, a record of a structured export) is cut at this many
characters: the rejects table names the line, it need not hold a megabyte of it."""
BOM = "\ufeff"
BOM_BYTES = BOM.encode()


LINE_SCHEMA = {"line": pl.Int64, "text": pl.String, "bad_utf8": pl.Boolean, "truncated": pl.Boolean}
"""The columns of a batch of lines (:class:`LineBatch`), which every line reader's staging table
starts with."""

LINE_REASONS = """\
WHEN truncated THEN 'truncated .gz: the compressed stream ends here; copy the file again'
         WHEN bad_utf8 THEN 'line is not valid UTF-8 (undecodable bytes shown as U+FFFD); fix the encoding'"""
"""The first reasons of a reader's ``CASE ... END AS reason`` over a staging table of
:data:`LINE_SCHEMA`'s columns: a line cut by a truncated ``.gz``, a line that is not UTF-8."""


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


@dataclass
class Block:
    """Whole lines of a block as bytes, cut at their newlines with NumPy: no Python object per line.
    Undecodable bytes are already U+FFFD and a byte order mark at the start of the file is dropped,
    so a line's text is its bytes. ``frame`` makes Polars strings of the lines (all, or the few a
    reader wants: the kernel-log reader finds its ``Xid`` and ``NVRM`` lines with ``containing`` first)."""

    data: np.ndarray  # uint8, UTF-8, ends with a newline
    ends: np.ndarray  # int64 position of each line's newline
    first_line: int  # line number of the first line
    ascii_only: bool
    truncated: bool  # the last line is where a truncated .gz ends
    bytes_done: int  # position in the file on disk (compressed bytes for .gz), for progress

    @classmethod
    def of(cls, data, first_line: int, file_start: bool, truncated: bool, bytes_done: int) -> Block:
        """``data`` ends with a newline; ``file_start``: it begins the file."""
        if file_start and bytes(data[: len(BOM_BYTES)]) == BOM_BYTES:
            data = data[len(BOM_BYTES) :]
        raw = np.frombuffer(data, np.uint8)
        ascii_only = bool(raw.max(initial=0) < 0x80)
        if not ascii_only:  # valid UTF-8 stays as is; undecodable bytes become U+FFFD
            try:
                str(data, "utf-8")  # valid (the usual case): checking is a third of decoding and encoding
            except UnicodeDecodeError:
                raw = np.frombuffer(str(data, "utf-8", errors="replace").encode(), np.uint8)
        ends = np.flatnonzero(raw == ord("\n"))
        return cls(raw, ends, first_line, ascii_only, truncated, bytes_done)

    @property
    def lines(self) -> int:
        return len(self.ends)

    def starts(self, rows: np.ndarray | None = None) -> np.ndarray:
        """Where each line (or each of the lines ``rows``) begins."""
        if rows is None:
            return np.concatenate([[0], self.ends[:-1] + 1])
        return np.where(rows > 0, self.ends[rows - 1] + 1, 0)

    def heads(self) -> np.ndarray:
        """The first three bytes of each line as one integer (``b0 << 16 | b1 << 8 | b2``); bytes
        past a line's end are its newline or the next line's, so a line shorter than three bytes
        never matches three printable characters. One gather of big-endian 4-byte words read at
        every byte (a strided view)."""
        starts, last = self.starts(), len(self.data) - 4
        words = np.ndarray((max(last + 1, 0),), ">u4", self.data, strides=(1,))
        heads = (words[np.clip(starts, 0, max(last, 0))] >> 8).astype(np.int32) if last >= 0 else starts * 0
        heads[starts > last] = 0  # lines shorter than three bytes at the end of the block
        return heads

    def containing(self, *needles: bytes) -> np.ndarray:
        """Indexes of the lines that contain any of ``needles`` (two bytes or more, no newline),
        ascending. The first two bytes of every needle are found in one pass per byte parity: the
        block read as 16-bit words from an even and from an odd offset, each compared with every
        needle's pair (a pair is rarer than a byte, so few candidates remain; ``Xid`` and
        ``NVRM`` cost about what ``Xid`` alone cost byte by byte); the candidates' other bytes
        are then checked."""
        data, size = self.data, len(self.data)
        pairs = [int.from_bytes(needle[:2], "little") for needle in needles]
        found = []
        for start in (0, 1):
            words = data[start : start + (size - start) // 2 * 2].view("<u2")
            mask = words == pairs[0]
            for pair in pairs[1:]:
                mask |= words == pair
            found.append(_nonzero(mask) * 2 + start)
        starts = np.concatenate(found)
        keep = np.zeros(len(starts), bool)
        for needle in needles:
            hits = np.flatnonzero(starts <= size - len(needle))
            for k, byte in enumerate(needle):
                hits = hits[data[starts[hits] + k] == byte]
            keep[hits] = True
        return np.unique(np.searchsorted(self.ends, starts[keep]))

    def bad_utf8_lines(self) -> int:
        """Lines with undecodable bytes (U+FFFD in the text, as ``frame``'s ``bad_utf8``)."""
        return 0 if self.ascii_only else len(self.containing("\ufffd".encode()))

    def frame(self, rows: np.ndarray | None = None) -> pl.DataFrame:
        """``line`` (1-based), ``text``, ``bad_utf8``, ``truncated`` of the lines ``rows`` (indexes,
        ascending; all lines when None). All lines are one Arrow string array over the block's bytes
        (each with its newline, cut off after); a few rows are gathered into a buffer of their own,
        without their line ends."""
        if rows is None:
            offsets = np.concatenate([[0], self.ends + 1]).astype(np.int64)
            with_newline = pa.LargeStringArray.from_buffers(
                self.lines, pa.py_buffer(offsets), pa.py_buffer(self.data)
            )
            text = pl.Series("text", with_newline).str.head(-1)
            if self.lines and (self.data[self.ends - 1] == ord("\r")).any():  # CRLF: drop the \r too
                text = text.str.strip_suffix("\r")  # (ends - 1 = -1 is the last \n)
            return self._with_text(np.arange(self.lines), text)
        if 2 * len(rows) > self.lines:  # most lines: no copy of the bytes
            return self.frame().select(pl.all().gather(rows))
        index = np.asarray(rows, np.int64)
        starts, stops = self.starts(index), self.ends[index]
        stops = stops - ((stops > starts) & (self.data[np.maximum(stops - 1, 0)] == ord("\r")))  # CRLF
        offsets = np.concatenate([[0], np.cumsum(stops - starts)]).astype(np.int64)
        gathered = self.data[np.repeat(starts - offsets[:-1], stops - starts) + np.arange(offsets[-1])]
        text = pa.LargeStringArray.from_buffers(len(index), pa.py_buffer(offsets), pa.py_buffer(gathered))
        return self._with_text(index, pl.Series("text", text))

    def _with_text(self, index: np.ndarray, text: pl.Series) -> pl.DataFrame:
        return pl.DataFrame(
            {
                "line": pl.Series(index + self.first_line, dtype=pl.Int64),
                "text": text,
                "bad_utf8": (
                    np.zeros(len(index), bool)
                    if self.ascii_only
                    else text.str.contains("\ufffd", literal=True)
                ),
                "truncated": self.truncated & (index == self.lines - 1),
            }
        )


def _nonzero(mask: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(mask)`` of a contiguous bool array, faster when few are set: the 8-byte
    words with any set byte are found first, then the bytes within them."""
    whole = len(mask) // 8 * 8
    words = np.flatnonzero(mask[:whole].view(np.uint64) != 0)
    if 4 * len(words) > whole // 8:  # dense: one pass over the bytes is cheaper
        return np.flatnonzero(mask)
    candidates = (words[:, None] * 8 + np.arange(8)).ravel()
    return np.concatenate([candidates[mask[candidates]], np.flatnonzero(mask[whole:]) + whole])


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
    """Yield the file's lines in batches of Polars strings (:func:`read_blocks`, all lines)."""
    for block in read_blocks(path, block_bytes, max_bytes, span):
        yield LineBatch(block.frame(), block.bytes_done)


def read_blocks(
    path: Path,
    block_bytes: int | None = None,
    max_bytes: int = MAX_DECOMPRESSED_BYTES,
    span: tuple[int, int] | None = None,
) -> Iterator[Block]:
    """Yield the file's lines in blocks of bytes; a last line without a newline is still a line.

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
            # one buffer per block, the carried part of a line first: no copy of the block's bytes
            buffer, truncated = bytearray(len(carry) + block_bytes), False
            buffer[: len(carry)] = carry
            view, filled = memoryview(buffer), len(carry)
            try:
                while filled < len(buffer):
                    want = min(len(buffer) - filled, stop - pos)
                    got = stream.readinto1(view[filled : filled + want]) if want > 0 else 0
                    if not got:
                        break
                    filled += got
                    pos += got
                    expanded += got
                    if compressed and expanded > max_bytes:
                        raise too_big(path, max_bytes)
            except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
                if next_line == 1 and filled == 0:
                    raise InputError(
                        f"{path}: cannot read ({exc}); a damaged or truncated .gz? copy it again"
                    ) from exc
                truncated = True
            data = view[:filled]
            if truncated:  # the piece after the last newline (maybe empty) is the cut-off line
                yield Block.of(bytes(data) + b"\n", next_line, file_start, True, raw.tell())
                return
            if filled == len(carry):  # end of file or span: the last line, which may run past its end
                if carry:
                    while not carry.endswith(b"\n") and (piece := stream.read1(1 << 16)):
                        newline = piece.find(b"\n")
                        carry += piece if newline < 0 else piece[: newline + 1]
                    ended = carry if carry.endswith(b"\n") else carry + b"\n"
                    yield Block.of(ended, next_line, file_start, False, raw.tell())
                return
            cut = buffer.rfind(b"\n", 0, filled) + 1
            carry = bytes(data[cut:])
            if cut:
                lines = Block.of(data[:cut], next_line, file_start, False, raw.tell())
                file_start = False
                next_line += lines.lines
                yield lines


def not_utf8(path: Path, fmt: str, line: int, byte: int) -> InputError:
    """The error for text that is not UTF-8 at ``line`` (a spreadsheet's CSV in Windows-1252):
    the line, the byte, and how to convert the file."""
    plain = path.name.removesuffix(".gz")
    iconv = "iconv -f cp1252 -t utf-8"
    command = f"zcat '{path.name}' | {iconv}" if is_gzip(path) else f"{iconv} '{path.name}'"
    return InputError(
        f"{path}:{line}: cannot read as {fmt}: not UTF-8 (byte 0x{byte:02x}); save the export as UTF-8, "
        f"or convert it, e.g. {command} > 'utf8-{plain}'"
    )


def first_non_utf8(path: Path) -> tuple[int, int] | None:
    """The 1-based line and the first byte of the first text that is not UTF-8, or None."""
    with gzip.open(path, "rb") if is_gzip(path) else path.open("rb") as f:
        for number, line in enumerate(f, 1):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                return number, line[error.start]
    return None
