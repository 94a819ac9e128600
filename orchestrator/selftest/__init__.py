"""``linksweep selftest``: the first command on a new node. Pure; the command that runs the
checks is ``orchestrator/commands/selftest.py``.

One module per job:
    plan         which checks exist, which run where and which are skipped, and why.
    plan_text    the plan as ``--dry-run`` prints it.
    verdicts     pass, fail or not run for each check, from what the checks stored.
    startup      each launcher's start-up per run, read back from the stored phases.
    fleet_facts  the selftest's fleet check read back, and its problems.

May import: nothing.
"""
