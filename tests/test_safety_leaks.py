"""Issue 13: secrets that used to reach a bug-report bundle.

Each leak string is redacted by the scrubber with the code around it still
the same Python; the detect-secrets scan of a finished bundle finds them in a
raw file and nothing in a scrubbed one, nor in a bundle's normal content (git
shas and sha256 cache keys included); report.json no longer names secret
environment variables; event files no longer carry the host name. The last
test builds a real bundle (real bisect, real re-run) from a leaky project.
"""

from __future__ import annotations

import ast
import hashlib
import json
import socket
from pathlib import Path

import pytest
from report_fakes import PROJECT_SRC, ScriptedRunner, build, make_run

from tfrepro.errors import UserError
from tfrepro.report import tables
from tfrepro.report.scrub import REDACTED, Scrubber
from tfrepro.report.secretscan import Finding, raise_on_findings, scan_bundle

PGP_BODY = (
    "lQOYBGXk3mUBCADJ7v1mZqk2YwWbq0x8Q9tT2ZrLmVn4cPq1sDf0aHhGjK3lMnBv",
    "xW8yZ2aQe5rT7uI9oP0aS1dF2gH3jK4lZ5xC6vB7nM8qW9eR0tY1uI2oP3aS4dF",
)
PEM_BODY = (
    "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7q2Zk8mRvN4pX",
    "c2Lw9yTb5eJfH3kQa7sUd1oVg6iXr0nPm8tYz4wKjB2hE5fG9cL3xR7uA1qD6sN0",
)

# (id, Python source that runs as is, the secret values it holds)
LEAKS: list[tuple[str, str, tuple[str, ...]]] = [
    (
        "environ-subscript",
        'os.environ["WANDB_API_KEY"] = "f2903bf6905f947e5d1775086c1d4dd63e274da9"\n',
        ("f2903bf6905f947e5d1775086c1d4dd63e274da9",),
    ),
    ("annotated-password", 'password: str = "Tr0ub4dor&3xyz"\n', ("Tr0ub4dor&3xyz",)),
    ("dict-pass", "db = {'user': 'alice', 'pass': 'qu1ckBr0wnF0x'}\n", ("qu1ckBr0wnF0x",)),
    ("pw-keyword", 'conn = dict(host="db", pw="s3cr3tPw9z")\n', ("s3cr3tPw9z",)),
    (
        "wandb-login",
        'if False:\n    wandb.login(key="1202ca5900ed3739a963d21895a0e5ba249e4cde")\n',
        ("1202ca5900ed3739a963d21895a0e5ba249e4cde",),
    ),
    (
        "kaggle-key",
        'kaggle = {"username": "alice", "key": "e5510cf09a910b1e8e537787c5b1469a"}\n',
        ("e5510cf09a910b1e8e537787c5b1469a",),
    ),
    (
        "bearer-lowercase",
        'headers = {"Authorization": "Bearer bilrdodmbqpnvtvftaxc3bximnyhzt"}\n',
        ("bilrdodmbqpnvtvftaxc3bximnyhzt",),
    ),
    (
        "gitlab",
        'gl = dict(url="https://gitlab.example.com", auth="glpat-o2Zf90cbW3PIVQbulTpU")\n',
        ("glpat-o2Zf90cbW3PIVQbulTpU",),
    ),
    ("stripe", 'stripe = dict(client="sk_live_NpL94fbjlSx3ywzabzGXVqBZ")\n', ("sk_live_NpL94fbjlSx3ywzabzGXVqBZ",)),
    (
        "aws-secret-with-slashes",
        'aws = dict(id="AKIAIOSFODNN7EXAMPLE", s="mQxlxDmuhTfPk/0tTjQL8mF9S0/xV9dHEzd1H5D9")\n',
        ("AKIAIOSFODNN7EXAMPLE", "mQxlxDmuhTfPk/0tTjQL8mF9S0/xV9dHEzd1H5D9"),
    ),
    (
        "pgp-block",
        'PGP = """-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n'
        + "\n".join(PGP_BODY)
        + '\n=Xq9z\n-----END PGP PRIVATE KEY BLOCK-----"""\n',
        PGP_BODY,
    ),
    ("truncated-private-key", 'PEM = """-----BEGIN PRIVATE KEY-----\n' + "\n".join(PEM_BODY) + '\n"""\n', PEM_BODY),
    ("url-token", 'REMOTE = "https://EGn5HpOvluWBx7Qk2Lm9@git.example.com/org/repo.git"\n', ("EGn5HpOvluWBx7Qk2Lm9",)),
    (
        "url-password-with-slashes",
        'DB_URL = "postgresql://bob:pa/ss/w0rd9@db.example.com:5432/app"\n',
        ("pa/ss/w0rd9",),
    ),
    ("hf-short", 'hub = dict(t="hf_tUwrGqDrWD")\n', ("hf_tUwrGqDrWD",)),
    ("passphrase-with-spaces", 'passphrase = "correct horse battery staple"\n', ("correct horse battery staple",)),
]
ALL_LEAKS = "import os\n\n" + "".join(src for _, src, _ in LEAKS)
ALL_VALUES = [v for _, _, values in LEAKS for v in values]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """test_report's tiny marked project, in ~/proj of a fake home."""
    root = tmp_path / "home" / "alice" / "proj"
    root.mkdir(parents=True)
    (root / "repro.py").write_text(PROJECT_SRC)
    (root / "tfrepro.toml").write_text("[trial]\nsteps = 8\n\n[features.lr_warmup]\naffects_loss = true\n")
    return root


