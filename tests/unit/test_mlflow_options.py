"""The MLflow options of ``run`` and ``export`` and their checks before anything runs, with and
without mlflow installed (without: a clear error naming the extra)."""

from __future__ import annotations

import argparse
import sys

import pytest

from orchestrator import cli
from orchestrator.commands.observers import add_observer_arguments, observer_problems
from orchestrator.tracking import mlflow_client, mlflow_log


@pytest.fixture
def no_mlflow(monkeypatch):
    """mlflow not importable, as without the extra (None in sys.modules: ImportError)."""
    for name in [m for m in sys.modules if m == "mlflow" or m.startswith("mlflow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "mlflow", None)


def _args(command: str, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_observer_arguments(parser, command)
    return parser.parse_args(argv)


def test_run_offers_mlflow_and_the_fleet_check_does_not():
    assert _args("run", ["--mlflow", "sqlite:///x.db"]).mlflow == "sqlite:///x.db"
    assert _args("run", []).mlflow is None
    with pytest.raises(SystemExit):
        _args("fleet", ["--mlflow", "sqlite:///x.db"])
    assert mlflow_log.problems(_args("fleet", [])) == []
    assert mlflow_log.observers(_args("run", []), db="x", command="run") == []


def test_without_mlflow_the_error_names_the_extra(no_mlflow):
    with pytest.raises(mlflow_client.MissingExtra, match=r"pip install 'linksweep\[mlflow\]'"):
        mlflow_client.require_mlflow()
    (problem,) = observer_problems(_args("run", ["--mlflow", "http://127.0.0.1:9"]))
    assert problem.startswith("--mlflow http://127.0.0.1:9: MLflow is not installed")
    assert "pip install 'linksweep[mlflow]'" in problem
    assert observer_problems(_args("run", [])) == []  # not asked for: not needed


def test_run_checks_the_sweep_file_then_the_mlflow_uri_and_creates_nothing(
    no_mlflow, tmp_path, capsys, monkeypatch
):
    """A refused sweep file is said first, before the URI is tried (checking a
    ``sqlite:///`` URI creates that store); a good one with an unusable URI: the URI's error.
    Neither leaves a database or a store behind."""
    monkeypatch.chdir(tmp_path)
    db, store = tmp_path / "r.duckdb", "sqlite:///m.db"
    rc = cli.main(["run", "no-such-sweep.yaml", "--db", str(db), "--mlflow", store])
    assert rc == 2
    err = capsys.readouterr().err
    assert "no-such-sweep" in err and "linksweep[mlflow]" not in err
    sweep = tmp_path / "s.yaml"
    sweep.write_text(
        "name: t\nmodel: gpt2-tiny\ndataset: builtin\nworld_size: 2\nlinks: {default: {}}\n"
        "grid: {strategy: [ddp]}\n"
    )
    assert cli.main(["run", str(sweep), "--db", str(db), "--mlflow", store]) == 2
    assert "linksweep[mlflow]" in capsys.readouterr().err
    assert not db.exists() and not (tmp_path / "m.db").exists()


def test_export_needs_outdir_or_mlflow_and_checks_the_uri_first(no_mlflow, tmp_path, capsys):
    db = str(tmp_path / "none.duckdb")
    assert cli.main(["export", "--db", db]) == 2
    assert "export needs OUTDIR (files) or --mlflow URI" in capsys.readouterr().err
    assert cli.main(["export", str(tmp_path / "out"), "--db", db, "--sweep", "S1"]) == 2
    assert "--sweep chooses what --mlflow logs" in capsys.readouterr().err
    assert cli.main(["export", "--mlflow", f"sqlite:///{tmp_path}/m.db", "--db", db]) == 2
    assert f"--db {db} does not exist" in capsys.readouterr().err
    assert not (tmp_path / "m.db").exists()
    (tmp_path / "none.duckdb").touch()  # there (what it holds is read only after the check)
    assert cli.main(["export", "--mlflow", f"sqlite:///{tmp_path}/m.db", "--db", db]) == 2
    assert "pip install 'linksweep[mlflow]'" in capsys.readouterr().err
    assert (tmp_path / "none.duckdb").stat().st_size == 0  # not touched


def test_an_http_server_that_does_not_answer_is_unreachable(monkeypatch):
    import socket

    monkeypatch.setattr(mlflow_client, "require_mlflow", lambda: None)
    with socket.socket() as s:  # a port nobody listens on: bound, never listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        why = mlflow_client.unreachable(f"http://127.0.0.1:{port}")
    assert why is not None and why.startswith("cannot reach the MLflow tracking server (")


def test_a_sqlite_store_in_a_missing_folder_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(mlflow_client, "require_mlflow", lambda: None)
    why = mlflow_client.unreachable(f"sqlite:///{tmp_path}/no/such/folder/mlflow.db")
    assert why is not None and "does not exist" in why and str(tmp_path / "no/such/folder") in why
