"""Keep secrets and the user's home directory out of everything a bundle holds.

A bundle is meant to be pasted into a public issue tracker, so every text that
goes into it passes through one `Scrubber` (pure: built from an environment
mapping and a home path, no I/O):

- values of environment variables whose *name* looks secret (KEY, TOKEN,
  SECRET, PASSWORD, ...) are replaced wherever they appear, whatever the
  variable is called, so a token echoed in a traceback is caught too;
- substrings shaped like well-known credentials (AWS access keys, Hugging Face
  and GitHub tokens, private-key blocks, `user:pass@` in URLs,
  `password=...` assignments, long mixed-case random strings) are replaced;
- the home directory becomes `~`.

Environment variables are recorded only from an allow-list (`capture_env`), and
even an allowed variable is redacted when its name or value looks secret.
"""

from __future__ import annotations

import base64
import json
import os
import re
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass

REDACTED = "<redacted>"

# Names that say "this is a credential". Matched as a word part, so
# `HF_TOKEN`, `MY_PASSWORD` and `AWS_SECRET_ACCESS_KEY` all hit.
_SECRET_NAME = re.compile(
    r"(KEY|TOKEN|SECRET|PASSWORD|PASSWD|PASSPHRASE|CREDENTIAL|AUTH|PRIVATE|SESSION|COOKIE|SIGNATURE|PWD$)",
    re.IGNORECASE,
)
# Names that match the pattern but hold no credential (`PWD` is the working
# directory; desktop-session variables hold words like "user" or "ubuntu" that
# would otherwise be hunted through every text of the bundle).
_NOT_SECRET_NAME = re.compile(
    r"^(PWD|OLDPWD|XDG_\w+|DESKTOP_SESSION|SESSION_MANAGER|DBUS_SESSION_BUS_ADDRESS|SSH_AUTH_SOCK|"
    r"XAUTHORITY|GPG_AGENT_INFO|KEYBOARD\w*|XKB_\w+|\w*_KEYMAP|\w*KEY_?(LAYOUT|MAP|BINDINGS?))$",
    re.IGNORECASE,
)

