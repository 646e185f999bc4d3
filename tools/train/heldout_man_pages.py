#!/usr/bin/env python3
"""Writes the held-out man pages of the default model's corpus: the documents of the man-pages
source (Debian's manpages and manpages-dev, 6.03-2 when the model was trained) that
build_corpus.py's split put in corpus_heldout.txt.xz (a hash of the document name), cleaned,
filtered and written as build_corpus.py writes them (each document, then a line
'<|endoftext|>'). The model never trained on these documents; held-out text for
`strata perplexity` without the rest of the corpus (build_corpus.py needs twelve documentation
packages, this only the two man-page ones).

Paragraphs are deduplicated against the man pages as build_corpus.py does; it also dropped a
held-out paragraph that repeated one of the sources before man-pages (linux-doc, python-doc, ...),
which this cannot check without those packages, so a few such paragraphs may remain.

usage: python3 tools/train/heldout_man_pages.py OUT.txt    (apt-get install manpages manpages-dev)
Plain python3 standard library only.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import build_corpus as bc  # noqa: E402


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().split("\n\n")[-2])
    name, pkgs, gen, min_words = next(s for s in bc.SOURCES if s[0] == "man-pages")
    for pkg in pkgs:
        print(f"{pkg} {bc.package_version(pkg)}", file=sys.stderr)
    seen = set()
    docs, names = [], []
    for doc_name, paras in gen():
        kept = []
        for par in paras:
            par = bc.normalise(par)
            if bc.reject_reason(par, min_words):
                continue
            key = bc.near_dup_key(par)
            if key in seen:
                continue
            seen.add(key)
            kept.append(par)
        if kept and bc.is_heldout(doc_name):
            docs.append("\n\n".join(kept))
            names.append(doc_name)
    with open(sys.argv[1], "w", encoding="utf-8") as f:
        for doc in docs:
            f.write(doc + "\n" + bc.EOT + "\n")
    raw = sum(len(d.encode()) for d in docs)
    print(f"{sys.argv[1]}: {len(docs)} held-out {name} documents, {raw} bytes: "
          + " ".join(n[len("man/"):] for n in names), file=sys.stderr)


if __name__ == "__main__":
    main()
