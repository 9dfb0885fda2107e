"""`attnscale train --backend/--address`: the choices are checked before any work."""

import sys

from attnscale.cli import main


def test_ray_backend_without_the_extra_names_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if ray were not installed
    rc = main(["train", "scale-vs-dk", "--quick", "--backend", "ray", "--results", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "attnscale[cluster]" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_address_needs_the_ray_backend(tmp_path, capsys):
    rc = main(["train", "scale-vs-dk", "--quick", "--address", "auto", "--results", str(tmp_path / "o")])
    assert rc == 2 and "--address" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()


def test_cpus_per_cell_checked(tmp_path, capsys):
    import pytest

    pytest.importorskip("ray")
    rc = main(
        [
            "train",
            "scale-vs-dk",
            "--quick",
            "--backend",
            "ray",
            "--cpus-per-cell",
            "0",
            "--results",
            str(tmp_path / "o"),
        ]
    )
    assert rc == 2 and "--cpus-per-cell" in capsys.readouterr().err


def test_train_runs_and_prints_exactly_the_registered_experiments():
    from attnscale.cli import train
    from attnscale.experiments.training.registry import EXPERIMENTS

    assert list(train.PRINTERS) == list(EXPERIMENTS)
