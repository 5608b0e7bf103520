"""Fetch one exact file of a PyPI release through the configured index, verified by sha256.

The index is never hard-coded: the pin's ``index_url`` wins, then ``MATERIALIZE_INDEX_URL``, then
pip's ``PIP_INDEX_URL``, then PyPI's simple API. The download goes to a temporary file and is moved
into the content-addressed artifact cache only after its sha256 matched, so a mismatch leaves
nothing behind that could be used later.

The index is read with httpx (the project's one HTTP client, shared with serve): PEP 691 JSON when
the index offers it, else PEP 503 HTML, parsed here in a few lines rather than through a second
client library. httpx and rich load only when something must be fetched.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import tempfile
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

from materialize.errors import UpstreamError
from materialize.upstream.net import httpx_timeout, with_retries

DEFAULT_INDEX = "https://pypi.org/simple/"
# The index and the wire are not trusted: a page or a file that never ends must not fill memory or
# the disk before its sha256 can be found wrong. A project page is a list of file names (PyPI's
# largest are a few MB); a file may be up to MATERIALIZE_MAX_DOWNLOAD bytes (default 4 GiB).
MAX_INDEX_PAGE = 64 << 20
MAX_DOWNLOAD_ENV = "MATERIALIZE_MAX_DOWNLOAD"
DEFAULT_MAX_DOWNLOAD = 4 << 30


def max_download() -> int:
    """The most bytes a download may have (``MATERIALIZE_MAX_DOWNLOAD``, default 4 GiB)."""
    raw = os.environ.get(MAX_DOWNLOAD_ENV) or str(DEFAULT_MAX_DOWNLOAD)
    if not raw.isdigit() or int(raw) == 0:
        raise UpstreamError(f"{MAX_DOWNLOAD_ENV}={raw!r}: expected a positive number of bytes")
    return int(raw)


def index_url(explicit: str | None = None) -> str:
    return explicit or os.environ.get("MATERIALIZE_INDEX_URL") or os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX


def _normalize(name: str) -> str:
    """PEP 503 project-name normalization."""
    return re.sub(r"[-_.]+", "-", name).lower()


_SDIST_SUFFIXES = (".tar.gz", ".tar.bz2", ".tar.xz", ".tgz", ".zip", ".tar")


def _name_version_kind(filename: str) -> tuple[str, str, str] | None:
    """(normalized project, version, "wheel" | "sdist") from a distribution file name, None otherwise."""
    if filename.endswith(".whl"):
        parts = filename[:-4].split("-")
        return (_normalize(parts[0]), parts[1], "wheel") if len(parts) >= 5 else None
    for suffix in _SDIST_SUFFIXES:
        if filename.endswith(suffix) and "-" in filename:
            name, version = filename[: -len(suffix)].rsplit("-", 1)
            return _normalize(name), version, "sdist"
    return None


class _Links(HTMLParser):
    """The ``<a href>`` links of a PEP 503 project page: (file name, absolute URL, sha256 or None)."""

    def __init__(self, base: str) -> None:
        super().__init__()
        self.base = base
        self.links: list[tuple[str, str, str | None]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        href = dict(attrs).get("href")
        if tag != "a" or not href:
            return
        url, _, fragment = urljoin(self.base, href).partition("#")
        algorithm, _, digest = fragment.partition("=")
        filename = urlsplit(url).path.rsplit("/", 1)[-1]
        self.links.append((filename, url, digest if algorithm == "sha256" and digest else None))


def _project_files(project: str, index: str) -> list[tuple[str, str, str | None]]:
    """Every file the index lists for ``project``: (file name, URL, published sha256 or None)."""
    import httpx

    url = index.rstrip("/") + "/" + _normalize(project) + "/"
    accept = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"

    def read_page() -> tuple[httpx.Response, bytes]:
        with httpx.stream("GET", url, headers={"Accept": accept}, follow_redirects=True,
                          timeout=httpx_timeout()) as resp:
            resp.raise_for_status()
            body = bytearray()
            for chunk in resp.iter_bytes():
                body += chunk
                if len(body) > MAX_INDEX_PAGE:
                    raise UpstreamError(f"cannot read {project} from index {url}: the page is larger than"
                                        f" {MAX_INDEX_PAGE} bytes; refused")
            return resp, bytes(body)

    resp, content = with_retries(url, f"cannot read {project} from index", read_page)
    if resp.headers.get("content-type", "").startswith("application/vnd.pypi.simple.v1+json"):
        try:
            files = json.loads(content)["files"]
            return [(f["filename"], urljoin(str(resp.url), f["url"]), f.get("hashes", {}).get("sha256"))
                    for f in files]
        except RecursionError:  # the index is not trusted: [[[... 100k deep was a traceback
            raise UpstreamError(f"cannot read {project} from index {index}: malformed JSON page (arrays or objects"
                                " nested too deeply to read)") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise UpstreamError(f"cannot read {project} from index {index}: malformed JSON page ({exc})") from None
    parser = _Links(str(resp.url))
    parser.feed(content.decode(resp.encoding or "utf-8", errors="replace"))
    return parser.links


def find_file(project: str, version: str, filename: str | None, *, index: str | None = None) -> tuple[str, str, str]:
    """(filename, url, sha256) of a release file on the index; ``filename`` None picks the sdist."""
    listed = _project_files(project, index_url(index))
    wanted = _normalize(project)
    kinds = {f: nvk[2] for f, _u, _s in listed if (nvk := _name_version_kind(f)) and nvk[:2] == (wanted, version)}
    of_version = [c for c in listed if c[0] in kinds]
    if filename:
        candidates = [c for c in listed if c[0] == filename]
    else:
        candidates = [c for c in of_version if kinds[c[0]] == "sdist"]
    if not candidates:
        have = sorted({f for f, _u, _s in of_version})
        raise UpstreamError(
            f"{project}=={version}: file {filename or '(sdist)'} not on index {index_url(index)}"
            + (f"; files of that version: {', '.join(have)}" if have else "; no such version")
        )
    name, url, sha = candidates[0]
    if not sha:
        raise UpstreamError(f"{name}: the index publishes no sha256 for it; pin it by hand")
    return name, url, sha


def _sweep_dead_downloads(folder: Path) -> None:
    """Remove the partial downloads of runs killed outright (``kill -9``, a lost session): up to
    ``MATERIALIZE_MAX_DOWNLOAD`` bytes each, which nothing else ever removed. A live run's is kept."""
    from materialize.atomic import alive

    for path in folder.glob(".download-*"):
        pid = path.name[len(".download-"):].partition("-")[0]
        if pid.isdigit() and int(pid) != os.getpid() and not alive(int(pid)):
            path.unlink(missing_ok=True)


