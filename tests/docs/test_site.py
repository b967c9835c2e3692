"""The documentation site (mkdocs.yml, docs/): it builds in strict mode with no network, so no link or anchor
between its pages is broken; and the README, CONTRIBUTING.md and the pages refer only to files in the
repository: every relative link resolves (with its anchor), and every file or folder they name in code spans
exists. The module map in CONTRIBUTING.md names every package and root module of lakelog/platform, and
only files its packages hold. (The examples the pages show are run by tests/http/test_readme_*.py.)"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import unicodedata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CONTRIBUTING = REPO / "CONTRIBUTING.md"
WRITTEN = [REPO / "README.md", CONTRIBUTING, *sorted(DOCS.rglob("*.md"))]
# Names in code spans that are not files of the repository, and why.
NOT_IN_REPOSITORY = {
    "kafka-consumer-groups.sh": "Kafka's own tool, which lakelog's `groups` commands follow",
    "terraform.tfvars": "made by the reader from infra/terraform/terraform.tfvars.example",
    "site/": "what `make docs` builds",
}
FILE_LIKE = re.compile(r"[\w.-]+(/[\w.-]+)*/?")
SUFFIXES = (".py", ".md", ".sh", ".tf", ".json", ".tpl", ".tfvars", ".example", ".toml", ".yml", ".lock")
TOP_FOLDERS = ("lakelog/", "tests/", "docs/", "benchmarks/", "infra/", "scripts/")


def test_the_site_builds_in_strict_mode_offline(tmp_path: Path) -> None:
    dead = "http://127.0.0.1:9"  # nothing listens: any download the build tried would fail it
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "http_proxy": dead, "https_proxy": dead,
           "HTTP_PROXY": dead, "HTTPS_PROXY": dead, "no_proxy": "", "NO_PROXY": ""}
    build = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file",
                            str(REPO / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-5000:]
    assert "WARNING" not in build.stderr, build.stderr[-5000:]
    site = tmp_path / "site"
    pages = sorted(site.rglob("*.html"))
    assert (site / "index.html").exists() and (site / "guide" / "cli.html").exists()
    # Nothing a page loads comes from elsewhere (fonts, scripts, styles): it reads offline too.
    for page in pages:
        loaded = re.findall(r"<(?:link|script|img)\b[^>]*?(?:href|src)=\"(https?:)?//([^\"]+)\"", page.read_text())
        assert not loaded, (page.relative_to(site), loaded)
    # What the pages take in from the repository is there: the README's tour and API table, this
    # repository's module map, the benchmark results.
    text = {page.relative_to(site).as_posix(): page.read_text() for page in pages}
    assert "greetings" in text["index.html"]
    assert "<td>ListTransactions</td>" in text["guide/kafka.html"]
    assert "lakelog/platform/broker/" in text["contributing.html"]
    assert "Benchmark results" in text["benchmarks/results.html"]


def slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def expanded(path: Path) -> str:
    """A page's text with what it includes from the repository (pymdownx.snippets: `--8<-- "file"`, or a
    file's section between its `--8<-- [start:name]` and `[end:name]` lines) put in."""
    def include(found: re.Match[str]) -> str:
        name, _, section = found.group(1).partition(":")
        text = (REPO / name).read_text()
        if section:
            text = text.split(f"--8<-- [start:{section}]", 1)[1].split(f"--8<-- [end:{section}]", 1)[0]
        return text
    return re.sub(r'^--8<-- "([^"]+)"$', include, path.read_text(), flags=re.M)


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", expanded(path), flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} (.*?)\s*$", text, flags=re.M)}


def links(path: Path) -> list[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    return re.findall(r"\]\(([^)\s]+)\)", text)


def test_links_of_the_readme_contributing_and_the_pages_resolve() -> None:
    broken = []
    for page in WRITTEN:
        for target in links(page):
            if re.match(r"[a-z]+:", target):  # an address elsewhere: the pages refer to the repository only
                broken.append(f"{page.relative_to(REPO)}: {target} is not in the repository")
                continue
            name, _, anchor = target.partition("#")
            resolved = (page.parent / name).resolve() if name else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} does not exist")
            elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
                broken.append(f"{page.relative_to(REPO)}: {target} has no such heading")
    assert not broken, "\n".join(broken)


