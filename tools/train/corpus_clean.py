"""Markup cleaners for build_corpus.py: each turns one source document into a list of prose
paragraphs (plain text; list items keep one line each). Code, tables, directives and navigation
are dropped, not converted. Plain python3 standard library only.
"""
import html
import html.parser
import re

# ---------------------------------------------------------------------------------------------
# reStructuredText (kernel and Python docs) and plain text with RST-ish conventions

# Directives whose body is prose worth keeping (the directive line itself is dropped).
RST_PROSE_DIRECTIVES = {
    "note", "warning", "attention", "caution", "danger", "error", "hint", "important", "tip",
    "admonition", "seealso", "versionadded", "versionchanged", "deprecated", "topic", "sidebar",
    "rubric", "function", "method", "class", "attribute", "data", "exception", "decorator",
    "module", "describe", "option", "envvar", "c:function", "c:macro", "c:type", "c:member",
    "c:var", "c:struct", "opcode", "cmdoption", "abstractmethod", "classmethod", "staticmethod",
    "coroutinefunction", "coroutinemethod", "decoratormethod", "index", "impl-detail",
    "availability", "audit-event",
}
SECTION_CHARS = set("=-~^\"'`*+#:.<>_")
RST_ROLE = re.compile(r":(?:[\w.+-]+:)*[\w.+-]+:`([^`]*)`")
RST_LINK = re.compile(r"`([^`<]*?)\s*<[^`>]*>`_{1,2}")
RST_REF = re.compile(r"`([^`]+)`_{1,2}")
RST_LITERAL = re.compile(r"``(.+?)``")
RST_INTERP = re.compile(r"`([^`]+)`")
RST_EMPH = re.compile(r"(?<![\w*])\*{1,2}([^*\s][^*]*?)\*{1,2}(?![\w*])")
RST_FOOTREF = re.compile(r"\s?\[(?:#\w*|\*|\d+)\]_")
RST_SUBST = re.compile(r"\|(\w[\w -]*)\|")
BULLET = re.compile(r"^\s*(?:[-*+\u2022]|#\.|\d+[.)]|\(\d+\)|[a-zA-Z][.)])\s+")
SIMPLE_TABLE_BORDER = re.compile(r"^\s*=+(?:\s+=+)+\s*$")
GRID_LINE = re.compile(r"^\s*[+|].*[+|]\s*$")


def rst_inline(text):
    text = RST_LINK.sub(r"\1", text)
    # :ref:`title <label>` keeps the title, :func:`~mod.f` keeps f
    text = RST_ROLE.sub(lambda m: _role_text(m.group(1)), text)
    text = RST_LITERAL.sub(r"\1", text)
    text = RST_REF.sub(r"\1", text)
    text = RST_INTERP.sub(r"\1", text)
    text = RST_EMPH.sub(r"\1", text)
    text = RST_FOOTREF.sub("", text)
    text = RST_SUBST.sub(r"\1", text)
    return text.replace("\\ ", "").replace("\\*", "*")


def _role_text(inner):
    m = re.match(r"(.*?)\s*<[^<>]*>$", inner, re.S)
    if m and m.group(1).strip():
        return m.group(1).strip()
    inner = inner.lstrip("~!")
    if inner.startswith("~"):
        inner = inner[1:]
    return inner


def _is_section_line(line):
    s = line.strip()
    return len(s) >= 3 and len(set(s)) == 1 and s[0] in SECTION_CHARS


def _indent(line):
    return len(line) - len(line.lstrip(" \t"))


