"""Issue 24: secret forms that used to pass both the scrubber and detect-secrets
(auth tuples, Authorization headers, webhook and signed URLs, credential-looking
option defaults, secrets named in comments), TF_CONFIG and index URLs as
secret-bearing variables, and a URL's userinfo never printed, never stored,
but used by version mode's index listing the way pip uses it."""

from __future__ import annotations

import base64
import http.server
import json
import threading
from pathlib import Path

import pytest
from report_fakes import PROJECT_SRC, ScriptedRunner, build, make_run
from test_safety_leaks import _shape

from tfrepro.errors import UserError
from tfrepro.report import envreport
from tfrepro.report.answer import Env
from tfrepro.report.scrub import REDACTED, Scrubber
from tfrepro.report.secretscan import raise_on_findings, scan_bundle
from tfrepro.trials import releases
from tfrepro.trials.envs import run_streaming

WEBHOOK_TOKEN = "kX9_ab-cDEFghiJKL_mnoPQRstu-VWXyz0123_456789abcdefGHIJ-KLmnopQRST"
GCS_SIGNATURE = "4a6f2c9e1b7d3a5f8e0c2b4d6f8a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d1f3a5c7e9b0d2f4a6c8e0b2d4f6a8c"
LEAKS: list[tuple[str, str, tuple[str, ...]]] = [
    ("auth-tuple", 'AUTH = ("alice", "Sup3rS3cretPw!")\n', ("Sup3rS3cretPw!",)),
    ("auth-kwarg", 'r = dict(url="https://api.example.com", auth=("alice", "hunter2-Prod"))\n', ("hunter2-Prod",)),
    (
        "basic-header",
        'headers = {"Authorization": "Basic YWxpY2U6U3VwM3JTM2NyZXRQdyE="}\n',
        ("YWxpY2U6U3VwM3JTM2NyZXRQdyE=",),
    ),
    ("basic-header-line", 'HDR = "Authorization: Basic YWxpY2U6aHVudGVyMg=="\n', ("YWxpY2U6aHVudGVyMg==",)),
    (
        "discord-webhook",
        f'HOOK = "https://discord.com/api/webhooks/1187234567890123456/{WEBHOOK_TOKEN}"\n',
        (WEBHOOK_TOKEN,),
    ),
    (
        "wandb-argparse-default",
        "import argparse\nparser = argparse.ArgumentParser()\n"
        'parser.add_argument("--wandb-key", default="1202ca5900ed3739a963d21895a0e5ba249e4cde")\n',
        ("1202ca5900ed3739a963d21895a0e5ba249e4cde",),
    ),
    (
        "gcs-signed-url",
        'URL = "https://storage.googleapis.com/bkt/data.tfrecord?X-Goog-Algorithm=GOOG4-RSA-SHA256'
        f'&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature={GCS_SIGNATURE}"\n',
        (GCS_SIGNATURE,),
    ),
    ("comment-db-pw", "x = 1  # the db pw is Xk7mQ2pL9vR4\n", ("Xk7mQ2pL9vR4",)),
    ("comment-db-pw-word", "# the db pw is hunter\n", ("hunter",)),
]
ALL_LEAKS = "".join(src for _, src, _ in LEAKS)
ALL_VALUES = [v for _, _, values in LEAKS for v in values]
NOT_SECRETS = [
    'author = ("alice", "bob")\n',
    "# the token is refreshed every hour\n",
    "# Basic authentication is not used here\n",
    'parser.add_argument("--sort-key", default="timestamp")\n',
    'URL = "https://example.com/search?page=2&key=1"\n',
    'LOGS = "https://example.com/api/hooks/list"\n',
]


def _scrub(text: str) -> str:
    return Scrubber.from_environ({"HOME": "/nonexistent-home"}).scrub(text)


@pytest.mark.parametrize("src, values", [(s, v) for _, s, v in LEAKS], ids=[i for i, _, _ in LEAKS])
def test_each_form_is_redacted_and_the_code_around_it_is_unchanged(src, values):
    out = _scrub(src)
    assert [v for v in values if v in out] == [] and REDACTED in out
    assert _shape(out) == _shape(src)
    assert _scrub(out) == out


@pytest.mark.parametrize("text", NOT_SECRETS)
def test_prose_and_ordinary_code_are_left_alone(text):
    assert _scrub(text) == text


def test_a_raw_file_holding_them_fails_the_report_naming_each_file_and_line(tmp_path):
    (tmp_path / "repro.py").write_text(ALL_LEAKS)
    findings = scan_bundle(tmp_path)
    lines = {f.line for f in findings}
    for n, line in enumerate(ALL_LEAKS.splitlines(), 1):
        if any(v in line for v in ALL_VALUES):
            assert n in lines, line
    with pytest.raises(UserError) as e:
        raise_on_findings(findings, tmp_path)
    assert e.value.exit_code != 0 and f"repro.py:{min(lines)}" in str(e.value)


