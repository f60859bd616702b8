"""Files only their owner may read (secrets, keys), written once: whichever process gets
there first writes the file, the others read the same one. Imports nothing of Django, so
the settings can use it."""

import os
import tempfile
from pathlib import Path


def write_once(path: Path, content: bytes) -> None:
    """Create `path` (mode 0600) holding `content`, unless it exists already."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")  # created 0600
    try:
        os.write(fd, content)
        os.close(fd)
        try:
            os.link(tmp, path)  # atomic and exclusive: a concurrent creator's content wins
        except FileExistsError:
            pass
    finally:
        os.unlink(tmp)
