"""The README is a user's page and the rest lives in docs/, built by mkdocs (Stage 12):
the README's length, its Quick start (what .ci/run runs), its links, and a strict build
of the site."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def test_the_readme_is_a_page_not_a_manual():
    assert len(README.splitlines()) <= 250


def test_the_quick_start_is_two_commands_and_ci_runs_the_second():
    section = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    commands = [line for line in block.group(1).splitlines() if line.strip()]
    assert len(commands) == 2 and commands[0].endswith("seqlower demo"), commands
    ci = (ROOT / ".ci" / "run").read_text()
    assert "set -euo pipefail" in ci
    assert commands[1] in ci, (commands[1], ci)


def test_every_page_the_readme_links_exists_and_is_in_the_site():
    links = set(re.findall(r"\]\((docs/[^)#]+)", README))
    assert links, "the README points to no page"
    nav = (ROOT / "mkdocs.yml").read_text()
    for link in links:
        assert (ROOT / link).is_file(), link
        assert Path(link).name in nav, f"{link} is not in mkdocs.yml's nav"


def test_the_site_builds_strictly(tmp_path):
    # (strict: a broken link, a page outside the nav or a bad fence fails the build)
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                           "-d", str(tmp_path / "site")], capture_output=True, text=True,
                          env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "site" / "targets" / "index.html").is_file()
