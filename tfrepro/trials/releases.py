"""TensorFlow releases: version order, `--tf-versions` parsing, the index listing.

`--tf-versions` takes a comma list whose items are versions (`2.15.1`) or
ranges (`2.14..2.17`). A range means every FINAL release between its ends,
inclusive, read from the package index (PEP 691 JSON, so PyPI or any mirror
that speaks it); a short end covers its series (`..2.17` includes 2.17.1).
Pre-releases and dev releases are never in a range (they are tried only when
named); of a release with post releases (2.15.0.post1) only the last post is
kept, since it replaces the release it fixes; yanked files and releases with
no wheel for this interpreter and platform are left out, with the reason.

The listing is cached (`<cache>/tfrepro/index/<dist>.json`, fresh for a day);
offline, a stale listing is used and said so; no listing at all is a
UserError that says how to go on (name the versions).
"""

from __future__ import annotations

import base64
import json
import os
import re
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from packaging.version import Version

from tfrepro.errors import UserError
from tfrepro.projectfiles import atomic_write
from tfrepro.trials.values import read_json

DEFAULT_INDEX = "https://pypi.org/simple"
LISTING_TTL_S = 24 * 3600
_VERSION = re.compile(
    r"^v?(?P<release>\d+(?:\.\d+)*)(?:[._-]?(?P<pre>a|b|rc)(?P<pre_n>\d+))?"
    r"(?:[._-]?post(?P<post>\d+))?(?:[._-]?dev(?P<dev>\d+))?$",
    re.IGNORECASE,
)

# fetch(url) -> the response body; raises OSError when the index cannot be reached.
Fetch = Callable[[str], bytes]


# -- an index URL's userinfo (`https://user:password@host/...`) is a credential: never
# printed, never stored (here, and in the installer output `envs.py` relays), sent
# the way pip sends it (HTTP Basic auth).

HIDDEN = "<redacted>"
# `scheme://userinfo@` in any text (a log line, an error message).
_USERINFO = re.compile(r"""(\b[a-z][a-z0-9+.-]*://)([^/\s@"'<>]+)@""", re.IGNORECASE)


def split_userinfo(url: str) -> tuple[str, str | None, str | None]:
    """(the URL without its userinfo, user, password); user and password
    percent-decoded, None where absent."""
    parts = urllib.parse.urlsplit(url)
    if "@" not in parts.netloc:
        return url, None, None
    info, _, host = parts.netloc.rpartition("@")
    user, sep, password = info.partition(":")
    public = urllib.parse.urlunsplit(parts._replace(netloc=host))
    return public, urllib.parse.unquote(user), urllib.parse.unquote(password) if sep else None


def hide_userinfo(text: str) -> str:
    """Every `scheme://userinfo@` in `text` with the userinfo hidden."""
    return _USERINFO.sub(lambda m: m.group(0) if m.group(2) == HIDDEN else f"{m.group(1)}{HIDDEN}@", text)


def version_key(version: str) -> Version:
    """A sort key in PEP 440 order for the versions TensorFlow publishes
    (2.16.0.dev1 < a < b < rc < final < post); a UserError for any other form."""
    if _VERSION.match(version.strip()) is None:
        raise UserError(f"not a version: {version!r}", hint="e.g. --tf-versions 2.15.1,2.16.2 or 2.14..2.17")
    return Version(version)


def sort_versions(versions: Sequence[str]) -> list[str]:
    return sorted(dict.fromkeys(versions), key=version_key)


def in_range(version: str, lo: str, hi: str) -> bool:
    """lo <= version <= hi, a short end standing for its whole series."""
    v = version_key(version).release
    lo_t, hi_t = version_key(lo).release, version_key(hi).release
    return v[: len(lo_t)] >= lo_t and v[: len(hi_t)] <= hi_t


def finals_between(available: Sequence[str], lo: str, hi: str) -> list[str]:
    """The final releases of `available` in lo..hi, oldest first, one per
    release (its last post release): never a pre-release or a dev release."""
    last: dict[tuple[int, ...], str] = {}
    for v in sort_versions([v for v in available if not version_key(v).is_prerelease and in_range(v, lo, hi)]):
        last[version_key(v).release] = v  # sorted: a post release comes after its release
    return sort_versions(list(last.values()))


@dataclass(frozen=True)
class Listing:
    """The index's answer for one distribution: installable versions here, and
    why others were left out. `stale` says the index could not be reached and
    an older cached answer is used."""

    dist: str
    versions: tuple[str, ...]
    excluded: tuple[tuple[str, str], ...] = ()  # (version, reason)
    stale: bool = False