# Private keys (PEM, OpenSSH, PGP armor): the whole block, or, when the END
# line is missing (a truncated paste), the BEGIN line and every line after it
# that is key material. Never a quote: the block is redacted inside its string
# literal, and the code around it stays valid Python.
_KEY_BEGIN = r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"
_PRIVATE_KEY_BLOCK = re.compile(
    _KEY_BEGIN + r"""(?:(?!-----BEGIN)[^"'`])*?-----END [A-Z0-9 ]*PRIVATE KEY[A-Z ]*-----"""
)
_PRIVATE_KEY_HEAD = re.compile(
    _KEY_BEGIN
    + r"(?:\\[rn]|[A-Za-z0-9+/=])*"  # the rest of its line (a one-line string with \n escapes)
    + r"(?:\r?\n[ \t]*(?:Version|Comment|Hash|Charset|Proc-Type|DEK-Info): [^\r\n]*)*"  # armor headers
    + r"(?:\r?\n[ \t]*(?=\r?\n))?"  # the blank line after them
    + r"(?:\r?\n[ \t]*(?:[A-Za-z0-9+/]{16,}={0,2}|[A-Za-z0-9+/]{0,15}={1,2}|=[A-Za-z0-9+/]{4})[ \t]*(?=\r?\n|\Z))*"
)
# Shapes of credentials, wherever they appear in a text.
_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    _PRIVATE_KEY_BLOCK,
    _PRIVATE_KEY_HEAD,
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),  # AWS access key ids
    # AWS secret access keys: 40 base64 characters, slashes included.
    re.compile(
        r"(?<![A-Za-z0-9/+=])(?!/)(?![A-Za-z0-9/+]*//)(?=(?:[A-Za-z0-9+]*/){0,3}[A-Za-z0-9+]*(?![A-Za-z0-9/+=]))"
        r"(?=[A-Za-z0-9/+]*[A-Z])(?=[A-Za-z0-9/+]*[a-z])(?=[A-Za-z0-9/+]*[0-9])"
        r"[A-Za-z0-9/+]{39}[A-Za-z0-9+](?![A-Za-z0-9/+=])"
    ),
    re.compile(r"\bhf_(?=[A-Za-z0-9]*[A-Z])[A-Za-z0-9]{8,}\b"),  # Hugging Face, however short
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b|\bgithub_pat_[A-Za-z0-9_]{20,}\b"),
    re.compile(r"\bgl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_-]{20,}|\bGR1348941[A-Za-z0-9_-]{20,}"),
    re.compile(r"\b[rsp]k_(?:live|test)_[0-9A-Za-z]{10,}\b"),  # Stripe
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),  # OpenAI-style keys
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),  # Slack
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),  # Google API keys
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"),  # JWT
)
# `Bearer <token>` (any case): keep the scheme, lose the token. Prose ("bearer
# authentication") has no digit and is short.
_BEARER = re.compile(r"\b([Bb]earer\s+)([A-Za-z0-9._~+/-]{8,}=*)")
# `scheme://user:password@host` keeps the user, loses the password (which may
# hold `/`; `host:8080/path@x` is a port, not a password).
_URL_CREDENTIALS = re.compile(
    r"""(\b[a-z][a-z0-9+.-]*://[^/\s:@"'<>]+:)((?!\d+(?:/|$))[^\s@"'<>]+)(@)""", re.IGNORECASE
)
# `https://TOKEN@host`: a user part that is a token, not a name like `git`.
_URL_TOKEN = re.compile(r"""(\b[a-z][a-z0-9+.-]*://)([^/\s:@"'<>]+)(@)""", re.IGNORECASE)
# `password=...`, `api_key: ...`, `"token": "..."`, `password: str = "..."`,
# `os.environ["WANDB_API_KEY"] = "..."`: keep the name, lose the value. The
# same inside a JSON string (`\"token\": \"...\"`: result.json quotes code).
_NAME = (
    r"[\w.-]*(?:password|passwd|passphrase|secret|token|api[_-]?key|access[_-]?key|private[_-]?key"
    r"|credential|_pass|_pwd)s?"
)
_CLOSE_NAME = r"""(?:\\?["'])?\]?"""  # the end of a quoted name or a subscript: `"]`
_SEP = r"""[ \t]*(?::[ \t]*[A-Za-z_][\w.\[\], |]*?[ \t]*=|[:=])[ \t]*"""  # =, :, or `: type =`
# A quoted value up to its closing quote: `"`, `'`, or JSON's `\"`. Groups:
# `q` the quote, `v` the value.
_QUOTED = r"""(?P<q>\\?["'])(?P<v>(?:\\.|(?!(?P=q))[^\\\r\n]){MIN,}?)(?=(?P=q))"""
_ASSIGNMENT = re.compile(  # unquoted values
    r"(\b" + _NAME + _CLOSE_NAME + _SEP + r"""["']?)([^\s"',;()\[\]{}\\]{4,})(?=[\s"',;\\]|$)""",
    re.IGNORECASE,
)
_ASSIGNMENT_QUOTED = re.compile(  # quoted values, spaces included (passphrases)
    r"\b" + _NAME + _CLOSE_NAME + _SEP + _QUOTED.replace("MIN", "1"), re.IGNORECASE
)
# Short or ambiguous names (`pw="..."`, `'pass': '...'`, `key="..."`) count
# only in lower case with a quoted value; for `key`, only a value shaped like
# a key (`PASS = "pass"` is a constant, `key="name"` a sort key).
_SHORT_ASSIGNMENT = re.compile(
    r"""(?<![\w.])(?P<nq>\\?["']?)(?P<name>pw|pwd|pass|passwd|key|apikey)(?P=nq)[ \t]*[:=][ \t]*"""
    + _QUOTED.replace("MIN", "4")
)
# `os.environ.setdefault("HF_TOKEN", "...")`, `os.putenv("MY_PASSWORD", "...")`.
_NAME_VALUE_PAIR = re.compile(
    r"""(?P<nq>\\?["'])""" + _NAME + r"(?P=nq)[ \t]*,[ \t]*" + _QUOTED.replace("MIN", "4"), re.IGNORECASE
)
# `auth=("alice", "pw")`, `AUTH = ("alice", "pw")`, `HTTPBasicAuth("alice", "pw")`:
# a (user, password) pair after a name ending in `auth` (never `author`).
_AUTH_PAIR = re.compile(
    r"""(?i)\b(?:\w*auth|auth_\w*)\b[ \t]*(?:[:=][ \t]*)?[(\[][ \t]*(?P<uq>\\?["'])[^"'\\\r\n]*(?P=uq)[ \t]*,[ \t]*"""
    + _QUOTED.replace("MIN", "1")
)
# `Authorization: Basic <b64>`, `"Authorization": "Token abc"`: the credentials after the scheme.
_AUTH_HEADER = re.compile(
    r"""(?i)(\b(?:proxy-)?authorization\\?["']?[ \t]*[:=][ \t]*\\?["']?[ \t]*"""
    r"""(?:(?:basic|bearer|token|digest|negotiate|ntlm|apikey|key)[ \t]+)?)([^\s"'\\,;]{4,})"""
)
# `Basic <base64 of user:password>` anywhere (a logged header, a curl line).
_BASIC = re.compile(r"\b([Bb]asic[ \t]+)([A-Za-z0-9+/]{8,}={0,2})(?![A-Za-z0-9+/=])")
# Webhook URLs carry their token in the path.
_WEBHOOKS = (
    re.compile(r"(?i)(\bhttps?://(?:[\w-]+\.)?discord(?:app)?\.com/api/webhooks/\d+/)([A-Za-z0-9_-]+)"),
    re.compile(r"(?i)(\bhttps?://hooks\.slack\.com/(?:services|workflows|triggers)/)([A-Za-z0-9_/-]+)"),
    re.compile(r"""(?i)(\bhttps?://[^\s"'<>?#\\]*/(?:webhooks?|hooks)/(?:[^\s"'<>/?#\\]+/)*)([A-Za-z0-9_-]{20,})"""),
)
# Signed URLs (GCS, S3, Azure SAS) and tokens in a query string: the value of the parameter.
_SECRET_QUERY = re.compile(
    r"""(?i)([?&](?:x-goog-signature|x-goog-credential|x-amz-signature|x-amz-credential|x-amz-security-token"""
    r"""|signature|sig|googleaccessid|access_token|id_token|refresh_token|token|api_key|apikey|key"""
    r"""|client_secret|password|secret|auth)=)([^&\s"'#<>\\]+)"""
)
# A credential-looking option's default: `add_argument("--wandb-key", default="...")`,
# `click.option("--token", default="...")`, absl's `DEFINE_string("api_key", "...", ...)`.
_OPTION_WORDS = r"[\w-]*(?:key|token|secret|passw\w*|pwd|pw|auth|credential)[\w-]*"
_OPTION_DEFAULT = re.compile(
    r"""(?i)\b(?:add_argument|option)\([ \t]*(?P<oq>["'])-{0,2}(?P<opt>"""
    + _OPTION_WORDS
    + r""")(?P=oq)[^)]{0,400}?\bdefault[ \t]*=[ \t]*"""
    + _QUOTED.replace("MIN", "4")
)
_ABSL_DEFAULT = re.compile(
    r"""(?i)\bDEFINE_\w+\([ \t]*(?P<oq>["'])(?P<opt>"""
    + _OPTION_WORDS
    + r""")(?P=oq)[ \t]*,[ \t]*"""
    + _QUOTED.replace("MIN", "4")
)
# A secret named in a comment: `# the db pw is ...`, `# password: ...`, `# token = ...`.
_COMMENT_SECRET = re.compile(
    r"""(?im)(#[^\r\n]*?\b(?:pw|pwd|pass|passwd|password|passphrase|secret|token|api[ _-]?key|access[ _-]?key"""
    r"""|credentials?)\b[ \t]*(?:is|was|=|:|->)[ \t]*["'`]?)([^\s"'`\\]{4,})"""
)
# Variables whose value bears secrets whatever it looks like: TF_CONFIG (a
# cluster spec: internal addresses, sometimes tokens) and package index URLs
# (credentials in their userinfo).
_SECRET_BEARING = re.compile(r"^(TF_CONFIG|(PIP|UV)_\w*INDEX\w*|\w*_INDEX_URL|\w*_FIND_LINKS)$", re.IGNORECASE)
# A long run of base64/url-safe characters with upper case, lower case and
# digits looks random: a key. Hex digests (no upper case) and words pass.
_RANDOM_LOOKING = re.compile(r"(?<![A-Za-z0-9/+_=-])[A-Za-z0-9/+_=-]{32,}(?![A-Za-z0-9/+_=-])")
# Hex keys (W&B: 40, Kaggle: 32). 64 hex digits are a sha256 digest (trial
# cache keys), never redacted by shape alone.
_HEX_KEY = re.compile(r"^(?=.*[0-9])(?=.*[a-f])[0-9a-f]{32,63}$", re.IGNORECASE)
# Values that are not credentials whatever their name says.
_NOT_A_VALUE = re.compile(r"^(\d{1,7}|\d*\.\d+(e-?\d+)?|None|True|False|null|true|false|<redacted>)$")