def test_contributing_has_no_relative_links() -> None:
    """The site includes CONTRIBUTING.md as it is (docs/contributing.md), where a link relative to the
    repository's root would not resolve: it names files in code spans, and links nothing."""
    assert links(CONTRIBUTING) == []


def named_files(text: str) -> list[str]:
    found = []
    for span in re.findall(r"`([^`\n]+)`", text):
        name = span.rstrip(",.;:")
        if FILE_LIKE.fullmatch(name) and (name.endswith(SUFFIXES) or name.startswith(TOP_FOLDERS)):
            found.append(name)
    return found


def repository_files() -> set[str]:
    """The names of the repository's files and folders (not its tools': .venv, node_modules, caches)."""
    names: set[str] = set()
    for _folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("node_modules", "__pycache__", "site")]
        names.update(dirs + files)
    return names


def exists(name: str, folders: list[Path]) -> bool:
    """A path given from the package it is about, from lakelog/, lakelog/platform/, tests/ or the repository's
    root; or a bare file name the repository holds somewhere."""
    bases = [*folders, REPO, REPO / "lakelog", REPO / "lakelog" / "platform", REPO / "tests"]
    if any((base / name).exists() for base in bases):
        return True
    return "/" not in name.rstrip("/") and name.rstrip("/") in repository_files()


def test_files_named_in_the_readme_contributing_and_the_pages_exist() -> None:
    missing = []
    for page in WRITTEN:
        for name in named_files(page.read_text()):
            if name not in NOT_IN_REPOSITORY and not exists(name, []):
                missing.append(f"{page.relative_to(REPO)}: `{name}`")
    assert not missing, "named but not in the repository:\n" + "\n".join(sorted(set(missing)))


def module_map() -> list[tuple[list[Path], str]]:
    """CONTRIBUTING.md's module map: (the folders or files a row is about, the row's text)."""
    section = CONTRIBUTING.read_text().split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = line.split(" | ")
        if line.startswith("| `") and len(cells) >= 2:
            rows.append(([REPO / p for p in re.findall(r"`([^`]+)`", cells[0])], " | ".join(cells[1:])))
    return rows


def test_the_module_map_names_what_each_package_holds() -> None:
    """Each row names files of the package it is about (or, by a path, of another), never a file that is
    not there."""
    rows = module_map()
    assert len(rows) > 15
    wrong = []
    for paths, text in rows:
        folders = [p if p.is_dir() else p.parent for p in paths]
        for name in named_files(text):
            if "/" in name.rstrip("/"):  # a path: from the row's package, lakelog/, lakelog/platform/ or the root
                held = exists(name, folders)
            else:  # a bare name: a file or folder of the row's package
                held = any((f / name).exists() or any(f.rglob(name.rstrip("/"))) for f in folders)
            if not held:
                wrong.append(f"{[p.relative_to(REPO).as_posix() for p in paths]}: `{name}`")
    assert not wrong, "the module map names files its rows' packages do not hold:\n" + "\n".join(wrong)


def test_the_module_map_covers_the_platform() -> None:
    """Every package of lakelog/ and of lakelog/platform/ has a row, and every root module of
    lakelog/platform/ is named in the platform's row."""
    rows = module_map()
    covered = {p for paths, _ in rows for p in paths}
    platform = REPO / "lakelog" / "platform"
    packages = [p for p in [*(REPO / "lakelog").iterdir(), *platform.iterdir()]
                if (p / "__init__.py").exists() and p != platform]
    assert sorted(p.relative_to(REPO).as_posix() for p in packages if p not in covered) == []
    root_row = next(text for paths, text in rows if platform in paths)
    root_modules = sorted(p.name for p in platform.glob("*.py"))
    assert [m for m in root_modules if f"`{m}`" not in root_row] == []