def rst_paragraphs(text):
    """RST (or RST-like plain text) to paragraphs: drops directives other than admonitions and
    object descriptions, literal blocks (after '::'), tables, comments, field lists, headings."""
    lines = text.expandtabs(8).split("\n")
    out_blocks = []  # list of list-of-lines
    cur = []
    i = 0
    n = len(lines)

    def flush():
        if cur:
            out_blocks.append(list(cur))
            cur.clear()

    def skip_indented(start, base_indent):
        # skips lines indented deeper than base_indent (and blank lines inside the block)
        j = start
        while j < n:
            if lines[j].strip() == "":
                j += 1
                continue
            if _indent(lines[j]) > base_indent:
                j += 1
                continue
            break
        return j

    literal_next = False
    while i < n:
        line = lines[i]
        stripped = line.strip()
        if stripped == "":
            flush()
            i += 1
            continue
        ind = _indent(line)
        if literal_next:
            literal_next = False
            # the paragraph before ended in '::': an indented block here is code
            if ind > 0 or (cur == [] and i > 0):
                j = skip_indented(i, ind - 1 if ind > 0 else -1)
                if ind > 0:
                    i = j
                    continue
        # headings: an underline (and optional overline) of punctuation
        if _is_section_line(line) and (not cur or len(cur) == 1):
            cur.clear()
            i += 1
            continue
        if i + 1 < n and _is_section_line(lines[i + 1]) and not cur and \
                len(lines[i + 1].strip()) >= len(stripped) - 2:
            i += 2
            continue
        # tables
        if SIMPLE_TABLE_BORDER.match(line) or (GRID_LINE.match(line) and stripped.startswith("+")):
            flush()
            j = i + 1
            borders = 1
            while j < n:
                if SIMPLE_TABLE_BORDER.match(lines[j]) or GRID_LINE.match(lines[j]):
                    if SIMPLE_TABLE_BORDER.match(lines[j]):
                        borders += 1
                    j += 1
                    if borders >= 3 and (j >= n or lines[j].strip() == ""):
                        break
                    continue
                if lines[j].strip() == "" and borders >= 2 and (
                        j + 1 >= n or not (SIMPLE_TABLE_BORDER.match(lines[j + 1]) or
                                           GRID_LINE.match(lines[j + 1]))):
                    # a simple table with no closing border yet: keep scanning a little
                    if borders >= 3:
                        break
                j += 1
                if j - i > 400:
                    break
            i = j
            continue
        # directives and comments
        if stripped.startswith(".."):
            flush()
            m = re.match(r"\.\.\s+([\w:.-]+)::\s*(.*)$", stripped)
            if m and m.group(1).lower() in RST_PROSE_DIRECTIVES:
                # keep the body: skip the directive line and its option lines
                i += 1
                while i < n and re.match(r"^\s+:[\w -]+:", lines[i]):
                    i += 1
                continue
            i = skip_indented(i + 1, ind)
            continue
        # field lists ':Author: x'
        if re.match(r"^:[\w -]+:(\s|$)", stripped):
            flush()
            i = skip_indented(i + 1, ind)
            continue
        if stripped == "::":
            flush()
            literal_next = True
            i += 1
            continue
        if BULLET.match(line) and cur:
            cur.append("\n" + stripped)
        else:
            cur.append(stripped)
        if stripped.endswith("::"):
            cur[-1] = cur[-1][:-1]
            flush()
            literal_next = True
        i += 1
    flush()
    paras = []
    for block in out_blocks:
        joined = " ".join(block).replace(" \n", "\n")
        paras.append(rst_inline(joined))
    return paras


# ---------------------------------------------------------------------------------------------
# asciidoc (git-doc)

def asciidoc_paragraphs(text):
    lines = text.split("\n")
    kept = []
    in_block = None
    for line in lines:
        s = line.rstrip()
        if in_block:
            if s == in_block:
                in_block = None
            continue
        if re.match(r"^(-{4,}|\.{4,}|\+{4,}|/{4,}|_{4,}|={4,}|\*{4,})$", s) and \
                not (kept and kept[-1].strip() and len(s) >= len(kept[-1].strip()) - 2 and
                     s[0] in "-=~^+"):
            in_block = s
            continue
        if re.match(r"^(include|image|ifdef|ifndef|endif|ifeval)::", s) or \
                re.match(r"^\[[^\]]*\]$", s) or re.match(r"^:[\w-]+:", s) or s.startswith("//"):
            continue
        if re.match(r"^=+\s", s):  # '== Title'
            kept.append("")
            continue
        kept.append(line)
    text = "\n".join(kept)
    text = re.sub(r"linkgit:([\w.-]+)\[\d\]", r"\1", text)
    text = re.sub(r"(?:link|https?|mailto):\S+?\[([^\]]*)\]", r"\1", text)
    text = re.sub(r"<<[^,>]*,([^>]*)>>", r"\1", text)
    text = re.sub(r"<<([^>]*)>>", r"\1", text)
    text = re.sub(r"\{[\w-]+\}", "", text)
    text = re.sub(r"(?<!\w)[`'_*+]{1,2}([^`'_*+\n]+?)[`'_*+]{1,2}(?!\w)", r"\1", text)
    # definition lists 'term::' with an indented or following description
    text = re.sub(r"^(.+?)::\s*$", r"\1:", text, flags=re.M)
    return rst_paragraphs(text)


# ---------------------------------------------------------------------------------------------
# Perl POD

