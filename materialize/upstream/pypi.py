"""Fetch one exact file of a PyPI release through the configured index, verified by sha256.

The index is never hard-coded: the pin's ``index_url`` wins, then ``MATERIALIZE_INDEX_URL``, then
pip's ``PIP_INDEX_URL``, then PyPI's simple API. The download goes to a temporary file and is moved
into the content-addressed artifact cache only after its sha256 matched, so a mismatch leaves
nothing behind that could be used later.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import requests
from pypi_simple import PyPISimple
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

from materialize.errors import UpstreamError

DEFAULT_INDEX = "https://pypi.org/simple/"


def index_url(explicit: str | None = None) -> str:
    return explicit or os.environ.get("MATERIALIZE_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX


def find_file(project: str, version: str, filename: str | None, *, index: str | None = None) -> tuple[str, str, str]:
    """(filename, url, sha256) of a release file on the index; ``filename`` None picks the sdist."""
    try:
        with PyPISimple(endpoint=index_url(index)) as client:
            page = client.get_project_page(project)
    except Exception as exc:  # the library raises several transport and HTTP error types
        raise UpstreamError(f"cannot read {project} from index {index_url(index)}: {exc}") from None
    candidates = [p for p in page.packages if p.version == version]
    if filename:
        candidates = [p for p in candidates if p.filename == filename]
    else:
        candidates = [p for p in candidates if p.package_type == "sdist"]
    if not candidates:
        have = sorted({p.filename for p in page.packages if p.version == version})
        raise UpstreamError(
            f"{project}=={version}: file {filename or '(sdist)'} not on index {index_url(index)}"
            + (f"; files of that version: {', '.join(have)}" if have else "; no such version")
        )
    pkg = candidates[0]
    sha = pkg.digests.get("sha256")
    if not sha:
        raise UpstreamError(f"{pkg.filename}: the index publishes no sha256 for it; pin it by hand")
    return pkg.filename, pkg.url, sha


def download(url: str, dest: Path, expected_sha256: str, *, progress: bool = True) -> Path:
    """Download ``url`` to ``dest`` atomically, refusing it unless its sha256 matches."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha256()
    fd, tmp_name = tempfile.mkstemp(prefix=".download-", dir=dest.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out, requests.get(url, stream=True, timeout=60) as resp:
            resp.raise_for_status()
            total = int(resp.headers.get("content-length") or 0) or None
            columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
            with Progress(*columns, disable=not progress, transient=True) as bar:
                task = bar.add_task(f"fetch {dest.name}", total=total)
                for chunk in resp.iter_content(chunk_size=1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.advance(task, len(chunk))
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise UpstreamError(
                f"{dest.name}: sha256 mismatch: pinned {expected_sha256}, downloaded {actual}; nothing was kept"
            )
        os.replace(tmp, dest)
        return dest
    except requests.RequestException as exc:
        raise UpstreamError(f"cannot download {url}: {exc}") from None
    finally:
        tmp.unlink(missing_ok=True)


def fetch(project: str, version: str, filename: str, sha256: str, cache: Path, *, index: str | None = None,
          progress: bool = True) -> Path:
    """Path of the verified artifact in ``cache``, downloading it on first use."""
    dest = cache / sha256 / filename
    if dest.exists():
        return dest
    _name, url, published = find_file(project, version, filename, index=index)
    if published != sha256:
        raise UpstreamError(
            f"{filename}: the index publishes sha256 {published}, the series pins {sha256}; refusing to download"
        )
    return download(url, dest, sha256, progress=progress)
