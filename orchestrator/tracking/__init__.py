"""Results in an experiment tracker (MLflow, an optional extra: ``pip install
'linksweep[mlflow]'``). One MLflow run per sweep, one nested run per linksweep run; what lands
where: docs/mlflow.md.

One module per job:
    mlflow_log     ``run --mlflow``'s option, its check and its observer; ``export --mlflow``;
                   both through one sync (the database read, MLflow brought up to it).
    records        pure: a sweep's rows -> each MLflow run's parameters, metrics, tags; what
                   MLflow lacks of them.
    mlflow_client  the MLflow calls (mlflow imported here only, lazily): find, create, log.

May import: nothing (the standard library only).
"""