POD_SIMPLE = re.compile(r"([A-Z])<([^<>]*)>")
POD_MULTI = re.compile(r"([A-Z])<(<+)\s+(.*?)\s+>\2>", re.S)
POD_ESCAPES = {"lt": "<", "gt": ">", "verbar": "|", "sol": "/", "quot": "\"", "amp": "&",
               "apos": "'", "nbsp": " "}


def _pod_code(letter, body):
    if letter in "XZ":
        return ""
    if letter == "E":
        if body.isdigit():
            return chr(int(body))
        if body.startswith("0x"):
            return chr(int(body, 16))
        return POD_ESCAPES.get(body, html.unescape("&" + body + ";"))
    if letter == "L":
        if "|" in body:
            return body.split("|", 1)[0]
        if re.match(r"\w+://", body):
            return body
        m = re.match(r'(.*?)/"?(.*?)"?$', body)
        if m:
            name, sec = m.group(1), m.group(2)
            if sec and name:
                return f'"{sec}" in {name}'
            return sec or name
        return body
    return body  # B I C F S


def pod_inline(text):
    text = POD_MULTI.sub(lambda m: _pod_code(m.group(1), m.group(3)), text)
    for _ in range(6):
        new = POD_SIMPLE.sub(lambda m: _pod_code(m.group(1), m.group(2)), text)
        if new == text:
            break
        text = new
    return text


def pod_paragraphs(text):
    paras = []
    in_pod = True  # .pod files start in POD; .pm files would need '=pod'
    skip_region = False
    for block in re.split(r"\n\s*\n", text):
        if not block.strip():
            continue
        first = block.lstrip("\n")
        if first.startswith("="):
            cmd = first.split(None, 1)[0]
            rest = first[len(cmd):].strip()
            if cmd in ("=begin", "=for"):
                skip_region = cmd == "=begin"
                continue
            if cmd == "=end":
                skip_region = False
                continue
            if cmd == "=cut":
                in_pod = False
                continue
            if cmd in ("=pod", "=head1", "=head2", "=head3", "=head4", "=over", "=back",
                       "=encoding"):
                in_pod = True
                continue
            if cmd == "=item":
                rest = re.sub(r"^[*\d.]+\s*", "", rest)
                if rest and len(rest.split()) >= 4:
                    paras.append(pod_inline(" ".join(rest.split())))
                continue
            continue
        if not in_pod or skip_region:
            continue
        if block[:1] in (" ", "\t"):
            continue  # verbatim (code)
        paras.append(pod_inline(" ".join(block.split())))
    return paras


# ---------------------------------------------------------------------------------------------
# man pages (roff)

ROFF_ESCAPES = [
    (re.compile(r"\\f(?:\[[^\]]*\]|\(..|.)"), ""),
    (re.compile(r"\\s[-+]?\d"), ""),
    (re.compile(r"\\\*(?:\[[^\]]*\]|\(..|.)"), ""),
    (re.compile(r"\\\((?:em|en)"), "\u2014"),
    (re.compile(r"\\\[(?:em|en)\]"), "\u2014"),
    (re.compile(r"\\\((?:aq|cq)|\\\[aq\]"), "'"),
    (re.compile(r"\\\((?:dq|lq|rq|Lq|Rq)|\\\[(?:dq|lq|rq)\]"), "\""),
    (re.compile(r"\\\((?:bu|bu)"), "-"),
    (re.compile(r"\\\((?:co)"), "(c)"),
    (re.compile(r"\\\((?:ti)|\\\[ti\]"), "~"),
    (re.compile(r"\\\((?:ha)|\\\[ha\]"), "^"),
    (re.compile(r"\\\((?:mu)"), "x"),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""),
    (re.compile(r"\\[-]"), "-"),
    (re.compile(r"\\[e\\]"), "\\\\"),
    (re.compile(r"\\[&|^c%:]"), ""),
    (re.compile(r"\\[ ~0]"), " "),
    (re.compile(r"\\\."), "."),
]
ROFF_ALTERNATING = {"BR", "RB", "IR", "RI", "BI", "IB"}
MAN_SKIP_SECTIONS = {"NAME", "SYNOPSIS", "SEE ALSO", "COLOPHON", "EXAMPLES", "EXAMPLE",
                     "FILES", "AUTHOR", "AUTHORS", "COPYRIGHT", "REPORTING BUGS", "LIBRARY",
                     "VERSIONS", "STANDARDS", "ATTRIBUTES"}


def roff_text(s):
    for pat, rep in ROFF_ESCAPES:
        s = pat.sub(rep, s)
    return s.replace("\\\\", "\\")