# Environment variables worth recording in a TensorFlow bug report (beside the prefixes below).
ENV_ALLOW_EXACT = frozenset(
    {
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_TF32_OVERRIDE",
        "NVIDIA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "KMP_BLOCKTIME",
        "KMP_AFFINITY",
        "PYTHONHASHSEED",
    }
)
ENV_ALLOW_PREFIXES = ("TF_", "XLA_", "KERAS_", "TFREPRO_")
# Terraform shares the TF_ prefix; its variables say nothing about TensorFlow
# (and TF_VAR_*/TF_TOKEN_* often hold credentials).
ENV_DENY_PREFIXES = (
    "TF_VAR_",
    "TF_CLI_",
    "TF_LOG",
    "TF_INPUT",
    "TF_IN_AUTOMATION",
    "TF_DATA_DIR",
    "TF_WORKSPACE",
    "TF_PLUGIN_",
    "TF_REGISTRY_",
    "TF_TOKEN_",
    "TF_STATE_",
    "TF_IGNORE",
    "TF_APPEND_USER_AGENT",
    "TF_WARN_OUTPUT_ERRORS",
)

# Values shorter than this, or plain words/numbers, are not hunted through
# texts: replacing "1", "yes" or "basic" everywhere would shred the bundle and
# protect nothing.
_MIN_SECRET_LEN = 6
_PLAIN = re.compile(r"^([a-z]{1,8}|[0-9.]+|true|false|none|null)$", re.IGNORECASE)


