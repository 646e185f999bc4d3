#!/usr/bin/env python3
"""Builds the English training corpus for strata's default model from Debian documentation
packages installed on this machine (apt-get install them first; they are not project
dependencies):

  linux-doc-6.1 python3.11-doc perl-doc debian-reference-en fortunes fortunes-min
  manpages manpages-dev postgresql-doc-15 git-doc sqlite3-doc apache2-doc

Markup is cleaned (corpus_clean.py), paragraphs are normalised, filtered (too short, not
English, mostly symbols or code) and deduplicated (exact and near-exact: a hash of the
lower-cased letters-only text), documents are split 99/1 into train / held-out by a hash of
their name, and each document is written followed by a line '<|endoftext|>'.

usage: python3 tools/train/build_corpus.py [--out .dev/train] [--max-train-mb 120]
Writes OUT/corpus_train.txt.xz, OUT/corpus_heldout.txt.xz, OUT/corpus_stats.json and
tools/train/LICENSES.md. Plain python3 standard library only.
"""
import argparse
import gzip
import hashlib
import json
import lzma
import os
import re
import subprocess
import sys
import unicodedata

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import corpus_clean as cc  # noqa: E402

EOT = "<|endoftext|>"
HERE = os.path.dirname(os.path.abspath(__file__))

STOPWORDS = set("""a an the of and or to in on at by for with from as is are was were be been
being it its this that these those not no can may will would should must if then than but so
which who what when where how there their they them he she his her we you your our i do does
did has have had into over under about also only more most such all any each other some one
two use used using see""".split())


def package_files(pkg):
    out = subprocess.run(["dpkg", "-L", pkg], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"build_corpus: package {pkg} is not installed (apt-get install {pkg})")
    # symbolic links are aliases (e.g. man pages of several functions): read each file once
    return sorted(p for p in out.stdout.split("\n")
                  if p and os.path.isfile(p) and not os.path.islink(p))


