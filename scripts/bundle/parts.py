"""The wheels into one tar, written straight into parts of at most ``part_bytes`` each, and the
manifest beside them (install.py's docstring says what it holds).

The tar is not compressed: wheels are zip files already, and gzip would cost a minute of CPU for
a few percent. Parts are cut at exact byte counts, so ``cat`` joins them as well as install.py.

May import: install (its names for the files), nothing else outside the standard library.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from pathlib import Path

from bundle.install import MANIFEST, PART_PREFIX

MIB = 1 << 20


class PartWriter(io.RawIOBase):
    """A write-only stream that rolls over to a new part file every ``part_bytes`` bytes and
    hashes each part as it goes (the parts are written once, never read back)."""

    def __init__(self, folder: Path, part_bytes: int) -> None:
        if part_bytes < 1:
            raise ValueError(f"part_bytes {part_bytes}; allowed: 1 or more")
        self.folder, self.part_bytes = folder, part_bytes
        self.parts: list[dict] = []
        self._file = None
        self._digest = hashlib.sha256()
        self._written = 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data)
        while view:
            if self._file is None or self._written == self.part_bytes:
                self._next()
            take = min(len(view), self.part_bytes - self._written)
            self._file.write(view[:take])
            self._digest.update(view[:take])
            self._written += take
            view = view[take:]
        return len(data)

    def close(self) -> None:
        if self._file is not None:
            self._seal()
        super().close()

    def _next(self) -> None:
        if self._file is not None:
            self._seal()
        name = f"{PART_PREFIX}{len(self.parts) + 1:03d}"
        self._file = (self.folder / name).open("wb")
        self.parts.append({"file": name})
        self._digest, self._written = hashlib.sha256(), 0

    def _seal(self) -> None:
        self._file.close()
        self.parts[-1].update(bytes=self._written, sha256=self._digest.hexdigest())
        self._file = None


def write_parts(wheels: dict[str, Path], folder: Path, part_bytes: int) -> list[dict]:
    """``wheels/<file>`` for each wheel, in name order, into parts in ``folder``."""
    writer = PartWriter(folder, part_bytes)
    with tarfile.open(fileobj=writer, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(wheels):
            info = tar.gettarinfo(str(wheels[name]), arcname=f"wheels/{name}")
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mode = 0o644
            with wheels[name].open("rb") as f:
                tar.addfile(info, f)
    writer.close()
    return writer.parts


def clear_old_bundle(folder: Path, keep_names: set[str]) -> None:
    """Remove a previous bundle's files from ``folder``; refuse a folder holding anything
    else (an ``--out`` typo must not delete a user's files)."""
    if not folder.exists():
        folder.mkdir(parents=True)
        return
    ours = [p for p in folder.iterdir() if p.name in keep_names or p.name.startswith(PART_PREFIX)]
    others = sorted(p.name for p in folder.iterdir() if p not in ours)
    if others:
        raise FileExistsError(
            f"--out {folder} holds files that are not a bundle's ({', '.join(others[:5])}); "
            "allowed: a new folder or a previous bundle's"
        )
    for p in ours:
        if p.is_dir():
            shutil.rmtree(p)
        else:
            p.unlink()


def bundle_names() -> set[str]:
    """What a bundle folder holds besides its parts; ``wheels/`` is where the installer
    unpacked them (a bundle installed on the machine that built it)."""
    return {MANIFEST, "install-bundle.sh", "install_bundle.py", "wheels"}
