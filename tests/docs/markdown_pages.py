"""Markdown pages for the docs check (check_docs.py): fenced blocks, inline code spans, headings
and their GitHub slugs, links, repository paths and shell commands, parsed with the standard
library only. No checks here: check_docs.py decides what is an error."""

import glob
import os
import re
import shlex

PATH_PREFIXES = (
    "scripts/",
    "tests/",
    "examples/",
    "bench/",
    "tools/",
    "src/",
    "include/",
    "python/",
    "docs/",
    "configs/",
    "cmake/",
    ".ci/",
)
SHELL_LANGS = {"bash", "sh", "shell", "console", "zsh"}
RUN_TIMEOUT_S = 60
HELP_TIMEOUT_S = 30
# Dotted names the docs mention as keys that are refused (the legacy flat key).
KNOWN_NOT_KEYS = {"distributed.cp_vision_frame_sharding"}
FILE_EXTENSIONS = {
    "json",
    "jsonl",
    "safetensors",
    "yaml",
    "yml",
    "txt",
    "py",
    "md",
    "svg",
    "h",
    "cpp",
    "sh",
    "cmake",
    "so",
    "whl",
}
COMMAND_SEPARATORS = {"&&", "||", "|", ";", "&"}

_PATH_RE = re.compile(
    r"(?<![A-Za-z0-9_./~$-])((?:%s)(?:[A-Za-z0-9_.*?+/-]|\{[A-Za-z0-9_.,*+-]*\})*)"
    % "|".join(re.escape(p) for p in PATH_PREFIXES)
)
_KEY_RE = re.compile(r"^[a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)+$")
_SUB_RE = re.compile(r"^[a-z][a-z0-9-]*$")
_FLAG_RE = re.compile(r"^--([A-Za-z0-9][A-Za-z0-9_.-]*)(?:=.*)?$")
_FENCE_RE = re.compile(r"^(\s*)(`{3,}|~{3,})(.*)$")
_HEADING_RE = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_LINK_RE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFDEF_RE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")


class Page:
    """One Markdown file split into fenced blocks, prose lines, inline code and headings."""

    def __init__(self, path, rel):
        self.path = path
        self.rel = rel
        with open(path, encoding="utf-8") as f:
            self.lines = f.read().split("\n")
        self.fences = []  # (first content line number, info string, [lines])
        self.prose = []  # (line number, text) outside fences
        self.headings = []  # (line number, raw text)
        self._split()
        self.spans = []  # (line number, code) inline code spans
        self.masked = {}  # line number -> prose with code spans blanked (for links)
        self._scan_spans()
        self.slugs = heading_slugs([h for _, h in self.headings])

    def _split(self):
        i = 0
        n = len(self.lines)
        while i < n:
            line = self.lines[i]
            m = _FENCE_RE.match(line)
            if m:
                marker, info = m.group(2), m.group(3).strip()
                if marker[0] == "`" and "`" in info:
                    m = None  # not a fence: inline code at the start of a line
            if m:
                body = []
                start = i + 2
                i += 1
                while i < n:
                    c = _FENCE_RE.match(self.lines[i])
                    if c and c.group(2)[0] == marker[0] and len(c.group(2)) >= len(marker) and not c.group(3).strip():
                        break
                    body.append(self.lines[i])
                    i += 1
                self.fences.append((start, info, body))
                i += 1
                continue
            self.prose.append((i + 1, line))
            h = _HEADING_RE.match(line)
            if h:
                self.headings.append((i + 1, h.group(2)))
            i += 1

    def _scan_spans(self):
        # Paragraphs: runs of consecutive prose lines that are not blank (a code span may
        # continue on the next line, never past a blank line).
        blocks, cur = [], []
        prev = None
        for num, text in self.prose:
            if not text.strip() or (prev is not None and num != prev + 1):
                if cur:
                    blocks.append(cur)
                cur = []
            if text.strip():
                cur.append((num, text))
            prev = num
        if cur:
            blocks.append(cur)
        for block in blocks:
            first = block[0][0]
            text = "\n".join(t for _, t in block)
            masked = list(text)
            i = 0
            while i < len(text):
                if text[i] == "\\" and i + 1 < len(text) and text[i + 1] == "`":
                    i += 2
                    continue
                if text[i] != "`":
                    i += 1
                    continue
                j = i
                while j < len(text) and text[j] == "`":
                    j += 1
                run = j - i
                k = j
                close = -1
                while k < len(text):
                    if text[k] == "`":
                        e = k
                        while e < len(text) and text[e] == "`":
                            e += 1
                        if e - k == run:
                            close = k
                            break
                        k = e
                    else:
                        k += 1
                if close < 0:
                    i = j
                    continue
                code = text[j:close].replace("\n", " ")
                if len(code) > 2 and code[0] == " " and code[-1] == " ":
                    code = code[1:-1]
                self.spans.append((first + text[:i].count("\n"), code))
                for p in range(i, close + run):
                    if masked[p] != "\n":
                        masked[p] = " "
                i = close + run
            for off, line in enumerate("".join(masked).split("\n")):
                self.masked[first + off] = line