def read_text(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    return data.decode("utf-8", errors="replace")


# Each source: name, Debian package(s), file filter, cleaner, and how documents are formed.
def linux_docs():
    for p in package_files("linux-doc-6.1"):
        if "/Documentation/" not in p or "/translations/" in p:
            continue
        rel = p.split("/Documentation/", 1)[1]
        if rel.startswith(("ABI/", "features/", "devicetree/bindings/", "sphinx", "output/")):
            continue
        if not (p.endswith(".rst.gz") or p.endswith(".txt.gz") or p.endswith(".rst")):
            continue
        yield "linux-doc/" + rel, cc.rst_paragraphs(read_text(p))


def python_docs():
    for p in package_files("python3.11-doc"):
        if "/_sources/" not in p or not p.endswith(".rst.txt"):
            continue
        rel = p.split("/_sources/", 1)[1]
        if rel.startswith("whatsnew/changelog"):
            continue  # thousands of one-line issue entries
        yield "python-doc/" + rel, cc.rst_paragraphs(read_text(p))


def perl_docs():
    for p in package_files("perl-doc"):
        if p.endswith(".pod"):
            yield "perl-doc/" + os.path.basename(p), cc.pod_paragraphs(read_text(p))


def debian_reference():
    for p in package_files("debian-reference-en"):
        if p.endswith(".en.html"):
            yield "debian-reference/" + os.path.basename(p), cc.html_paragraphs(read_text(p))


def postgresql_docs():
    for p in package_files("postgresql-doc-15"):
        if p.endswith(".html") and "/html/" in p:
            yield "postgresql-doc/" + os.path.basename(p), cc.html_paragraphs(read_text(p))


def git_docs():
    for p in package_files("git-doc"):
        if p.endswith(".txt") and "/RelNotes" not in p and "/howto/" not in p:
            yield "git-doc/" + os.path.basename(p), cc.asciidoc_paragraphs(read_text(p))
        elif p.endswith(".txt") and "/howto/" in p:
            yield "git-doc/howto/" + os.path.basename(p), cc.asciidoc_paragraphs(read_text(p))


def sqlite_docs():
    skip = ("changes.html", "chronology.html", "sitemap.html", "keyword_index.html",
            "doclist.html", "docsapp.html")
    for p in package_files("sqlite3-doc"):
        if p.endswith(".html") and "/syntax/" not in p and "/releaselog/" not in p and \
                os.path.basename(p) not in skip:
            yield "sqlite-doc/" + p.split("/doc/sqlite3/", 1)[-1], \
                cc.html_paragraphs(read_text(p))


def apache_docs():
    for p in package_files("apache2-doc"):
        if "/manual/en/" in p and p.endswith(".html"):
            yield "apache-doc/" + p.split("/manual/en/", 1)[1], cc.html_paragraphs(read_text(p))


def man_pages():
    for pkg in ("manpages", "manpages-dev"):
        for p in package_files(pkg):
            if re.search(r"/usr/share/man/man\d/[^/]+\.gz$", p):
                yield "man/" + os.path.basename(p)[:-3], cc.man_paragraphs(read_text(p))


FORTUNES_PER_DOC = 24


def fortunes():
    for pkg in ("fortunes-min", "fortunes"):
        for p in package_files(pkg):
            if "/games/fortunes/" not in p or p.endswith((".dat", ".u8")):
                continue
            entries = cc.fortune_entries(read_text(p))
            name = os.path.basename(p)
            for k in range(0, len(entries), FORTUNES_PER_DOC):
                yield f"fortunes/{name}/{k // FORTUNES_PER_DOC}", entries[k:k + FORTUNES_PER_DOC]


SOURCES = [
    # name, packages, generator, minimum words per paragraph
    ("linux-doc", ["linux-doc-6.1"], linux_docs, 8),
    ("python-doc", ["python3.11-doc"], python_docs, 8),
    ("perl-doc", ["perl-doc"], perl_docs, 8),
    ("debian-reference", ["debian-reference-en"], debian_reference, 8),
    ("postgresql-doc", ["postgresql-doc-15"], postgresql_docs, 8),
    ("git-doc", ["git-doc"], git_docs, 8),
    ("sqlite-doc", ["sqlite3-doc"], sqlite_docs, 8),
    ("apache-doc", ["apache2-doc"], apache_docs, 8),
    ("man-pages", ["manpages", "manpages-dev"], man_pages, 8),
    ("fortunes", ["fortunes-min", "fortunes"], fortunes, 4),
]

# ---------------------------------------------------------------------------------------------
# paragraph normalisation and filters

CODE_LINE = re.compile(r"(;\s*$|[{}]\s*$|^\s*#\s*(include|define|if|endif)\b|^\s*(\$|>>>|#|%) |"
                       r"^\s*(def|class|return|import|my|sub|use|int|void|struct|static)\b.*[(;:{=]|"
                       r"==|!=|->|::|&&|\|\||\w\[\w*\]|\w\(\)\s*[;{])")


def normalise(par):
    par = unicodedata.normalize("NFC", par)
    par = par.replace(EOT, " ").replace("\u00a0", " ").replace("\t", " ")
    par = "".join(ch for ch in par if ch == "\n" or unicodedata.category(ch)[0] != "C")
    lines = [" ".join(ln.split()) for ln in par.split("\n")]
    return "\n".join(ln for ln in lines if ln)


def reject_reason(par, min_words):
    words = par.split()
    if len(words) < min_words or len(par) < 4 * min_words:
        return "short"
    letters = sum(ch.isalpha() for ch in par)
    visible = sum(not ch.isspace() for ch in par)
    if letters < 0.72 * visible:
        return "symbols"
    ascii_letters = sum(("a" <= ch <= "z") or ("A" <= ch <= "Z") for ch in par)
    if ascii_letters < 0.97 * letters:
        return "non-english"
    lower = [w.strip(".,;:!?()\"'`").lower() for w in words]
    stop = sum(w in STOPWORDS for w in lower)
    if stop < 0.12 * len(words) or stop < 2:
        return "non-english"
    lines = par.split("\n")
    if sum(bool(CODE_LINE.search(ln)) for ln in lines) > 0.34 * len(lines) and len(lines) > 1:
        return "code"
    code_tokens = sum(bool(re.search(r"[_$@%{}<>=\\]|\w\.\w+\(|\(\)", w)) for w in words)
    if code_tokens > 0.25 * len(words):
        return "code"
    if max(len(w) for w in words) > 80:
        return "symbols"
    return None


def near_dup_key(par):
    letters = re.sub(r"[^a-z]+", " ", par.lower()).split()
    return hashlib.sha1(" ".join(letters).encode()).digest()[:12]


def is_heldout(doc_name):
    return int(hashlib.sha1(doc_name.encode()).hexdigest(), 16) % 100 == 0


# ---------------------------------------------------------------------------------------------
# licences

LICENCE_SUMMARY = {
    "linux-doc-6.1": "GPL-2 (the kernel's documentation; some files dual-licensed GPL-2 or "
                     "BSD/MIT-style, as marked by their SPDX lines)",
    "python3.11-doc": "PSF License Agreement for Python 3.11 (documentation text); code "
                      "examples under the Zero-Clause BSD licence",
    "perl-doc": "GPL-1+ or Artistic (Perl's own terms), a few files under other free licences",
    "debian-reference-en": "GPL-2+",
    "postgresql-doc-15": "PostgreSQL Licence (BSD/MIT-like)",
    "git-doc": "GPL-2 (Git's documentation), a few files GPL-2+/LGPL-2.1+/Expat",
    "sqlite3-doc": "public domain (SQLite's documentation)",
    "apache2-doc": "Apache-2.0 (the Apache HTTP Server manual)",
    "manpages": "mixed free licences per page (Linux-man-pages-copyleft, GPL-2+, BSD, Expat, "
                "...), as listed in the copyright file",
    "manpages-dev": "same copyright file as manpages",
    "fortunes-min": "BSD (fortune-mod); the quotations are short excerpts of many authors",
    "fortunes": "BSD (fortune-mod); the quotations are short excerpts of many authors",
}


def package_version(pkg):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                         text=True)
    return out.stdout.strip() or "?"


