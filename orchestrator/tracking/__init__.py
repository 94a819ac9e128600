"""Results in an experiment tracker (MLflow).

One module per job:
    mlflow_log  the ``--mlflow`` option of ``run``, its check, the observer that logs runs.

May import: nothing (the standard library only).
"""
