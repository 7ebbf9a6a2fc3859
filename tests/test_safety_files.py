"""Issue 13: nothing of the user's is lost, leaked or left running — the files.

Each test sets up what a user has on disk (real files, links, FIFOs, a fake
home directory) and checks what the user would notice afterwards.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

import pytest
from click.testing import CliRunner
from nspids import host_pids

from tfrepro.cli import main
from tfrepro.errors import UserError
from tfrepro.project import Project

PY = sys.executable
MB = 1024 * 1024
BLOCK = "# tfrepro: feature a -- demo\n# A = 1\n# tfrepro: else\nA = 0\n# tfrepro: end\n"


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **(env or {})}
    return subprocess.run([PY, "-m", "tfrepro", *args], capture_output=True, text=True, env=full_env, timeout=600)


# -- 1. trials never write through into user files ------------------------------


def test_variant_files_are_copies_not_links_of_large_user_files(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text("print('hi')\n")
    ckpt = root / "model.ckpt"
    ckpt.write_bytes(os.urandom(20 * MB))
    before = digest(ckpt)

    note = asdict(Project.load(root).write_variant(set(), tmp_path / "variant"))

    copy = tmp_path / "variant" / "model.ckpt"
    assert not copy.is_symlink() and copy.stat().st_ino != ckpt.stat().st_ino
    copy.write_bytes(b"overwritten by trial")  # what the user's script did
    assert digest(ckpt) == before
    assert note["copied"] + len(note["reflinked"]) == 2 - note["rendered"]
    assert note["copied_bytes"] >= 20 * MB or note["reflinked"] == ["model.ckpt"]


def test_file_beyond_the_copy_budget_fails_before_the_trial_naming_file_and_setting(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text("print('hi')\n")
    (root / "tfrepro.toml").write_text("[state]\ncopy_budget_mb = 10\n")
    (root / "big.bin").write_bytes(b"\0" * (20 * MB))

    r = cli("run", str(root), "--json")

    assert r.returncode == 2, r.stderr
    err = json.loads(r.stdout)  # with --json, the error is one JSON object on stdout
    assert err["status"] == "error" and "big.bin" in err["error"] and "copy_budget_mb" in err["error"]
    assert "Traceback" not in r.stderr
    assert not list((root / ".tfrepro" / "trials").glob("*/result.json"))


TRIAL_SCRIPT = """\
import numpy as np
import keras

# The habits that turned a 20 MB checkpoint into 20 bytes: save where you load.
with open("data.ckpt", "r+b") as f:
    f.write(b"overwritten in place")
with open("data.ckpt", "wb") as f:
    f.write(b"truncated")