def licence_names(pkg):
    path = f"/usr/share/doc/{pkg}/copyright"
    try:
        text = open(path, encoding="utf-8", errors="replace").read()
    except OSError:
        return []
    names = []
    for m in re.finditer(r"^License:[ \t]*(\S.*)$", text, re.M):
        name = m.group(1).strip()
        if len(name) <= 60 and len(name.split()) <= 8 and name[:1].isupper() and \
                not name.endswith((".", ",")) and name not in names and \
                not re.search(r"\b(this|the|software|its|by)\b", name):
            names.append(name)
    return names


def write_licences(path, stats):
    lines = [
        "# Licences of the training corpus of strata's default model",
        "",
        "Generated by `tools/train/build_corpus.py` from the Debian packages' "
        "`/usr/share/doc/<package>/copyright` files. The corpus itself is not committed; the",
        "model in `models/default/` is trained on it. Only the packages' own documentation "
        "text is used (cleaned of markup, code and tables; deduplicated).",
        "",
        "| source | Debian package (version) | licence (summary) | paragraphs | MB |",
        "|---|---|---|---|---|",
    ]
    for name, pkgs, _, _ in SOURCES:
        s = stats["sources"][name]
        pk = ", ".join(f"`{p}` ({package_version(p)})" for p in pkgs)
        lic = "; ".join(LICENCE_SUMMARY[p] for p in pkgs if p in LICENCE_SUMMARY and
                        (p == pkgs[0] or LICENCE_SUMMARY[p] != LICENCE_SUMMARY[pkgs[0]]))
        lines.append(f"| {name} | {pk} | {lic} | {s['paragraphs']} | "
                     f"{s['bytes'] / 1e6:.1f} |")
    lines += ["", "## `License:` fields of each copyright file", ""]
    for _, pkgs, _, _ in SOURCES:
        for p in pkgs:
            names = licence_names(p)
            shown = ", ".join(f"`{n}`" for n in names[:25]) or \
                "(no machine-readable `License:` fields; see the summary above)"
            more = f" and {len(names) - 25} more" if len(names) > 25 else ""
            lines.append(f"- `{p}`: {shown}{more}")
    lines.append("")
    with open(path, "w") as f:
        f.write("\n".join(lines))


