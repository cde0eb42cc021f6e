"""The README is the front door and the manual is the MkDocs site in docs/ (docs/testing.md,
"The documentation"): the README stays short, every link in it leads to a file that exists,
and the site builds with --strict, so a broken link or a link to a missing heading fails here
as it fails `make docs` and CI."""

import re
import subprocess
import sys

from config.embedded import BASE_DIR

README_MAX_LINES = 200


def test_the_readme_is_a_front_door_of_at_most_200_lines():
    lines = (BASE_DIR / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail to a page in docs/"


def test_every_relative_link_in_the_readme_leads_to_a_file():
    readme = (BASE_DIR / "README.md").read_text()
    targets = re.findall(r"\]\(([^)\s]+)\)", readme)
    relative = [t.split("#", 1)[0] for t in targets if "://" not in t and not t.startswith("#")]
    assert relative, "the README links to the manual's pages"
    missing = [t for t in relative if not (BASE_DIR / t).is_file()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_manual_builds_strict_and_offline(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=BASE_DIR,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1", "HOME": str(tmp_path)},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    pages = list(site.rglob("*.html"))
    assert (site / "security" / "permissions.html").is_file() and len(pages) > 30
    # No web fonts or other files fetched from elsewhere when a page is opened.
    fetched = [p.name for p in pages if re.search(r'<(?:link|script)[^>]+(?:href|src)="https?://', p.read_text())]
    assert not fetched, f"pages that load files from the internet: {fetched}"
