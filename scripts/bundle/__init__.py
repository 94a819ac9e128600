"""The offline bundle: linksweep and every package it needs that a target node lacks, as wheels
packed into parts small enough for the node's copy step, with a manifest and an installer.

``python scripts/bundle --python 3.12 --have-file have.txt --out DIR`` builds it on a machine that
reaches the package index (docs/offline-bundle.md is the procedure). The modules, one job each:

    target.py   what the node is and has (pure: tags, ``--have`` lines, stand-in versions)
    build.py    pip's side: linksweep's wheel, sdists built here, the resolution, the download
    parts.py    the wheels into one tar split into parts, and the manifest (sha256 per part)
    install.py  the node's side, standard library only: reassemble, verify, install, check
    cli.py      the command line that strings them together

May import: packaging (build side only; install.py imports the standard library alone).
"""
