"""The corpora of `python -m bench answer_eval`, built by this file into .data/bench-cache/answer-eval/.

Each corpus is a folder of files uploaded as they are (their names are the documents' names):

- python_faq: the nine Python 3.11 FAQ files (Debian's python3.11-doc, via shared/eval's script);
- octave_pdf: a bounded page range of Debian octave-doc's octave.pdf (1,158 pages): the title
  and table-of-contents pages, the preface, chapters 1-2, 37 (Packages), appendix E (Installing
  Octave) and the concept index, so table-of-contents and index lines compete with the text;
- postgres_html: the tutorial chapter and a few reference pages of Debian's postgresql-doc-15;
- office: a policy DOCX, an XLSX budget, a PPTX deck with speaker notes, a "scanned" PNG
  (rendered from text with Pillow, so OCR reads it) and a CSV, generated here;
- foreign: a German travel policy and a Spanish onboarding guide (asked about in English).

Building is idempotent: a corpus folder with its `.complete` marker is kept as it is. Only
Debian's apt repositories are fetched (`apt-get download` + `dpkg-deb -x`, no root needed).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

from bench import answer_documents
from config.embedded import DATA_DIR

ROOT = DATA_DIR / "bench-cache" / "answer-eval"
DEBS = DATA_DIR / "bench-cache" / "debs"
# octave.pdf pages kept (0-based, end exclusive): title + contents, preface + chapter 1,
# chapter 2 (Getting Started), chapter 37 (Packages), appendix E (Installing), concept index.
OCTAVE_PAGES = [(0, 16), (16, 30), (30, 44), (1012, 1024), (1100, 1108), (1128, 1134)]
POSTGRES_PAGES = [
    "tutorial-arch.html",
    "tutorial-createdb.html",
    "tutorial-accessdb.html",
    "tutorial-concepts.html",
    "tutorial-table.html",
    "tutorial-populate.html",
    "tutorial-select.html",
    "tutorial-join.html",
    "tutorial-agg.html",
    "tutorial-update.html",
    "tutorial-delete.html",
    "tutorial-views.html",
    "tutorial-fk.html",
    "tutorial-transactions.html",
    "tutorial-window.html",
    "tutorial-inheritance.html",
    "app-createdb.html",
    "app-pgdump.html",
    "backup-dump.html",
    "textsearch-intro.html",
]


def _deb_tree(package: str) -> Path:
    """Debian `package` unpacked under .data/bench-cache/debs/<package>/ (downloaded once)."""
    tree = DEBS / package
    if (tree / ".complete").exists():
        return tree
    DEBS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=DEBS) as work:
        fetch = subprocess.run(["apt-get", "download", package], cwd=work, capture_output=True, text=True)
        if fetch.returncode != 0:
            subprocess.run(["apt-get", "update", "-qq"], check=True)
            subprocess.run(["apt-get", "download", package], cwd=work, check=True)
        deb = next(Path(work).glob(f"{package}_*.deb"))
        shutil.rmtree(tree, ignore_errors=True)
        subprocess.run(["dpkg-deb", "-x", str(deb), str(tree)], check=True)
    (tree / ".complete").touch()
    return tree


def _python_faq(dest: Path) -> None:
    from bench.retrieval_eval import CORPUS_DIR, _corpus

    _corpus()
    for path in sorted((CORPUS_DIR / "faq").glob("*.rst.txt")):
        shutil.copy(path, dest / f"faq__{path.name}")


def _octave_pdf(dest: Path) -> None:
    from pypdf import PdfReader, PdfWriter

    reader = PdfReader(_deb_tree("octave-doc") / "usr/share/doc/octave/octave.pdf")
    writer = PdfWriter()
    for start, end in OCTAVE_PAGES:
        for number in range(start, end):
            writer.add_page(reader.pages[number])
    with (dest / "octave.pdf").open("wb") as out:
        writer.write(out)


def _postgres_html(dest: Path) -> None:
    html = _deb_tree("postgresql-doc-15") / "usr/share/doc/postgresql-doc-15/html"
    for name in POSTGRES_PAGES:
        shutil.copy(html / name, dest / f"postgresql-{name}")


BUILDERS = {
    "python_faq": _python_faq,
    "octave_pdf": _octave_pdf,
    "postgres_html": _postgres_html,
    "office": answer_documents.office,
    "foreign": answer_documents.foreign,
}


def corpus_files(name: str) -> list[Path]:
    """The files of corpus `name`, built first if they are not there yet."""
    if name not in BUILDERS:
        raise ValueError(f"unknown corpus {name!r}; known: {', '.join(BUILDERS)}")
    folder = ROOT / name
    if not (folder / ".complete").exists():
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
        BUILDERS[name](folder)
        (folder / ".complete").touch()
    return sorted(p for p in folder.iterdir() if not p.name.startswith("."))


if __name__ == "__main__":
    for corpus in BUILDERS:
        print(corpus, [p.name for p in corpus_files(corpus)])