def download(url: str, dest: Path, expected_sha256: str, *, progress: bool = True) -> Path:
    """Download ``url`` to ``dest`` atomically, refusing it unless its sha256 matches."""
    import httpx
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    cap = max_download()
    dest.parent.mkdir(parents=True, exist_ok=True)
    _sweep_dead_downloads(dest.parent)
    fd, tmp_name = tempfile.mkstemp(prefix=f".download-{os.getpid()}-", dir=dest.parent)
    os.close(fd)
    tmp = Path(tmp_name)

    def attempt() -> str:  # each attempt starts the file over, so a retry is always safe
        digest = hashlib.sha256()
        with tmp.open("wb") as out, httpx.stream("GET", url, follow_redirects=True, timeout=httpx_timeout()) as resp:
            resp.raise_for_status()
            total = int(resp.headers.get("content-length") or 0) or None
            too_big = UpstreamError(f"{dest.name}: {url} sends more than {cap} bytes; refused, nothing was kept"
                                    f" (raise {MAX_DOWNLOAD_ENV} if the file is genuinely that large)")
            if total is not None and total > cap:
                raise too_big
            written = 0
            columns = (TextColumn("{task.description}"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
            with Progress(*columns, disable=not progress, transient=True) as bar:
                task = bar.add_task(f"fetch {dest.name}", total=total)
                for chunk in resp.iter_bytes(chunk_size=1 << 20):
                    written += len(chunk)
                    if written > cap:
                        raise too_big
                    out.write(chunk)
                    digest.update(chunk)
                    bar.advance(task, len(chunk))
        return digest.hexdigest()

    try:
        actual = with_retries(url, "cannot download", attempt)
        if actual != expected_sha256:
            raise UpstreamError(
                f"{dest.name}: sha256 mismatch: pinned {expected_sha256}, downloaded {actual}; nothing was kept"
            )
        os.replace(tmp, dest)
        return dest
    finally:
        tmp.unlink(missing_ok=True)


def fetch(project: str, version: str, filename: str, sha256: str, cache: Path, *, index: str | None = None,
          progress: bool = True) -> Path:
    """Path of the verified artifact in ``cache``, downloading it on first use."""
    if "/" in filename or filename in (".", "..") or not re.fullmatch(r"[0-9a-f]{64}", sha256):
        raise UpstreamError(f"{filename!r}: not a file name of the index (or {sha256!r} not a sha256)")
    dest = cache / sha256 / filename
    if dest.exists():
        return dest
    _name, url, published = find_file(project, version, filename, index=index)
    if published != sha256:
        raise UpstreamError(
            f"{filename}: the index publishes sha256 {published}, the series pins {sha256}; refusing to download"
        )
    return download(url, dest, sha256, progress=progress)