np.save("arr.npy", np.zeros(3))
model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)])
model.compile(optimizer="sgd", loss="mse")
model.fit(np.ones((8, 4)), np.ones((8, 2)), epochs=1, verbose=0)
model.save_weights("model.weights.h5")
print("wrote everything")
"""


@pytest.mark.e2e
def test_trial_writing_open_np_save_and_save_weights_leaves_user_files_identical(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "train.py").write_text(TRIAL_SCRIPT)
    for name in ("data.ckpt", "arr.npy", "model.weights.h5"):
        (root / name).write_bytes(os.urandom(20 * MB))
    before = {p.name: digest(p) for p in root.iterdir()}

    r = cli("run", str(root / "train.py"), "--json", "--no-cache", env={"TFREPRO_KEEP_VARIANTS": "1"})

    after = {p.name: digest(p) for p in root.iterdir() if p.name != ".tfrepro"}
    assert after == before
    variant = next((root / ".tfrepro" / "trials").glob("*/variant"))
    assert (variant / "data.ckpt").read_bytes() == b"truncated", r.stdout + r.stderr  # the trial did run
    assert (variant / "arr.npy").stat().st_size < MB


# -- 2. features --set keeps every byte it does not switch -------------------------


def features_set(root: Path, states: str) -> None:
    r = CliRunner().invoke(main, ["features", str(root), "--set", states])
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    "encoding,data",
    [
        ("crlf", BLOCK.replace("\n", "\r\n").encode() + b"print(A)\r\n"),
        ("bom", b"\xef\xbb\xbf" + BLOCK.encode() + "print('héllo', A)\n".encode()),
        ("latin-1", b"# -*- coding: latin-1 -*-\n" + BLOCK.encode() + "print('caf\xe9', A)\n".encode("latin-1")),
        ("mixed-eol-formfeed", b"x = 1\r\n\x0c\n" + BLOCK.encode() + b"y = 2\r"),
    ],
)
def test_set_on_then_off_restores_the_original_bytes(tmp_path, encoding, data):
    (tmp_path / "repro.py").write_bytes(data)

    features_set(tmp_path, "a=on")
    on = (tmp_path / "repro.py").read_bytes()
    features_set(tmp_path, "a=off")

    assert on != data and b"A = 1" in on and b"# A = 0" in on
    assert (tmp_path / "repro.py").read_bytes() == data
    if encoding == "crlf":
        assert on.count(b"\r\n") == data.count(b"\r\n") and b"\n" not in on.replace(b"\r\n", b"")
    if encoding != "mixed-eol-formfeed":
        env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
        out = subprocess.run([PY, "repro.py"], cwd=tmp_path, capture_output=True, text=True, env=env)
        assert out.returncode == 0 and out.stdout.strip().endswith("0"), out.stderr


def test_set_writes_through_a_symlink_and_a_hard_link(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "blocks.py").write_text(BLOCK)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "repro.py").write_text("import blocks\n")
    (proj / "blocks.py").symlink_to(shared / "blocks.py")
    os.link(shared / "blocks.py", shared / "hard.py")

    features_set(proj, "a=on")

    assert (proj / "blocks.py").is_symlink()
    assert (shared / "blocks.py").stat().st_ino == (shared / "hard.py").stat().st_ino
    for name in (proj / "blocks.py", shared / "blocks.py", shared / "hard.py"):
        assert "\nA = 1\n" in name.read_text(), name
    assert not [p for p in shared.iterdir() if "tfrepro" in p.name]  # no temp or backup left


# -- 3. a script path never turns $HOME (or its secrets) into the project ----------


def fake_home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\n")
    (home / "Pictures").mkdir()
    (home / "Pictures" / "holiday.jpg").write_bytes(b"\xff\xd8jpeg")
    return home


def test_script_directly_in_home_is_refused_with_a_hint(tmp_path):
    home = fake_home(tmp_path)
    (home / "train.py").write_text(BLOCK)

    r = cli("features", str(home / "train.py"), env={"HOME": str(home)})

    assert r.returncode == 2 and "home directory" in r.stderr and "hint" in r.stderr
    assert "Traceback" not in r.stderr


def test_script_in_a_home_subfolder_copies_that_folder_never_secrets_or_venvs(tmp_path, monkeypatch):
    home = fake_home(tmp_path)
    proj = home / "work" / "repro"
    (proj / "sub").mkdir(parents=True)
    (proj / "train.py").write_text(BLOCK)
    (proj / "sub" / "helper.py").write_text("X = 1\n")
    for secret in (
        ".aws/credentials",
        ".netrc",
        ".docker/config.json",
        ".config/gcloud/creds.json",
        ".git-credentials",
        ".kaggle/kaggle.json",
        "env2/pyvenv.cfg",
        "env2/lib/site.py",
    ):
        (proj / secret).parent.mkdir(parents=True, exist_ok=True)
        (proj / secret).write_text("secret\n")

    monkeypatch.setenv("HOME", str(home))
    p = Project.load(proj / "train.py")

    assert p.root == proj.resolve() and p.manifest.trial.entry == "train.py"
    assert sorted(p.files) == ["sub/helper.py", "train.py"]


def test_script_in_a_subdirectory_of_a_repo_belongs_to_the_repo(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "model_lib.py").write_text("X = 1\n")
    (repo / "scripts" / "train.py").write_text(BLOCK)

    p = Project.load(repo / "scripts" / "train.py")

    assert p.root == repo.resolve() and p.manifest.trial.entry == "scripts/train.py"
    assert "model_lib.py" in p.files


def test_home_as_project_directory_is_refused(tmp_path, monkeypatch):
    home = fake_home(tmp_path)
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(UserError, match="home directory"):
        Project.load(home)


# -- 4. special files and dangling links ------------------------------------------


def test_fifo_and_dangling_symlink_are_skipped_with_a_warning_and_run_finishes(tmp_path):
    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text("print('step=1 loss=0.5')\n")
    os.mkfifo(root / "pipe")
    (root / "gone.csv").symlink_to(tmp_path / "deleted.csv")

    r = cli("run", str(root), "--json", "--steps", "1", env={"TFREPRO_KEEP_VARIANTS": "1"})

    assert r.returncode in (0, 1), r.stderr
    assert "pipe: a FIFO" in r.stderr and "gone.csv: a dangling symlink" in r.stderr
    assert "Traceback" not in r.stderr
    variant = next((root / ".tfrepro" / "trials").glob("*/variant"))
    assert sorted(p.name for p in variant.iterdir()) == ["repro.py"]
    json.loads(r.stdout)


# -- 6. .tfrepro/ is pruned, and clean never deletes outside it ---------------------


def make_trial(state, key: str, mtime: float, *, done: bool = True) -> Path:
    d = state.new_trial_dir(key)
    (d / "variant").mkdir()
    (d / "variant" / "data.bin").write_bytes(b"\0" * 1000)
    (d / "stdout.log").write_text("log\n")
    if done:
        (d / "result.json").write_text("{}")
        state.release(d)  # its trial is over; a trial not done keeps its lock (in use)
    os.utime(d, (mtime, mtime))
    return d


def test_prune_keeps_the_newest_runs_and_trials_and_what_kept_runs_refer_to(tmp_path):
    from tfrepro.trials.state import StateDir, write_trial_record
    from tfrepro.trials.values import TrialResult

    state = StateDir(tmp_path / ".tfrepro")
    trials = [make_trial(state, f"{i:016x}", 1000 + i) for i in range(5)]
    runs = []
    for i in range(3):
        r = state.new_run_dir(f"run{i}")
        state.release(r)  # a run of a process that has ended
        runs.append(r)
    write_trial_record(runs[2] / "trials" / "1-all", TrialResult(log_dir=str(trials[0])))
    for i, r in enumerate(runs):
        os.utime(r, (2000 + i, 2000 + i))
    state.sub("cache")
    (state.path / "cache" / "k.json").write_text("{}")
    busy = make_trial(state, "f" * 16, time.time(), done=False)  # a trial running next door

    pruned = state.prune(keep_runs=1, keep_trials=2)

    assert sorted(p.name for p in (state.path / "runs").iterdir()) == ["run2"]
    left = sorted(p.name for p in (state.path / "trials").iterdir())
    assert left == sorted([trials[0].name, trials[3].name, trials[4].name, busy.name])
    assert not (trials[0] / "variant").exists() and (trials[0] / "stdout.log").exists()
    assert (trials[4] / "variant" / "data.bin").exists() and (busy / "variant").exists()
    assert (state.path / "cache" / "k.json").exists()
    assert pruned.runs == 2 and pruned.trials == 2 and pruned.variants == 1


def test_clean_removes_links_inside_the_state_dir_never_their_targets(tmp_path):
    from tfrepro.trials.state import StateDir, clean_project

    user = tmp_path / "precious"
    user.mkdir()
    (user / "thesis.tex").write_text("years of work\n")
    (tmp_path / "repro.py").write_text("print(1)\n")
    state = StateDir(tmp_path / ".tfrepro")
    t = make_trial(state, "a" * 16, 1000)
    (t / "variant" / "data").symlink_to(user)
    (state.path / "trials" / "linked").symlink_to(user)
    (state.path / "tmp").symlink_to(user)

    clean_project(tmp_path)
    assert not (t / "variant").exists() and (state.path / "trials" / "linked").is_symlink()
    pruned = clean_project(tmp_path, everything=True)

    # What tfrepro made is gone; the links it has no record of making are left (and said).
    assert sorted(os.listdir(state.path)) == [".gitignore", "tmp", "trials"]
    assert os.listdir(state.path / "trials") == ["linked"]
    assert len(pruned.foreign) == 2 and "no record" in pruned.describe()
    assert (user / "thesis.tex").read_text() == "years of work\n"


def test_clean_after_a_real_run_frees_the_trial_copy_and_keeps_the_cache(tmp_path):
    from tfrepro.trials.state import clean_project

    root = tmp_path / "proj"
    root.mkdir()
    (root / "repro.py").write_text("print('step=1 loss=0.5')\n")
    (root / "data.bin").write_bytes(b"\0" * MB)
    r = cli("run", str(root), "--json", "--steps", "1", env={"TFREPRO_KEEP_VARIANTS": "1"})
    assert r.returncode in (0, 1), r.stderr
    assert list((root / ".tfrepro" / "trials").glob("*/variant/data.bin"))

    pruned = clean_project(root)

    assert not list((root / ".tfrepro" / "trials").glob("*/variant"))
    assert list((root / ".tfrepro" / "cache").glob("*.json")) and pruned.bytes >= MB
    assert (root / "data.bin").stat().st_size == MB


def test_clean_all_command_removes_the_state_dir_only(tmp_path):
    (tmp_path / "repro.py").write_text("print(1)\n")
    (tmp_path / ".tfrepro" / "cache").mkdir(parents=True)
    (tmp_path / ".tfrepro" / "cache" / f"{'ab' * 32}.json").write_text("{}")

    r = CliRunner().invoke(main, ["clean", str(tmp_path), "--all", "--json"])

    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["other"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repro.py"]


# -- 7. report's check_numerics probe leaves nothing running or behind -------------

SPAWNER = """\
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
open({pid_file!r}, "w").write(str(child.pid))
time.sleep(300)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a killed orphan waits as a zombie until init reaps it


