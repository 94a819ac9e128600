"""Results set side by side: two sweeps (``linksweep compare``: a verdict and an exit code a CI
can use), their environments, and other people's nccl-tests figures brought in as rows
(``linksweep import nccl-tests``). Pure: facts in, verdicts and rows out.

One module per job:
    comparison      two sweeps compared: what got slower beyond the noise.
    table           a comparison as a terminal table or markdown.
    fingerprint     a sweep's environment, and what differs between two.
    nccltests       nccl-tests text output -> rows; the format and its rules.
    nccltests_json  nccl-tests ``-J`` JSON output -> rows.

May import: nothing.
"""