# ---------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "..", ".dev", "train"))
    ap.add_argument("--max-train-mb", type=float, default=120.0)
    ap.add_argument("--licences", default=os.path.join(HERE, "LICENSES.md"))
    ap.add_argument("--sample", default="", help="also write a plain-text sample here")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    seen = set()
    stats = {"sources": {}, "rejected": {}}
    train_docs, heldout_docs = [], []
    for name, pkgs, gen, min_words in SOURCES:
        s = {"documents": 0, "paragraphs": 0, "bytes": 0, "words": 0, "heldout_bytes": 0,
             "duplicates": 0}
        for doc_name, paras in gen():
            kept = []
            for par in paras:
                par = normalise(par)
                why = reject_reason(par, min_words)
                if why:
                    stats["rejected"][why] = stats["rejected"].get(why, 0) + 1
                    continue
                key = near_dup_key(par)
                if key in seen:
                    s["duplicates"] += 1
                    continue
                seen.add(key)
                kept.append(par)
            if not kept:
                continue
            doc = "\n\n".join(kept)
            nbytes = len(doc.encode())
            s["documents"] += 1
            s["paragraphs"] += len(kept)
            s["bytes"] += nbytes
            s["words"] += len(doc.split())
            if is_heldout(doc_name):
                s["heldout_bytes"] += nbytes
                heldout_docs.append(doc)
            else:
                train_docs.append((hashlib.sha1(doc_name.encode()).digest(), doc))
        s["approx_tokens"] = int(s["bytes"] / 4.2)
        stats["sources"][name] = s
        print(f"{name:18s} {s['documents']:6d} docs {s['paragraphs']:7d} paragraphs "
              f"{s['bytes'] / 1e6:7.2f} MB (held-out {s['heldout_bytes'] / 1e6:.2f} MB) "
              f"~{s['approx_tokens'] / 1e6:.2f}M tokens, {s['duplicates']} duplicates",
              flush=True)
    print("rejected paragraphs:", stats["rejected"])

    # a deterministic shuffle, so that a cap cuts every source alike
    train_docs = [doc for _, doc in sorted(train_docs)]
    cap = int(args.max_train_mb * 1e6)
    total = 0
    capped = []
    for doc in train_docs:
        total += len(doc.encode()) + len(EOT) + 2
        if total > cap:
            break
        capped.append(doc)
    if len(capped) < len(train_docs):
        print(f"train text capped at {args.max_train_mb} MB: {len(capped)} of "
              f"{len(train_docs)} documents")
    for split, docs in (("train", capped), ("heldout", heldout_docs)):
        path = os.path.join(args.out, f"corpus_{split}.txt.xz")
        with lzma.open(path, "wt", encoding="utf-8", preset=2) as f:
            for doc in docs:
                f.write(doc)
                f.write("\n" + EOT + "\n")
        raw = sum(len(d.encode()) for d in docs)
        stats[split] = {"documents": len(docs), "raw_bytes": raw,
                        "xz_bytes": os.path.getsize(path)}
        print(f"{path}: {len(docs)} documents, {raw / 1e6:.1f} MB raw, "
              f"{os.path.getsize(path) / 1e6:.1f} MB xz")
    if args.sample:
        with open(args.sample, "w") as f:
            for doc in capped[::max(1, len(capped) // 200)]:
                f.write(doc[:3000] + "\n" + EOT + "\n")
    with open(os.path.join(args.out, "corpus_stats.json"), "w") as f:
        json.dump(stats, f, indent=1)
    write_licences(args.licences, stats)
    print("wrote", args.licences)


if __name__ == "__main__":
    main()
