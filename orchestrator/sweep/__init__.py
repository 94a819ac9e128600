"""A sweep, from its file to its rows: what runs, in which order, with which config, and how a
sweep that runs for hours starts, stops, resumes and records each run.

One module per job:
    spec        the sweep file: one typed spec (its grid from the catalog), validated before
                anything runs; pure.
    overrides   ``--set KEY=VALUE``: the file's keys overridden before validation; pure.
    planner     spec -> the ordered runs, each carrying all it needs (config, env, timeout,
                placement); pure.
    ds_config   the DeepSpeed config of one variant; pure.
    ds_check    the sweep's DeepSpeed configs checked by DeepSpeed's own models (imports it).
    exclusions  the nodes a sweep keeps off (the file's and a fleet check's); pure.
    preflight   checks that need the cluster before any run starts.
    execute     the sweep loop: plan -> run -> rows -> store -> statistics -> progress.
    ledger      a sweep's life in the database: start or resume, commit each run, end.
    resume      what a resumed sweep still has to run; pure.
    stopping    a clean stop on SIGINT, SIGTERM and SIGHUP.
    rows        what a run produced -> table rows; pure.
    trace_rows  a traced run's rows and where its trace files are kept; pure.

May import: nothing.
"""
