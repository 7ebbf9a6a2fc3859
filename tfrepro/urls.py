"""A URL's userinfo (`https://user:password@host/...`) is a credential: never
printed, never stored, and sent the way pip sends it (HTTP Basic auth).

Pure helpers, no tfrepro imports: used where tfrepro prints or fetches an
index URL (`trials/releases.py`) and where it relays an installer's output
(`trials/envs.py`).
"""

from __future__ import annotations

import base64
import re
import urllib.parse

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


def public_url(url: str) -> str:
    """`url` as it may be printed: the userinfo replaced by a marker."""
    public, user, _ = split_userinfo(url)
    if user is None:
        return url
    scheme, rest = public.split("://", 1) if "://" in public else ("", public)
    return f"{scheme}://{HIDDEN}@{rest}" if scheme else public


def hide_userinfo(text: str) -> str:
    """Every `scheme://userinfo@` in `text` with the userinfo hidden."""
    return _USERINFO.sub(lambda m: m.group(0) if m.group(2) == HIDDEN else f"{m.group(1)}{HIDDEN}@", text)


def basic_auth(user: str | None, password: str | None) -> dict[str, str]:
    """The Authorization header pip sends for an index URL's userinfo
    (a token alone as the user, an empty password: as pip does)."""
    if user is None:
        return {}
    token = base64.b64encode(f"{user}:{password or ''}".encode()).decode()
    return {"Authorization": f"Basic {token}"}
