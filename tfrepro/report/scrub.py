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

import os
import re
from collections.abc import Iterable, Mapping
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

# Shapes of credentials, wherever they appear in a text.
_SECRET_PATTERNS: tuple[re.Pattern[str], ...] = (
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
    re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b"),  # AWS access key ids
    re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"),  # Hugging Face
    re.compile(r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{20,}\b|\bgithub_pat_[A-Za-z0-9_]{20,}\b"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{20,}\b"),  # OpenAI-style keys
    re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b"),  # Slack
    re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b"),  # Google API keys
    re.compile(r"\beyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\b"),  # JWT
)
# `scheme://user:password@host` keeps the user, loses the password.
_URL_CREDENTIALS = re.compile(r"(\b[a-z][a-z0-9+.-]*://[^/\s:@]+:)([^/\s@]+)(@)", re.IGNORECASE)
# `password=...`, `api_key: ...`, `"token": "..."`: keep the name, lose the value.
_ASSIGNMENT = re.compile(
    r"""(\b[\w.-]*(?:password|passwd|secret|token|api[_-]?key|access[_-]?key|credential)s?["']?\s*[:=]\s*["']?)"""
    r"""([^\s"',;()\[\]{}]{4,})(?=[\s"',;]|$)""",
    re.IGNORECASE,
)
# A long run of base64/url-safe characters with upper case, lower case and
# digits looks random: a key. Hex digests (no upper case) and words pass.
_RANDOM_LOOKING = re.compile(r"(?<![A-Za-z0-9/+_=-])[A-Za-z0-9/+_=-]{32,}(?![A-Za-z0-9/+_=-])")

# Environment variables worth recording in a TensorFlow bug report.
ENV_ALLOW_EXACT = frozenset(
    {
        "XLA_FLAGS",
        "CUDA_VISIBLE_DEVICES",
        "CUDA_DEVICE_ORDER",
        "NVIDIA_TF32_OVERRIDE",
        "NVIDIA_VISIBLE_DEVICES",
        "OMP_NUM_THREADS",
        "KMP_BLOCKTIME",
        "KMP_AFFINITY",
        "PYTHONHASHSEED",
        "TF_USE_LEGACY_KERAS",
        "KERAS_BACKEND",
    }
)
ENV_ALLOW_PREFIXES = ("TF_", "XLA_", "KERAS_", "TFREPRO_")
# Terraform shares the TF_ prefix; its variables say nothing about TensorFlow
# (and TF_VAR_*/TF_TOKEN_* often hold credentials).
ENV_DENY_PREFIXES = ("TF_VAR_", "TF_CLI_", "TF_LOG", "TF_INPUT", "TF_IN_AUTOMATION", "TF_DATA_DIR",
                     "TF_WORKSPACE", "TF_PLUGIN_", "TF_REGISTRY_", "TF_TOKEN_", "TF_STATE_",
                     "TF_IGNORE", "TF_APPEND_USER_AGENT", "TF_WARN_OUTPUT_ERRORS")

# Values shorter than this, or plain words/numbers, are not hunted through
# texts: replacing "1", "yes" or "basic" everywhere would shred the bundle and
# protect nothing.
_MIN_SECRET_LEN = 6
_PLAIN = re.compile(r"^([a-z]{1,8}|[0-9.]+|true|false|none|null)$", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return not _NOT_SECRET_NAME.match(name) and bool(_SECRET_NAME.search(name))


def looks_secret_value(value: str) -> bool:
    """A value that is shaped like a credential, whatever its name."""
    if any(p.search(value) for p in _SECRET_PATTERNS):
        return True
    if _URL_CREDENTIALS.search(value) or _ASSIGNMENT.search(value):
        return True
    return any(_is_random_looking(m.group(0)) for m in _RANDOM_LOOKING.finditer(value))


def _is_random_looking(s: str) -> bool:
    if "/" in s.strip("/") and s.count("/") >= 2:  # a path, not a key
        return False
    if len(re.split(r"[_-]", s)) >= 3:  # snake_case identifiers, flags
        return False
    return bool(re.search(r"[A-Z]", s) and re.search(r"[a-z]", s) and re.search(r"[0-9]", s))


@dataclass(frozen=True)
class Scrubber:
    """Replaces secrets and the home directory in texts. Build it with
    `Scrubber.from_environ()`; `scrub` is idempotent."""

    secrets: tuple[str, ...] = ()
    homes: tuple[str, ...] = ()

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None, home: str | None = None) -> "Scrubber":
        environ = os.environ if environ is None else environ
        secrets = {
            v for k, v in environ.items()
            if v and len(v) >= _MIN_SECRET_LEN and not _PLAIN.match(v)
            and (is_secret_name(k) or looks_secret_value(v))
        }
        home = home if home is not None else environ.get("HOME") or os.path.expanduser("~")
        homes = set()
        if home and home.rstrip("/"):
            homes.add(home.rstrip("/"))
            real = os.path.realpath(home).rstrip("/")
            if real:
                homes.add(real)
        # Longest first, so a secret containing another is replaced whole.
        return cls(tuple(sorted(secrets, key=len, reverse=True)),
                   tuple(sorted(homes, key=len, reverse=True)))

    def scrub(self, text: str) -> str:
        for s in self.secrets:
            text = text.replace(s, REDACTED)
        for p in _SECRET_PATTERNS:
            text = p.sub(REDACTED, text)
        text = _URL_CREDENTIALS.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
        text = _ASSIGNMENT.sub(
            lambda m: m.group(0) if m.group(2) == REDACTED else m.group(1) + REDACTED, text
        )
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


def is_allowed_env(name: str) -> bool:
    if name.startswith(ENV_DENY_PREFIXES):
        return False
    return name in ENV_ALLOW_EXACT or name.startswith(ENV_ALLOW_PREFIXES)


def capture_env(environ: Mapping[str, str], scrubber: Scrubber) -> dict[str, str]:
    """The allow-listed variables, sorted; secret-looking ones redacted."""
    out: dict[str, str] = {}
    for name in sorted(environ):
        if not is_allowed_env(name):
            continue
        value = environ[name]
        if is_secret_name(name) or looks_secret_value(value):
            out[name] = REDACTED
        else:
            out[name] = scrubber.scrub(value)
    return out


def redacted_names(environ: Mapping[str, str], names: Iterable[str] | None = None) -> list[str]:
    """Names of the variables whose values a scrubber hides (for the report's
    'what was removed' note; names only, never values)."""
    pool = environ if names is None else {n: environ[n] for n in names if n in environ}
    return sorted(n for n, v in pool.items() if v and (is_secret_name(n) or looks_secret_value(v)))