def heading_text(raw):
    """A heading's text as GitHub renders it (links to their text, no code or emphasis marks)."""
    t = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    t = re.sub(r"<[^>]+>", "", t)
    t = t.replace("`", "")
    t = re.sub(r"(\*\*|__|\*)", "", t)
    return t.strip()


def heading_slugs(raws):
    seen = {}
    slugs = []
    for raw in raws:
        base = re.sub(r"[^\w\- ]", "", heading_text(raw).lower()).replace(" ", "-")
        if base in seen:
            seen[base] += 1
            slugs.append("%s-%d" % (base, seen[base]))
        else:
            seen[base] = 0
            slugs.append(base)
    return set(slugs)


def expand_braces(s):
    m = re.search(r"\{([^{}]*)\}", s)
    if not m:
        return [s]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(s[: m.start()] + alt + s[m.end() :]))
    return out


def path_exists(root, path):
    for p in expand_braces(path):
        parts = []
        for seg in p.split("/"):
            stem = seg.split(".")[0]
            if re.fullmatch(r"[A-Z][A-Z0-9_]*", stem) and stem not in ("README", "CMakeLists"):
                seg = "*" + seg[len(stem) :]  # a placeholder: NAME.jsonl, FILE
            parts.append(seg)
        p = "/".join(parts)
        full = os.path.join(root, p)
        if any(c in p for c in "*?["):
            if not glob.glob(full):
                return False, p
        elif not os.path.exists(full):
            return False, p
    return True, ""


def find_paths(text):
    for m in _PATH_RE.finditer(text):
        p = m.group(1).rstrip(".,:;")
        if p:
            yield p


def tokenize(command):
    """Shell words of a command; `[--option value]` (an optional part) counts as the option."""
    try:
        words = shlex.split(command, comments=True, posix=True)
    except ValueError:
        words = command.split("#")[0].split()
    return [w[1:] if w.startswith("[--") else w.rstrip("]") if w.startswith("--") else w for w in words]


def split_commands(tokens):
    """Tokens of a command line, split at &&, ||, |, ; and &."""
    cur = []
    for t in tokens:
        if t in COMMAND_SEPARATORS:
            if cur:
                yield cur
            cur = []
            continue
        end = t.endswith(";") and not t.endswith("\\;")
        cur.append(t[:-1] if end else t)
        if end:
            yield cur
            cur = []
    if cur:
        yield cur


def shell_commands(body, first_line):
    """(line number, command text) per logical line of a shell block (backslash continuations
    joined, comments left for the tokenizer)."""
    out = []
    acc, start = "", None
    for off, line in enumerate(body):
        if start is None:
            start = first_line + off
        stripped = line.rstrip()
        if stripped.endswith("\\"):
            acc += stripped[:-1] + " "
            continue
        acc += line
        if acc.strip():
            out.append((start, acc))
        acc, start = "", None
    if acc.strip():
        out.append((start, acc))
    return out


def yaml_paths(lines):
    """Every key path of a YAML block mapping (indentation-based; flow values and comments
    ignored): {'distributed', 'distributed.cp_size', ...}. Returns (path, line offset) pairs."""
    stack = []  # (indent, key)
    out = []
    for off, line in enumerate(lines):
        if not line.strip() or line.lstrip().startswith("#") or line.strip() in ("---", "..."):
            continue
        m = re.match(r"^(\s*)(?:-\s+)?([A-Za-z0-9_.-]+)\s*:(\s|$)", line)
        if not m:
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        out.append((".".join(k for _, k in stack), off))
    return out
