"""The offline bundle (``scripts/bundle``, docs/offline-bundle.md) as an air-gapped node meets it.

The pure pieces first, in milliseconds: platform tags, ``--have`` lines, the stand-ins for what
the target has, the split of pip's report, parts written and joined, the installer's version
check, and how a venv made by a venv's Python sees that venv. The end-to-end test (build,
split, move, install offline, selftest --dry-run) is a check outside the suite,
``tests/checks/test_bundle.py`` (``scripts/checks.sh bundle``): on a fresh machine it downloads
the image's and the bundle's wheels, which the suite must not do every time.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))

from bundle.install import (  # noqa: E402
    PARENT_PTH,
    _see_parent_venv,
    compare_versions,
    parent_pth,
    part_problems,
    unpack,
)
from bundle.target import (  # noqa: E402
    BadInput,
    expand_platforms,
    is_stand_in,
    parse_have,
    stand_in_version,
)

from bundle import build, parts  # noqa: E402

# --- pure pieces ------------------------------------------------------------------------------


def test_a_manylinux_tag_admits_every_older_manylinux_wheel():
    tags = expand_platforms(["manylinux_2_28_x86_64"])
    assert tags[0] == "manylinux_2_28_x86_64"
    for older in ("manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64"):
        assert older in tags
    assert "manylinux_2_29_x86_64" not in tags
    assert expand_platforms(["manylinux2014_aarch64"])[0] == "manylinux_2_17_aarch64"
    assert expand_platforms([]) == expand_platforms(["manylinux_2_28_x86_64"])


def test_tags_of_two_architectures_are_refused_with_both_named():
    with pytest.raises(BadInput, match="aarch64, x86_64"):
        expand_platforms(["manylinux_2_28_x86_64", "manylinux_2_28_aarch64"])


def test_have_lines_are_read_as_pip_list_prints_them_and_a_url_line_is_named():
    lines = ["# the node", "Torch==2.11.0+cu130", "", "typing_extensions==4.15.0  # pinned"]
    assert parse_have(lines, "have.txt") == {
        "torch": "2.11.0+cu130",
        "typing-extensions": "4.15.0",
    }
    with pytest.raises(BadInput, match=r"have.txt line 2: .*pip list --format=freeze"):
        parse_have(["numpy==2.0.0", "torch @ file:///croot/torch"], "have.txt")
    with pytest.raises(BadInput, match="torch given twice"):
        parse_have(["torch==2.11.0", "torch==2.12.0"], "have.txt")


def test_a_stand_in_is_the_targets_version_marked_as_ours():
    assert stand_in_version("2.11.0") == "2.11.0+have"
    assert stand_in_version("2.13.0+cpu") == "2.13.0+cpu.have"
    have = {"torch": "2.13.0+cpu"}
    assert is_stand_in("Torch", "2.13.0+cpu.have", have)
    assert not is_stand_in("torch", "2.13.0+cpu", have)  # the real wheel of a find-links folder
    assert not is_stand_in("numpy", "2.0.0+have", have)


def _item(name, version, url, sha=None):
    info = {"url": url} | ({"archive_info": {"hashes": {"sha256": sha}}} if sha else {})
    return {"metadata": {"name": name, "version": version}, "download_info": info}


def test_the_report_splits_into_wheels_to_ship_and_what_the_target_has():
    report = {
        "install": [
            _item("torch", "2.11.0+have", "file:///w/have/torch-2.11.0%2Bhave-py3-none-any.whl"),
            _item(
                "Ray", "2.60.0", "https://x/ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl", "ab"
            ),
            _item("linksweep", "0.1.0", "file:///w/own/linksweep-0.1.0-py3-none-any.whl"),
        ]
    }
    ship, left_out = build.split_report(
        report, {"torch": "2.11.0"}, {"linksweep-0.1.0-py3-none-any.whl"}
    )
    assert left_out == [{"name": "torch", "version": "2.11.0", "reason": "the target has it"}]
    assert [(w["name"], w["own"], w["sha256"]) for w in ship] == [
        ("linksweep", True, None),
        ("ray", False, "ab"),
    ]
    assert ship[1]["file"] == "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"


def test_parts_hold_the_exact_bytes_and_a_damaged_or_missing_part_is_named(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    files = {}
    for name, size in (("a-1.0-py3-none-any.whl", 2500), ("b-2.0-py3-none-any.whl", 3100)):
        (src / name).write_bytes(os.urandom(size))
        files[name] = src / name
    out = tmp_path / "out"
    out.mkdir()
    written = parts.write_parts(files, out, 1000)
    assert len(written) >= 6 and all(p["bytes"] <= 1000 for p in written)
    assert part_problems(out, written) == []
    got = unpack(out, written, tmp_path / "wheels")
    assert {p.name: p.read_bytes() for p in got} == {n: p.read_bytes() for n, p in files.items()}

    second = out / written[1]["file"]
    data = bytearray(second.read_bytes())
    data[10] ^= 1
    second.write_bytes(bytes(data))
    (out / written[2]["file"]).unlink()
    assert part_problems(out, written) == [
        f"{written[1]['file']}: sha256 differs from the manifest's",
        f"{written[2]['file']}: missing",
    ]


def test_an_out_folder_holding_other_files_is_refused_and_an_old_bundle_cleared(tmp_path):
    for name in ("manifest.json", "linksweep-bundle.tar.001", "install-bundle.sh"):
        (tmp_path / name).write_text("old")
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "a-1.0-py3-none-any.whl").write_text("old")
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="notes.txt"):
        parts.clear_old_bundle(tmp_path, parts.bundle_names())
    assert (tmp_path / "manifest.json").exists()  # nothing removed when refused
    (tmp_path / "notes.txt").unlink()
    parts.clear_old_bundle(tmp_path, parts.bundle_names())
    assert list(tmp_path.iterdir()) == []


def test_versions_after_install_tell_installed_kept_and_missing():
    manifest = {
        "wheels": [{"name": "a", "version": "1.0"}, {"name": "B_c", "version": "2.0"}],
        "left_out": [{"name": "torch", "version": "2.11.0", "reason": "the target has it"}],
    }
    seen = {"a": "1.0", "b-c": "1.5", "torch": "2.11.0"}
    assert compare_versions(manifest, seen) == ([("a", "1.0")], [("B_c", "1.5", "2.0")], [])
    _, _, problems = compare_versions(manifest, {"b-c": "2.0"})
    assert problems[0] == "a 1.0: not installed"
    assert "--system-site-packages" in problems[1]


# --- end to end -------------------------------------------------------------------------------


def test_a_venv_made_by_a_venvs_python_lists_that_venvs_folders_after_its_own():
    assert parent_pth(False, ["/usr/lib/python3/dist-packages"], ["/v/lib/site-packages"]) == ""
    text = parent_pth(True, ["/opt/torch/.venv/lib/site-packages", "/v/s"], ["/v/s"])
    assert text == "/opt/torch/.venv/lib/site-packages\n"


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs a venv's Python to run under")
def test_a_venv_made_by_a_venvs_python_sees_that_venvs_packages(tmp_path):
    """The GPU image's python3 is /opt/torch/.venv/bin/python3: --system-site-packages alone
    reaches the base interpreter's folders, not that venv's torch. duckdb is in this checkout's
    venv only, as torch is in the image's."""
    new = tmp_path / "v"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(new)],
        check=True,
    )
    python = str(new / "bin" / "python")
    _see_parent_venv(sys.executable, python, dict(os.environ))
    assert list(new.glob(f"lib/python*/site-packages/{PARENT_PTH}"))
    where = subprocess.run(
        [python, "-c", "import duckdb, sys; print(duckdb.__file__, sys.prefix)"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert where[0].startswith(sys.prefix) and where[1] == str(new), where