TF_CONFIG = json.dumps(
    {
        "cluster": {"worker": ["10.1.2.3:2222", "10.1.2.4:2222"], "chief": ["trainer-0.corp.internal:2222"]},
        "task": {"type": "worker", "index": 0},
        "rpc_token": "Zq8sLx2VnW4tRk7m",
    }
)
INDEX = "https://bob:Idx-Pa55word@pypi.corp.example.com/simple"
ENVIRON = {"TF_CONFIG": TF_CONFIG, "PIP_INDEX_URL": INDEX, "TF_CPP_MIN_LOG_LEVEL": "2"}
LEAKED_PARTS = ("10.1.2.3:2222", "trainer-0.corp.internal", "Zq8sLx2VnW4tRk7m", "Idx-Pa55word")


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "home" / "alice" / "proj"
    root.mkdir(parents=True)
    (root / "repro.py").write_text(ALL_LEAKS + PROJECT_SRC)
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 8\n\n[features.lr_warmup]\naffects_loss = true\n")
    return root


def test_a_bundle_holds_none_of_them_nor_tf_config_nor_the_index_credentials(project):
    run = make_run(project, "nan", ["mixed_precision"])
    b = build(run, ScriptedRunner(), environ=ENVIRON)
    files = [p for p in b.out.rglob("*") if p.is_file()]
    assert any(p.name == "ISSUE.md" for p in files) and any(p.name == "report.json" for p in files)
    found = {
        str(p.relative_to(b.out)): [v for v in (*ALL_VALUES, TF_CONFIG, *LEAKED_PARTS) if v.encode() in p.read_bytes()]
        for p in files
    }
    assert {k: v for k, v in found.items() if v} == {}
    assert scan_bundle(b.out) == []


def test_tf_config_and_index_parts_are_hunted_in_any_text():
    s = Scrubber.from_environ({"HOME": "/nonexistent-home", **ENVIRON})
    text = f"ConnectionError: {TF_CONFIG}\ncannot reach 10.1.2.3:2222 with token Zq8sLx2VnW4tRk7m\npip: {INDEX}\n"
    out = s.scrub(text)
    assert [v for v in LEAKED_PARTS if v in out] == []


def test_env_json_withholds_tf_config_even_without_a_token_in_it():
    plain = json.loads(TF_CONFIG)
    del plain["rpc_token"]
    doc = envreport.env_doc(Env(), {**ENVIRON, "TF_CONFIG": json.dumps(plain)})
    assert doc["env"]["TF_CONFIG"] == REDACTED
    assert [v for v in LEAKED_PARTS if v in json.dumps(doc)] == []


# -- index URLs: used as pip uses them, never printed or stored -----------------------


class _Index(http.server.BaseHTTPRequestHandler):
    want = "Basic " + base64.b64encode(b"bob:Idx-Pa55word").decode()
    seen: list[str | None] = []

    def do_GET(self):  # noqa: N802 (http.server's name)
        type(self).seen.append(self.headers.get("Authorization"))
        if self.headers.get("Authorization") != self.want:
            self.send_response(401)
            self.end_headers()
            return
        body = json.dumps({"files": [{"filename": "tensorflow-2.16.2-cp311-cp311-manylinux_2_17_x86_64.whl"}]})
        self.send_response(200)
        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def index_server():
    server = http.server.HTTPServer(("127.0.0.1", 0), _Index)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_credentialed_index_is_used_with_basic_auth_and_never_stored(tmp_path, monkeypatch, index_server):
    monkeypatch.setenv("PIP_INDEX_URL", f"http://bob:Idx-Pa55word@127.0.0.1:{index_server}/simple")
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)

    listing = releases.list_releases("tensorflow", tmp_path)

    assert "2.16.2" in listing.versions
    assert _Index.seen[-1] == _Index.want
    stored = "".join(p.read_text() for p in tmp_path.rglob("*") if p.is_file())
    assert "Idx-Pa55word" not in stored and "bob" not in stored


def test_a_failing_credentialed_index_is_named_without_its_userinfo(tmp_path, monkeypatch, index_server):
    monkeypatch.setenv("PIP_INDEX_URL", f"http://bob:Wr0ng-Pa55@127.0.0.1:{index_server}/simple")
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)

    with pytest.raises(UserError) as e:
        releases.list_releases("tensorflow", tmp_path)

    assert f"127.0.0.1:{index_server}/simple" in str(e.value)
    assert "Wr0ng-Pa55" not in str(e.value) and "bob" not in str(e.value)


def test_an_installers_output_never_echoes_a_userinfo():
    lines: list[str] = []
    rc, tail = run_streaming(
        ["echo", "Looking in indexes: https://bob:Idx-Pa55word@pypi.corp.example.com/simple"], lines.append
    )
    assert rc == 0 and lines and "Idx-Pa55word" not in "".join(lines + tail) and "pypi.corp.example.com" in lines[0]
