"""File helpers: strict UTF-8 line reading, atomic writes, output folders that appear whole."""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import os
import secrets
import shutil
from typing import Iterator, List

try:
    import fcntl
except ImportError:  # not on Windows: staging folders are then not marked as in use
    fcntl = None

from seqkit.core.errors import SeqkitError

# the temporary names of atomic writes and staging folders: a prefix, then 8 of these (tempfile's alphabet)
_NAME_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"
# a new file only (never an existing one or a link's target), in binary mode on Windows
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)


def _temp_name(folder: str, prefix: str) -> str:
    """A path in ``folder`` named like tempfile's temporary entries: ``prefix`` and 8 random characters."""
    return os.path.join(folder, prefix + "".join(secrets.choice(_NAME_CHARS) for _ in range(8)))


def read_lines(path: str) -> Iterator[str]:
    """Lines of a UTF-8 file without their newline; non-UTF-8 bytes are an error naming the line."""
    if not os.path.isfile(path):
        raise SeqkitError(f"file not found: {path}")
    lineno = 0
    try:
        # binary + per-line decode, so an error names the exact line and byte
        with (gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")) as f:
            for lineno, raw in enumerate(f, 1):
                yield raw.decode("utf-8").rstrip("\r\n")
    except UnicodeDecodeError as e:
        raise SeqkitError(f"{path}:{lineno}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
    except (OSError, EOFError) as e:
        raise SeqkitError(f"{path}: cannot read ({e})") from None


def read_all_lines(path: str) -> List[str]:
    return list(read_lines(path))


def fsync_dir(path: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write_bytes(path: str, data: bytes) -> None:
    """Write to a temporary file beside ``path``, fsync, then rename over it."""
    folder = os.path.dirname(os.path.abspath(path))
    tmp = ""
    try:  # the name is kept before the file exists, so a signal landing right after its making still removes it
        while True:
            tmp = _temp_name(folder, ".tmp-")
            try:  # mode 0o666 less the umask: an output's usual mode (tempfile's would be private, 0600)
                fd = os.open(tmp, _NEW_FILE, 0o666)
                break
            except FileExistsError:
                continue
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(folder)
    except BaseException:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        raise


def atomic_write_text(path: str, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


@contextlib.contextmanager
def staged_dir(dest: str, overwrite: bool = False) -> Iterator[str]:
    """Yield a temporary folder that becomes ``dest`` only if the block succeeds.

    On any error the temporary folder is removed and ``dest`` is left as it was, so a failed run
    never leaves a half-written output folder. While the block runs the folder holds a lock
    (:func:`staging_in_use`), so another run writing the same ``dest`` does not take it for a killed
    run's leftover; if that other run fills ``dest`` first, this one replaces it (``overwrite``) or
    stops with one line.
    """
    dest = os.path.abspath(dest)
    if os.path.exists(dest) and os.listdir(dest) and not overwrite:
        raise SeqkitError(f"output folder {dest} exists and is not empty (pass overwrite=true to replace it)")
    parent = os.path.dirname(dest)
    os.makedirs(parent, exist_ok=True)
    tmp, lock = "", -1
    try:  # a SIGTERM (SystemExit) landing anywhere below removes the folder: its name is kept before it is made
        while True:
            tmp = _temp_name(parent, f".{os.path.basename(dest)}.tmp-")
            try:
                os.mkdir(tmp, 0o777)  # less the umask: an output's usual mode (tempfile's would be private, 0700)
                break
            except FileExistsError:
                continue
        lock = os.open(tmp, os.O_RDONLY)
        if fcntl is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield tmp
        try:
            os.replace(tmp, dest)  # dest absent (or an empty folder): one rename
        except OSError:
            if not os.path.exists(dest):
                raise
            if not overwrite and os.path.isdir(dest) and os.listdir(dest):
                raise SeqkitError(f"output folder {dest} was filled by another run while this one worked (pass "
                                  "overwrite=true to replace it)") from None
            old = tmp + ".old"
            os.replace(dest, old)
            os.replace(tmp, dest)
            shutil.rmtree(old, ignore_errors=True)
        fsync_dir(parent)
    except BaseException:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if lock >= 0:
            os.close(lock)


def staging_in_use(path: str) -> bool:
    """Whether a running :func:`staged_dir` holds the folder ``path`` (a killed run's does not)."""
    if fcntl is None:
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing releases the lock taken here


def file_sha256(path: str) -> str:
    """The hex sha256 of a file's bytes."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()
