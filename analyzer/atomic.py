"""Files written whole or not at all: a temp file beside the target, fsync'd, renamed over it, its folder fsync'd.

Every file the program writes goes through here: the outputs (analyzer/outputs.py, the spilling writer too) and the
store's own files (analyzer/scale/store_commit.py).  :func:`describe` says an OSError of a write in words.
"""
from __future__ import annotations

import errno
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_file_atomically(path: str | Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """``data`` at ``path``, whole or not at all (:func:`atomic_file`).  ``data`` may be a writer: a function that
    writes the bytes to the binary file it is given (a large output is then never held whole in memory)."""
    with atomic_file(path) as fh:
        if callable(data):
            data(fh)
        else:
            fh.write(data)


@contextmanager
def atomic_file(path: str | Path) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` when the block ends without an error: a temp file beside it, fsync'd,
    renamed over it, the folder fsync'd.  A crash, an error or a full disk leaves the previous file (or none), never
    a truncated one.  A path that is not a regular file (``/dev/stdout``, a FIFO) is written directly: it cannot be
    replaced."""
    path = Path(os.path.realpath(path))  # through a symlink: replace its target, keep the link
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and not path.is_file():
        with open(path, "wb") as fh:
            yield fh
        return
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_umask()  # what open() would keep or give
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)  # not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    fsync_dir(path.parent)


def describe(exc: OSError) -> str:
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{exc.strerror or 'no space left on device'} (free some space and run the command again)"
    if exc.errno == errno.EFBIG:
        return f"{exc.strerror or 'file too large'} (a file size limit: ulimit -f)"
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return f"{exc.strerror or 'permission denied'} (check the folder's permissions)"
    return exc.strerror or str(exc)