def _shape(src: str) -> str:
    """The code with every string constant blanked: what must not change."""
    tree = ast.parse(src)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            node.value = ""
    return ast.dump(tree)


def _scrub(text: str) -> str:
    return Scrubber.from_environ({"HOME": "/nonexistent-home"}).scrub(text)


@pytest.mark.parametrize("src, values", [(s, v) for _, s, v in LEAKS], ids=[i for i, _, _ in LEAKS])
def test_each_leak_is_redacted_and_the_code_around_it_is_unchanged(src, values):
    out = _scrub(src)
    for v in values:
        assert v not in out
    assert REDACTED in out
    assert _shape(out) == _shape(src)  # same statements, names and calls; only the string values differ
    assert _scrub(out) == out


def test_leaks_quoted_inside_json_are_redacted_too():
    # result.json quotes code (tracebacks, the repro) as JSON strings: `\"...\"`.
    text = json.dumps({"code": ALL_LEAKS, "lines": ALL_LEAKS.splitlines()}, indent=2)
    out = _scrub(text)
    assert [v for v in ALL_VALUES if v in out] == []
    assert _shape(json.loads(out)["code"]) == _shape(ALL_LEAKS)


def _lines_of(values: tuple[str, ...], text: str) -> set[int]:
    return {n for n, line in enumerate(text.splitlines(), 1) if any(v in line for v in values)}


def test_scan_finds_every_leak_in_a_raw_file_and_nothing_once_scrubbed(tmp_path):
    raw, clean = tmp_path / "raw", tmp_path / "clean"
    raw.mkdir()
    clean.mkdir()
    (raw / "repro.py").write_text(ALL_LEAKS)
    (clean / "repro.py").write_text(_scrub(ALL_LEAKS))
    found = scan_bundle(raw)
    flagged = {f.line for f in found}
    for leak_id, _, values in LEAKS:
        assert _lines_of(values, ALL_LEAKS) & flagged, f"{leak_id} not found in the raw file"
    # detect-secrets itself, not only tfrepro's rules, sees what it knows.
    kinds = {f.kind for f in found}
    assert {"Hex High Entropy String", "Private Key", "Stripe Access Key", "GitLab Token", "AWS Access Key"} <= kinds
    assert scan_bundle(clean) == []


def test_scan_leaves_the_marker_and_our_own_hashes_alone(tmp_path):
    sha = "3b5d5c3712955042212316173ccf37be800958e4"
    cache_key = hashlib.sha256(b"variant").hexdigest()
    (tmp_path / "result.json").write_text(
        json.dumps(
            {
                "first_bad_commit": sha,
                "commit": {"sha": sha, "subject": "float16"},
                "good": {"sha": "cd" * 20},
                "trials_table": [{"key": cache_key, "verdict": "nan"}],
                "api_key": REDACTED,
                "log_dir": "/tmp/tfrepro-rerun-2tbjmedq/state/trials/ae35c128cfbbdc07-442y_tqz",
            },
            indent=2,
        )
    )
    (tmp_path / "repro.py").write_text(f'password = "{REDACTED}"\nheaders = {{"Authorization": "Bearer {REDACTED}"}}\n')
    assert scan_bundle(tmp_path) == []
    # The same 40 hex digits under a name that is not a commit: a W&B key.
    (tmp_path / "wandb.json").write_text(json.dumps({"key": sha}, indent=2))
    assert [(f.file, f.line) for f in scan_bundle(tmp_path)][:1] == [("wandb.json", 2)]


def test_findings_fail_the_report_naming_file_and_line(tmp_path):
    raise_on_findings([])  # nothing found: nothing raised
    findings = [Finding("repro.py", 3, "Secret Keyword"), Finding("reference/repro.py", 7, "Private Key")]
    with pytest.raises(UserError) as e:
        raise_on_findings(findings, bundle=tmp_path)
    assert e.value.exit_code == 2
    assert e.value.where == f"{tmp_path / 'repro.py'}:3"
    assert f"{tmp_path / 'reference/repro.py'}:7: Private Key" in str(e.value)
    assert "tfrepro report" in str(e.value)  # says how to get a clean bundle


# --------------------------------------------------------------------------- bundles (scripted runner)


