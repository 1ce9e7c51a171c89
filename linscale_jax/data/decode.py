"""Input files' bytes: .gz and .zst decompressed whole or failing, and what any decoder raises as one
DataError naming the file, the place and the fix.

    with open_binary(path) as f: ...          # DataError if missing, or a compressed file of 0 bytes
    decoder_error(path, exc, "line 12")       # DataError for a decoding failure, None otherwise
    read_utf8(path)                           # the whole file as text, or DataError (offset, line, fix)
"""

from __future__ import annotations

import contextlib
import gzip
import io
import os
import zlib

from linscale_jax.data.errors import DataError


def utf8_error(path: str, raw: bytes, e: UnicodeDecodeError, line: int | None = None, offset: int = 0) -> DataError:
    line = raw[: e.start].count(b"\n") + 1 if line is None else line
    return DataError(
        f"{path}: not valid UTF-8 at byte offset {offset + e.start} (line {line}, bytes {raw[e.start:e.start + 4]!r}); "
        "convert the file to UTF-8 (e.g. `iconv -f latin1 -t utf-8 IN > OUT`) or remove it from data.paths."
    )


CUT_SHORT_FIX = ("the file is cut short (an interrupted download or copy?); copy it again, or remove it from the "
                 "inputs (data.paths / --input)")


class _Truncated(EOFError):
    """A compressed stream that ends before its end marker."""


class _ZstdStream(io.RawIOBase):
    """The decompressed bytes of a .zst file, frame after frame; raises _Truncated when the file ends
    inside a frame (zstandard's stream_reader returns a short read there) and zstandard.ZstdError on
    corrupt data."""

    def __init__(self, f):
        import zstandard

        self._f, self._new = f, zstandard.ZstdDecompressor().decompressobj
        self._frame = None  # the decompressor of the frame being read
        self._buf, self._pos, self._eof = b"", 0, False
        self.compressed = 0  # bytes of the file read so far

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while self._pos == len(self._buf) and not self._eof:
            self._fill()
        n = min(len(b), len(self._buf) - self._pos)
        b[:n] = self._buf[self._pos:self._pos + n]
        self._pos += n
        return n

    def _fill(self) -> None:
        chunk = self._f.read(1 << 20)
        if not chunk:
            self._eof = True
            if self._frame is None or not self._frame.eof:
                where = "before its first frame" if self._frame is None else "inside a frame"
                raise _Truncated(f"the zstd stream stops {where} at byte {self.compressed}, the end of the file")
            return
        self.compressed += len(chunk)
        out = []
        while chunk:
            if self._frame is None or self._frame.eof:
                self._frame = self._new()
            out.append(self._frame.decompress(chunk))
            chunk = self._frame.unused_data if self._frame.eof else b""
        self._buf, self._pos = b"".join(out), 0

    def close(self) -> None:
        self._f.close()
        super().close()


def open_binary(path: str):
    """A binary file object of `path`, decompressing .gz and .zst; raises DataError if missing or empty
    (a compressed file of 0 bytes is cut short). Reading it raises what the decoder raises; the
    document readers turn that into a DataError naming the place (`decoder_error`)."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise DataError(f"data file not found: {path}; fix data.paths / --input") from None
    if path.endswith((".gz", ".zst")) and os.fstat(f.fileno()).st_size == 0:
        f.close()
        raise DataError(f"{path} is empty (0 bytes), not a {path.rsplit('.', 1)[1]} stream; {CUT_SHORT_FIX}")
    if path.endswith(".gz"):
        f.close()
        return gzip.open(path, "rb")
    if path.endswith(".zst"):
        return io.BufferedReader(_ZstdStream(f), 1 << 20)
    return f


def decoder_error(path: str, e: BaseException, place: str) -> DataError | None:
    """The DataError for what a decoder raised while reading `path` at `place` (e.g. "line 12"),
    or None when `e` is not a decoding failure."""
    if isinstance(e, DataError):
        return e
    kind = "zstd" if path.endswith(".zst") else "gzip" if path.endswith(".gz") else "Parquet"
    if isinstance(e, EOFError):  # _Truncated, gzip's "Compressed file ended before the end-of-stream marker"
        return DataError(f"{path} ends early ({e}; text read up to {place}); {CUT_SHORT_FIX}")
    decoder = (OSError, ValueError, zlib.error)
    with contextlib.suppress(ImportError):
        import zstandard

        decoder += (zstandard.ZstdError,)
    if isinstance(e, decoder) and not isinstance(e, (FileNotFoundError, UnicodeError)):
        return DataError(f"{path}: corrupt {kind} data at {place} ({str(e)[:200]}); re-create the file or remove it "
                         "from the inputs (data.paths / --input)")
    return None


def read_utf8(path: str) -> str:
    chunks, size, lines = [], 0, 1
    with open_binary(path) as f:
        while True:
            try:
                chunk = f.read(1 << 20)
            except Exception as e:  # noqa: BLE001 - what the decoder raises: a truncated or corrupt stream
                err = decoder_error(path, e, f"line {lines}, byte offset {size}")
                if err is None:
                    raise
                raise err from None
            if not chunk:
                break
            chunks.append(chunk)
            size, lines = size + len(chunk), lines + chunk.count(b"\n")
    raw = b"".join(chunks)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise utf8_error(path, raw, e) from None