def is_secret(name: str, value: str) -> bool:
    """A variable whose name looks secret, or whose value is shaped like a credential whatever its name."""
    named = _SECRET_BEARING.match(name) or not _NOT_SECRET_NAME.match(name) and _SECRET_NAME.search(name)
    return (
        bool(named)
        or any(p.search(value) for p in (*_SECRET_PATTERNS, _URL_CREDENTIALS, _ASSIGNMENT))
        or any(_is_random_looking(m.group(0)) for m in _RANDOM_LOOKING.finditer(value))
    )


def _secret_parts(name: str, value: str) -> set[str]:
    """The secrets inside a secret-bearing variable's value, hunted on their
    own too: TF_CONFIG's strings (addresses, tokens), a URL's userinfo."""
    out: set[str] = set()
    if not _SECRET_BEARING.match(name):
        return out
    if name.upper() == "TF_CONFIG":
        with suppress(ValueError):
            out.update(s for _, s in json_strings(json.loads(value)))
    for word in value.split():  # a URL's user and password, as written and unquoted
        with suppress(ValueError):
            parts = urllib.parse.urlsplit(word)
            found = {x for x in (parts.username, parts.password) if x}
            out |= found | {urllib.parse.unquote(x) for x in found}
    return out


def json_strings(obj: object, key: str = "") -> Iterator[tuple[str, str]]:
    """(key, string) of every string in a JSON value (a list's items under the list's key)."""
    if isinstance(obj, str):
        yield key, obj
    elif isinstance(obj, Mapping):
        for k, v in obj.items():
            yield from json_strings(v, str(k))
    elif isinstance(obj, list):
        for v in obj:
            yield from json_strings(v, key)


