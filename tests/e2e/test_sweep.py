"""Hydra multirun (`-m`) sweeps over models and settings: every job is its own run
(`<run_id>-<job number>`) with its logs under the store's root, never in the working directory
(docs/configuration.md, "Sweeps")."""

from __future__ import annotations

import json

from tests.fixtures.jobs import REPO, job


def test_multirun_gives_each_job_its_own_run_and_logs_under_the_store(tmp_path):
    cwd = tmp_path / "cwd"  # where the command is run: must stay empty
    cwd.mkdir()
    root = tmp_path / "runs"
    proc = job("scenes", "-m", f"store.root={root}", "run_id=sweep", "scenes=tiny", "model=silent,oracle",
               "vad.rules.threshold=0.4,0.6", env={"PYTHONPATH": str(REPO)}, cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert list(cwd.iterdir()) == []  # no multirun/ or outputs/ folder where it ran
    runs = sorted(p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith("_"))
    assert runs == ["sweep-0", "sweep-1", "sweep-2", "sweep-3"]
    seen = set()
    for name in runs:
        manifest = json.loads((root / name / "run.json").read_text())
        assert manifest["run_id"] == name
        cfg = manifest["config"]
        seen.add((tuple(cfg["model"]), cfg["vad"]["rules"]["threshold"]))
        logs = list((root / name / "logs").glob("*/*.log"))
        assert len(logs) == 1 and f"run_id={name}" in logs[0].read_text()
        assert (logs[0].parent / ".hydra" / "overrides.yaml").is_file()
    assert seen == {(("silent",), 0.4), (("silent",), 0.6), (("oracle",), 0.4), (("oracle",), 0.6)}
    assert (root / "multirun.yaml").is_file()  # Hydra's record of the sweep