@pytest.mark.parametrize(
    "symptom, culprits",
    [
        ("nan", ["mixed_precision"]),
        ("crash", ["bad_reshape"]),
        ("mismatch", ["custom_loop"]),
        ("slowdown", ["slow_callback"]),
    ],
)
def test_normal_bundles_have_no_findings(project, symptom, culprits):
    run = make_run(project, symptom, culprits)
    result = json.loads((run / "result.json").read_text())
    for row in result["trials_table"]:  # as the engine writes them: sha256 cache keys
        row["key"] = hashlib.sha256(json.dumps(row).encode()).hexdigest()
    (run / "result.json").write_text(json.dumps(result))
    b = build(run, ScriptedRunner(), max_pairs=3)
    kept = (b.out / "result.json").read_text()
    assert all(row["key"] in kept for row in result["trials_table"])  # not redacted either
    assert scan_bundle(b.out) == []


def test_commit_bundle_with_git_shas_has_no_findings(project):
    sha, good = "9f1c2e7a4b3d5f60718293a4b5c6d7e8f9012345", "0a1b2c3d4e5f60718293a4b5c6d7e8f90123456a"
    run = make_run(project, "nan", [], [], first_bad_commit=sha, commit={"sha": sha, "subject": "float16"})
    for name, policy in (("good", ""), ("bad", 'keras.mixed_precision.set_global_policy("mixed_float16")\n')):
        d = run / "commits" / name
        d.mkdir(parents=True)
        (d / "repro.py").write_text(f"import keras\n{policy}print('train')\n")
    result = json.loads((run / "result.json").read_text())
    result.update(
        good_project=str(run / "commits" / "good"),
        first_bad_project=str(run / "commits" / "bad"),
        good={"sha": good},
        bad={"sha": sha},
    )
    (run / "result.json").write_text(json.dumps(result))
    b = build(run, ScriptedRunner())
    assert sha in (b.out / "report.json").read_text()
    assert scan_bundle(b.out) == []


def test_a_leaky_project_gives_a_bundle_without_any_of_its_secrets(project):
    (project / "repro.py").write_text(ALL_LEAKS + PROJECT_SRC)
    run = make_run(project, "nan", ["mixed_precision"])
    b = build(run, ScriptedRunner())
    assert b.report.rerun.reproduced is True  # the scrubbed repro.py is what was re-run
    leaks = {p.name: [v for v in ALL_VALUES if v.encode() in p.read_bytes()] for p in b.out.rglob("*") if p.is_file()}
    assert {k: v for k, v in leaks.items() if v} == {}
    repro = (b.out / "repro.py").read_text()
    assert _scrub(ALL_LEAKS) in repro and ast.parse(repro)
    assert scan_bundle(b.out) == []


def test_report_json_counts_withheld_env_vars_without_naming_them(project):
    run = make_run(project, "nan", ["mixed_precision"])
    env = {
        "ACME_PROD_DB_PASSWORD": "hunter2-prod-9",
        "STRIPE_API_KEY": "sk_live_NpL94fbjlSx3ywzabzGXVqBZ",
        "INTERNAL_GITLAB_TOKEN": "glpat-o2Zf90cbW3PIVQbulTpU",
        "TF_CPP_MIN_LOG_LEVEL": "2",
    }
    b = build(run, ScriptedRunner(), environ=env)
    assert b.report.redacted_env_count == 3
    for p in b.out.rglob("*"):
        if p.is_file():
            data = p.read_bytes()
            for name, value in env.items():
                if name != "TF_CPP_MIN_LOG_LEVEL":
                    assert name.encode() not in data and value.encode() not in data, (name, p.name)


def test_event_files_do_not_carry_the_host_name(project, tmp_path):
    path = tables.write_run(tmp_path / "run", {"loss": [1.0, 0.5]})
    assert path.name == "events.out.tfevents.tfrepro"
    b = build(make_run(project, "nan", ["mixed_precision"]), ScriptedRunner())
    names = [p.name for p in (b.out / "tensorboard").rglob("*") if p.is_file()]
    assert names and all("tfevents" in n for n in names)
    assert not any(socket.gethostname() in n for n in names)


# --------------------------------------------------------------------------- a real bundle


@pytest.mark.e2e
def test_real_bundle_of_a_leaky_project_holds_none_of_its_secrets(tmp_path, monkeypatch):
    from test_report_e2e import NAN_SRC, _bisect, _report

    proj = tmp_path / "proj"
    proj.mkdir()
    head, sep, rest = NAN_SRC.partition("from keras import ops\n")
    (proj / "repro.py").write_text(head + sep + ALL_LEAKS + rest)
    (proj / "tfrepro.toml").write_text("[trial]\nsteps = 6\ntimeout_s = 120\n")
    doc = _report(_bisect(proj), monkeypatch)
    bundle = Path(doc["bundle"])
    assert doc["reproduction"]["reproduced"] is True  # the scrubbed repro.py still runs and fails the same way
    files = [p for p in bundle.rglob("*") if p.is_file()]
    assert any(p.name == "ISSUE.md" for p in files) and any("tfevents" in p.name for p in files)
    leaks = {str(p.relative_to(bundle)): [v for v in ALL_VALUES if v.encode() in p.read_bytes()] for p in files}
    assert {k: v for k, v in leaks.items() if v} == {}
    assert scan_bundle(bundle) == []