def _is_random_looking(s: str) -> bool:
    if "/" in s.strip("/") and s.count("/") >= 2:  # a path, not a key
        return False
    if len(re.split(r"[_-]", s)) >= 3:  # snake_case identifiers, flags
        return False
    return bool(re.search(r"[A-Z]", s) and re.search(r"[a-z]", s) and re.search(r"[0-9]", s))


def _redact_group(
    group: int | str, when: Callable[[re.Match[str]], bool] | None = None
) -> Callable[[re.Match[str]], str]:
    """A `re.sub` replacement that redacts one group of the match, keeping
    the text around it (the name, the quotes), when `when` says the match
    holds a credential."""

    def replace(m: re.Match[str]) -> str:
        if m.group(group) == REDACTED or (when is not None and not when(m)):
            return m.group(0)
        start, end = m.start(group) - m.start(0), m.end(group) - m.start(0)
        return m.group(0)[:start] + REDACTED + m.group(0)[end:]

    return replace


def _is_token_like(s: str) -> bool:
    """A bearer token or a URL's user part that is a token: long, or with
    letters and digits mixed (`git`, `alice` and prose words are not)."""
    has_digit, has_alpha = any(c.isdigit() for c in s), any(c.isalpha() for c in s)
    return len(s) >= 24 or (len(s) >= 8 and has_digit and has_alpha)


def _is_key_shaped(value: str) -> bool:
    """The hex of a W&B or Kaggle key, or a random-looking or long token-like value."""
    if re.fullmatch(r"[0-9a-fA-F]+", value):  # a hex key, but not a sha256 digest (trial-cache keys)
        return bool(_HEX_KEY.match(value))
    return _is_random_looking(value) or (len(value) >= 20 and " " not in value and _is_token_like(value))