def _roff_args(s):
    args = []
    for m in re.finditer(r'"((?:[^"]|"")*)"|(\S+)', s):
        args.append(m.group(1).replace('""', '"') if m.group(1) is not None else m.group(2))
    return args


def man_paragraphs(text):
    paras, cur = [], []
    section = ""
    nofill = False
    in_table = False

    def flush():
        if cur:
            paras.append(roff_text(" ".join(cur)))
            cur.clear()

    # continuation lines ('\' at end of line)
    text = re.sub(r"\\\n", "", text)
    for line in text.split("\n"):
        if line.startswith((".\\\"", "'\\\"", "\\\"")):
            continue
        if in_table:
            if line.startswith(".TE"):
                in_table = False
            continue
        if line.startswith((".", "'")):
            parts = line[1:].strip().split(None, 1)
            if not parts:
                continue
            req, rest = parts[0], parts[1] if len(parts) > 1 else ""
            if req == "SH":
                flush()
                section = " ".join(_roff_args(rest)).upper()
                continue
            if req in ("nf", "EX"):
                flush()
                nofill = True
                continue
            if req in ("fi", "EE"):
                nofill = False
                continue
            if req == "TS":
                flush()
                in_table = True
                continue
            if section in MAN_SKIP_SECTIONS or nofill:
                continue
            if req in ("B", "I", "SM", "SB"):
                cur.append(" ".join(_roff_args(rest)))
            elif req in ROFF_ALTERNATING:
                cur.append("".join(_roff_args(rest)))
            elif req in ("PP", "P", "LP", "sp", "TP", "IP", "HP", "RS", "RE", "SS", "br",
                         "in", "ti", "TQ"):
                flush()
                if req == "IP":
                    args = _roff_args(rest)
                    if args and len(args[0]) > 2 and args[0] not in ("*", "\\(bu", "\\[bu]"):
                        cur.append(args[0])
            continue
        if section in MAN_SKIP_SECTIONS or nofill:
            continue
        if not line.strip():
            flush()
            continue
        cur.append(line.strip())
    flush()
    return paras


# ---------------------------------------------------------------------------------------------
# HTML (Debian Reference, PostgreSQL docs)

class _HtmlText(html.parser.HTMLParser):
    SKIP = {"script", "style", "pre", "table", "head", "title", "h1", "h2", "h3", "h4", "h5",
            "h6", "code-block", "svg", "math", "kbd", "samp"}
    SKIP_CLASSES = ("navheader", "navfooter", "toc", "footnotes", "breadcrumb", "navigation",
                    "sphinxsidebar", "related", "footer", "synopsis", "programlisting",
                    "screen", "literallayout", "cmdsynopsis", "funcsynopsis", "indexterm")
    BLOCK = {"p", "div", "li", "dd", "dt", "br", "blockquote", "section", "ul", "ol", "dl",
             "tr", "hr", "body", "figure", "figcaption", "caption"}
    VOID = {"br", "hr", "img", "meta", "link", "input", "col", "area", "base", "wbr", "source"}

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.stack = []  # (tag, skipping) for non-void tags
        self.paras = []
        self.cur = []

    def _skipping(self):
        return any(s for _, s in self.stack)

    def _flush(self):
        text = " ".join("".join(self.cur).split())
        if text:
            self.paras.append(text)
        self.cur = []

    def handle_starttag(self, tag, attrs):
        if tag in self.BLOCK:
            self._flush()
        if tag in self.VOID:
            return
        cls = dict(attrs).get("class") or ""
        skip = tag in self.SKIP or any(c in cls.split() for c in self.SKIP_CLASSES)
        self.stack.append((tag, skip))

    def handle_startendtag(self, tag, attrs):
        if tag in self.BLOCK:
            self._flush()

    def handle_endtag(self, tag):
        if tag in self.VOID:
            return
        # pop to the matching tag (HTML is not always well nested)
        for k in range(len(self.stack) - 1, -1, -1):
            if self.stack[k][0] == tag:
                del self.stack[k:]
                break
        if tag in self.BLOCK:
            self._flush()

    def handle_data(self, data):
        if not self._skipping():
            self.cur.append(data)


def html_paragraphs(text):
    p = _HtmlText()
    p.feed(text)
    p.close()
    p._flush()
    return p.paras


# ---------------------------------------------------------------------------------------------
# fortune files: entries separated by '%' lines

def fortune_entries(text):
    entries = []
    for raw in re.split(r"\n%\n", text):
        lines = [ln.strip() for ln in raw.strip("\n").split("\n")]
        lines = [ln for ln in lines if ln]
        if lines:
            entries.append("\n".join(lines))
    return entries