def expand(spec: str, listing: Callable[[], Listing]) -> tuple[list[str], list[tuple[str, str]]]:
    """`--tf-versions` -> (versions oldest first, (version, reason) left out).

    `listing` is called only when a range needs the index. Explicit versions
    are taken as given (a pre-release included), and checked for the form only.
    """
    items = [x.strip() for x in spec.split(",") if x.strip()]
    if not items:
        raise UserError("--tf-versions is empty", hint="e.g. --tf-versions 2.15.1,2.16.2 or 2.14..2.17")
    out: list[str] = []
    excluded: list[tuple[str, str]] = []
    known: Listing | None = None
    for item in items:
        if ".." not in item:
            version_key(item)
            out.append(item)
            continue
        lo, _, hi = item.partition("..")
        if not lo or not hi:
            raise UserError(f"a range needs both ends: {item!r}", hint="e.g. 2.14..2.17")
        version_key(lo), version_key(hi)
        known = known or listing()
        found = finals_between(known.versions, lo, hi)
        if not found:
            raise UserError(
                f"no final {known.dist} release in {item}",
                hint=f"known releases: {', '.join(finals_between(known.versions, '0', '99'))}",
            )
        out.extend(found)
        excluded.extend((v, why) for v, why in known.excluded if in_range(v, lo, hi))
    versions = sort_versions(out)
    if len(versions) < 2:
        raise UserError("a version bisection needs two versions at least", hint="e.g. --tf-versions 2.15.1,2.16.2")
    return versions, excluded


# -- the index -------------------------------------------------------------------------


def _http_fetch(url: str) -> bytes:
    """GET `url`; its userinfo (a credentialed index) goes as HTTP Basic auth,
    as pip sends it (urllib itself refuses a URL with a userinfo)."""
    public, user, password = split_userinfo(url)
    headers = {"Accept": "application/vnd.pypi.simple.v1+json"}
    if user is not None:  # a token alone as the user, an empty password: as pip does
        headers["Authorization"] = "Basic " + base64.b64encode(f"{user}:{password or ''}".encode()).decode()
    req = urllib.request.Request(public, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as response:
            return response.read()
    except OSError as e:  # an error text may quote the URL: never its userinfo
        raise OSError(hide_userinfo(str(e))) from None


def wheel_versions(
    files: Sequence[dict], dist: str, python_tag: str | None = None, platform_word: str | None = None
) -> Listing:
    """Index files (PEP 691 `files`) -> the versions with a usable wheel here."""
    python_tag = python_tag or f"cp{sys.version_info[0]}{sys.version_info[1]}"
    platform_word = platform_word or {"darwin": "macosx", "win32": "win"}.get(sys.platform, "linux")
    prefix = re.sub(r"[-_.]+", "_", dist).lower() + "-"
    usable: set[str] = set()
    seen: dict[str, str] = {}
    for f in files:
        name = str(f.get("filename", ""))
        if not name.endswith(".whl") or not name.lower().startswith(prefix):
            continue
        parts = name[:-4].split("-")
        if len(parts) < 5:
            continue
        version, py, plat = parts[1], parts[-3], parts[-1]
        if _VERSION.match(version.strip()) is None:  # not a form TensorFlow publishes (`version_key`)
            continue
        if f.get("yanked"):
            seen.setdefault(version, "yanked")
            continue
        if python_tag in py.split(".") and platform_word in plat:
            usable.add(version)
        else:
            seen.setdefault(version, f"no {python_tag} wheel for {platform_word}")
    excluded = tuple((v, why) for v, why in sorted(seen.items(), key=lambda kv: version_key(kv[0])) if v not in usable)
    return Listing(dist, tuple(sort_versions(list(usable))), excluded)


def list_releases(dist: str, cache_dir: Path, *, fetch: Fetch | None = None, now: float | None = None) -> Listing:
    """The installable versions of `dist` (cached for `LISTING_TTL_S`)."""
    now = time.time() if now is None else now
    path = Path(cache_dir) / "index" / f"{dist}.json"
    cached = read_json(path)
    uv_or_pip = ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL")  # the index they would use
    index = next((os.environ[v].rstrip("/") for v in uv_or_pip if os.environ.get(v)), DEFAULT_INDEX)
    url = f"{index}/{dist}/"
    public, user, _ = split_userinfo(url)  # what is printed and stored: never the userinfo
    scheme, sep, rest = public.partition("://")
    shown = f"{scheme}://{HIDDEN}@{rest}" if user is not None and scheme and sep else public
    if cached and cached.get("url") == shown and now - float(cached.get("fetched", 0)) < LISTING_TTL_S:
        return wheel_versions(cached.get("files", []), dist)
    try:
        data = json.loads((fetch or _http_fetch)(url))
        files = [{"filename": f.get("filename"), "yanked": bool(f.get("yanked"))} for f in data.get("files", [])]
    except (OSError, ValueError, AttributeError) as e:
        if cached:
            return replace(wheel_versions(cached.get("files", []), dist), stale=True)
        raise UserError(
            f"cannot list the {dist} releases from {shown}: {hide_userinfo(str(e))}",
            hint="check the network (or the index URL), or name the versions: --tf-versions 2.15.1,2.16.2",
        ) from None
    record = {"url": shown, "fetched": now, "files": files}
    atomic_write(path, json.dumps(record).encode())
    return wheel_versions(files, dist)