@dataclass(frozen=True)
class Scrubber:
    """Replaces secrets and the home directory in texts. Build it with
    `Scrubber.from_environ(environ)`; `scrub` is idempotent."""

    secrets: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> Scrubber:
        found = {s for k, v in environ.items() if v and is_secret(k, v) for s in (v, *_secret_parts(k, v))}
        secrets = {s for s in found if len(s) >= _MIN_SECRET_LEN and not _PLAIN.match(s)}
        home = environ.get("HOME") or os.path.expanduser("~")
        homes = {home.rstrip("/"), os.path.realpath(home).rstrip("/")} - {""} if home and home.rstrip("/") else set()
        # Longest first, so a secret containing another is replaced whole.
        return cls(tuple(sorted(secrets, key=len, reverse=True)), tuple(sorted(homes, key=len, reverse=True)))

    def scrub(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        for p in _SECRET_PATTERNS:
            text = p.sub(REDACTED, text)
        text = _BEARER.sub(_redact_group(2, lambda m: _is_token_like(m.group(2))), text)
        text = _URL_CREDENTIALS.sub(_redact_group(2), text)
        text = _URL_TOKEN.sub(_redact_group(2, lambda m: len(m.group(2)) >= 12 and _is_token_like(m.group(2))), text)
        text = _ASSIGNMENT_QUOTED.sub(_redact_group("v"), text)
        text = _SHORT_ASSIGNMENT.sub(
            _redact_group("v", lambda m: m.group("name") not in ("key", "apikey") or _is_key_shaped(m.group("v"))), text
        )
        text = _NAME_VALUE_PAIR.sub(_redact_group("v"), text)
        # an unquoted value after a secret name: not a number, a constant or a short word of prose (`token: long`)
        text = _ASSIGNMENT.sub(
            _redact_group(2, lambda m: not (_NOT_A_VALUE.match(m[2]) or m[2].isalpha() and len(m[2]) < 6)), text
        )
        # auth pairs, Authorization headers, webhook and signed URLs, credential-looking option defaults,
        # secrets named in comments
        text = _AUTH_PAIR.sub(_redact_group("v"), text)
        text = _AUTH_HEADER.sub(_redact_group(2, lambda m: not _NOT_A_VALUE.match(m.group(2))), text)
        text = _BASIC.sub(_redact_group(2, lambda m: _is_basic_credential(m.group(2))), text)
        for p in _WEBHOOKS:
            text = p.sub(_redact_group(2), text)
        text = _SECRET_QUERY.sub(_redact_group(2, lambda m: not _NOT_A_VALUE.match(m.group(2))), text)
        for p in (_OPTION_DEFAULT, _ABSL_DEFAULT):
            text = p.sub(_redact_group("v", _is_option_secret), text)
        text = _COMMENT_SECRET.sub(_redact_group(2, _is_comment_secret), text)
        text = _RANDOM_LOOKING.sub(lambda m: REDACTED if _is_random_looking(m.group(0)) else m.group(0), text)
        for h in self.homes:
            # Only as a path prefix: "/home/al" must not eat "/home/alice".
            text = re.sub(re.escape(h) + r"(?=/|\\|\s|$|[\"'`),:;\]])", "~", text)
        return text

    def scrub_obj(self, obj: object) -> object:
        """Scrub every string inside a JSON-like structure (keys too)."""
        if isinstance(obj, str):
            return self.scrub(obj)
        if isinstance(obj, Mapping):
            return {self.scrub(str(k)): self.scrub_obj(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [self.scrub_obj(v) for v in obj]
        return obj


def _is_basic_credential(value: str) -> bool:
    """`Basic <x>` where x is the base64 of `user:password` (not prose)."""
    try:
        return b":" in base64.b64decode(value + "=" * (-len(value) % 4), validate=True)
    except ValueError:
        return False


def _is_option_secret(m: re.Match[str]) -> bool:
    """A token/secret/password option: any default that is not a constant; a
    `key` option (`--sort-key`): only a default shaped like a key."""
    value, opt = m.group("v"), m.group("opt").lower()
    if _NOT_A_VALUE.match(value) or value.startswith(("$", "{")):
        return False
    return bool(re.search(r"token|secret|pass|pwd|pw|auth|credential|api", opt)) or _is_key_shaped(value)


def _is_comment_secret(m: re.Match[str]) -> bool:
    """The word after `pw is` in a comment, unless it is prose: a lower-case
    word followed by more words (`# the token is refreshed hourly`)."""
    value = m.group(2)
    if _NOT_A_VALUE.match(value):
        return False
    if re.fullmatch(r"[a-z]+[.,;:!?]?", value):
        rest = m.string[m.end() :].split("\n", 1)[0]
        return not re.match(r"[ \t]+[A-Za-z]", rest)
    return True


def is_allowed_env(name: str) -> bool:
    return not name.startswith(ENV_DENY_PREFIXES) and (name in ENV_ALLOW_EXACT or name.startswith(ENV_ALLOW_PREFIXES))


def capture_env(environ: Mapping[str, str], scrubber: Scrubber, names: Iterable[str] | None = None) -> dict[str, str]:
    """The allow-listed variables (or those `names`), sorted; secret-looking ones redacted."""
    names = [n for n in environ if is_allowed_env(n)] if names is None else names
    return {n: REDACTED if is_secret(n, environ[n]) else scrubber.scrub(environ[n]) for n in sorted(names)}


def withheld_count(environ: Mapping[str, str]) -> int:
    """How many environment variables look secret (recorded in no bundle: only
    how many, since a name, `ACME_PROD_DB_PASSWORD`, tells an attacker what to look for)."""
    return sum(1 for n, v in environ.items() if v and is_secret(n, v))