@pytest.mark.e2e
def test_localize_timeout_kills_the_probes_children_and_removes_its_temp_dir(tmp_path, monkeypatch):
    import tempfile

    from tfrepro.report.localize import localize
    from tfrepro.settings import TrialSettings

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    pid_file = tmp_path / "pids" / "grandchild.pid"
    pid_file.parent.mkdir()
    monkeypatch.setenv("TFREPRO_CONFINE_WRITABLE", str(pid_file.parent))  # the probe is confined to its dir

    loc = localize({"repro.py": SPAWNER.format(pid_file=str(pid_file))}, settings=TrialSettings(timeout_s=20))

    assert "timed out" in loc.note
    pid = int(pid_file.read_text())  # in the probe's own PID namespace, where it has one
    deadline = time.time() + 5
    while host_pids([pid], scratch) and time.time() < deadline:
        time.sleep(0.1)
    assert host_pids([pid], scratch) == [], "the probe's child outlived the timeout"
    assert list(scratch.iterdir()) == []


def test_the_bundle_ships_the_entry_and_its_local_imports_only(tmp_path):
    """An unrelated module next to the script (settings.py with a DB password,
    an old experiment) is not the repro's business."""
    from tfrepro.project import Project
    from tfrepro.report.export import bundle_files

    root = tmp_path / "proj"
    (root / "lib").mkdir(parents=True)
    (root / "train.py").write_text("import helpers\nfrom lib import layers\nprint(helpers.X, layers.Y)\n")
    (root / "helpers.py").write_text("X = 1\n")
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "layers.py").write_text("Y = 2\n")
    (root / "settings.py").write_text("DB_PASSWORD = 'hunter2'\n")
    (root / "old_experiment").mkdir()
    (root / "old_experiment" / "train_v0.py").write_text("print('v0')\n")
    (root / "tfrepro.toml").write_text('[trial]\nentry = "train.py"\n')
    files = bundle_files(Project.load(root, detect=False), None, "train.py")
    assert sorted(files) == ["helpers.py", "lib/__init__.py", "lib/layers.py", "repro.py"]
