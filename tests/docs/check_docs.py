#!/usr/bin/env python3
"""The docs check: every link, path, command, option and config key named in README.md and
docs/*.md must exist, and the blocks marked runnable must run.

Usage: check_docs.py REPO_ROOT [FRAMESHARD_BINARY]
(ctest: lint.docs, label lint; Python 3, standard library only.)

What it checks, over README.md and docs/*.md (outside fenced blocks for links and headings):

* Links: every relative Markdown link `[text](path)` names an existing file or folder (relative to
  the page), and every `#anchor` (`(#anchor)` on the page, `(page.md#anchor)` on another) is the
  slug of a heading of that page, by GitHub's rules: the heading's text lowercased, every character
  that is not a letter, digit, space, '-' or '_' dropped, spaces turned into '-'; the second heading
  with the same slug gets '-1', the third '-2', ...
* Paths: every repository path in inline code or in a fenced block that starts with one of
  PATH_PREFIXES (scripts/, tests/, examples/, ...) exists. Globs (`tests/unit/*_test.cpp`) must
  match something; `{a,b}` lists are expanded; a segment in capitals (`NAME.jsonl`, `FILE`) is a
  placeholder and matches anything; a path stops at the first character that cannot be part of one
  (`tests/fuzz/corpus/<target>/` checks `tests/fuzz/corpus/`). In a layout listing in a fenced
  block (a line `folder/   description`, and its indented continuation lines) a path may also be
  relative to that folder.
* CLI (needs the binary): each `frameshard SUB ...` or `.../frameshard SUB ...` in a fenced shell
  block (bash, sh, shell, console) or in inline code: SUB is a subcommand of `frameshard --help`
  and every `--option` after it is listed by `frameshard SUB --help`. Inline code that starts
  with a subcommand (`plan --alpha`) is checked the same way, and inline code made of options
  (`--nproc N`) under a heading that names a subcommand in inline code (## `frameshard plan`) is
  checked against that subcommand.
* Config keys (needs the binary): a dotted option (`--distributed.multimodal.vision.frame_sharding.
  enabled`, `--model.tower`) is a recipe key, checked against the resolved recipe that
  `frameshard train --print-config` prints (a YAML mapping, walked key by key). For subcommands
  other than train and ab the key must also lie under `distributed` (the part of the recipe that
  `plan`, `analyze`, `calibrate`, `verify` and `encode` read). Inline code that is a dotted key
  (`model.vision_checkpointing`, `distributed.cp_size`, optionally followed by `: value` or a
  value) and the keys of a fenced yaml block whose top-level key is a recipe section are checked
  the same way. Names with a file extension (`model.safetensors`) are not keys; KNOWN_NOT_KEYS
  lists keys the docs name because they are rejected.
* Runnable blocks (needs the binary): a fenced block whose info string is `bash runnable` runs
  with `bash -e -o pipefail`, with a timeout (RUN_TIMEOUT_S), and must exit 0. It runs in a scratch
  directory that mirrors the repository root (each top-level entry linked, `build/frameshard`
  linked to the binary under test), so `build/frameshard ...` and repository paths work and files
  it writes stay out of the tree. Mark as runnable only commands that are cheap (a few seconds)
  and need only the built CLI (`build/frameshard plan ...`, `build/frameshard train
  --print-config`): never builds, training runs or GPU commands.

* Length: README.md has at most README_MAX_LINES lines (300) and every docs/*.md page at most
  DOCS_PAGE_MAX_LINES (400), so a newcomer can read each; a longer page fails naming the file, the
  limit and its count (split a page by task, move README detail to docs/).

Without a binary, or when it does not exist, the CLI, key and runnable checks are skipped with a
notice; the link, path and length checks still run. A binary built without the runtime (plan and analyze
only, no `train --print-config`) checks what it has and skips, with a notice, the commands and
runnable blocks of the subcommands it lacks and the config keys. Each failure is printed as
`file:line: expected ..., found ...`; the exit code is 1 when there is any, else 0.
"""

import glob
import os
import re
import signal
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from markdown_pages import (  # noqa: E402  (next to this file)
    _FLAG_RE,
    _KEY_RE,
    _LINK_RE,
    _REFDEF_RE,
    _SUB_RE,
    FILE_EXTENSIONS,
    HELP_TIMEOUT_S,
    KNOWN_NOT_KEYS,
    RUN_TIMEOUT_S,
    SHELL_LANGS,
    Page,
    find_paths,
    path_exists,
    shell_commands,
    split_commands,
    tokenize,
    yaml_paths,
)

# Page lengths a newcomer can read (lines, as an editor counts them).
README_MAX_LINES = 300
DOCS_PAGE_MAX_LINES = 400


class Cli:
    """The built frameshard binary: its subcommands, their options and the resolved recipe."""

    def __init__(self, binary):
        self.binary = binary
        self._help = {}
        self.subcommands = set()
        self.keys = None
        top = self.help(None)
        if top is None:
            raise RuntimeError("%s --help failed" % binary)
        in_subs = False
        for line in top.splitlines():
            if re.match(r"^\s*(subcommands|SUBCOMMANDS)\s*:?\s*$", line, re.IGNORECASE):
                in_subs = True
                continue
            if in_subs:
                m = re.match(r"^\s+([a-z][a-z0-9-]*)(\s|$)", line)
                if m:
                    self.subcommands.add(m.group(1))
                elif line.strip() and not line.startswith(" "):
                    in_subs = False
        # A build without the runtime (FRAMESHARD_BUILD_RUNTIME=OFF) has plan and analyze only.
        self.partial = bool(self.subcommands) and "train" not in self.subcommands
        try:
            out = subprocess.run(
                [binary, "train", "--print-config"], capture_output=True, text=True, timeout=HELP_TIMEOUT_S
            )
            if out.returncode == 0:
                self.keys = {p for p, _ in yaml_paths(out.stdout.splitlines())}
        except (OSError, subprocess.TimeoutExpired):
            pass

    def help(self, sub):
        if sub not in self._help:
            cmd = [self.binary] + ([sub] if sub else []) + ["--help"]
            try:
                out = subprocess.run(cmd, capture_output=True, text=True, timeout=HELP_TIMEOUT_S)
                self._help[sub] = out.stdout + out.stderr if out.returncode == 0 else None
            except (OSError, subprocess.TimeoutExpired):
                self._help[sub] = None
        return self._help[sub]

    def has_sub(self, sub):
        if self.subcommands:
            return sub in self.subcommands
        return self.help(sub) is not None

    def flags(self, sub):
        """The options of `frameshard SUB --help`: the names at the start of its option lines
        (`  -h,--help`, `  --cp TEXT`), not options its descriptions or footer mention."""
        out = set()
        for line in (self.help(sub) or "").splitlines():
            m = re.match(
                r"^\s{1,4}((?:-[A-Za-z0-9],)*--[A-Za-z0-9][A-Za-z0-9_-]*"
                r"(?:,--[A-Za-z0-9][A-Za-z0-9_-]*)*)",
                line,
            )
            if m and not line[m.end() :].startswith("."):  # not a dotted example
                out.update(re.findall(r"--([A-Za-z0-9][A-Za-z0-9_-]*)", m.group(1)))
        return out


class Checker:
    def __init__(self, root, cli):
        self.root = root
        self.cli = cli
        self.failures = []
        self.count = {
            "files": 0,
            "links": 0,
            "anchors": 0,
            "paths": 0,
            "commands": 0,
            "flags": 0,
            "keys": 0,
            "runnable": 0,
        }
        self.pages = {}
        self.skipped = 0

    def fail(self, page, line, expected, found):
        self.failures.append("%s:%d: expected %s, found %s" % (page.rel, line, expected, found))

    def page(self, path):
        path = os.path.normpath(path)
        if path not in self.pages:
            self.pages[path] = Page(path, os.path.relpath(path, self.root))
        return self.pages[path]

    # Page length.
    def check_length(self, page):
        with open(page.path, encoding="utf-8") as f:
            count = len(f.read().splitlines())
        limit = README_MAX_LINES if page.rel == "README.md" else DOCS_PAGE_MAX_LINES
        if count > limit:
            self.fail(
                page,
                limit + 1,
                "%s to have at most %d lines (%s)"
                % (page.rel, limit, "README_MAX_LINES" if page.rel == "README.md" else "DOCS_PAGE_MAX_LINES"),
                "%d lines" % count,
            )

    # Links and anchors.
    def check_links(self, page):
        for num, line in sorted(page.masked.items()):
            targets = [m.group(1) for m in _LINK_RE.finditer(line)]
            m = _REFDEF_RE.match(line)
            if m:
                targets.append(m.group(1))
            for target in targets:
                if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                    continue  # http:, https:, mailto:
                self.count["links"] += 1
                file_part, _, anchor = target.partition("#")
                dest = page.path
                if file_part:
                    dest = os.path.normpath(os.path.join(os.path.dirname(page.path), file_part))
                    if not os.path.exists(dest):
                        self.fail(
                            page,
                            num,
                            "the link target %s to exist" % file_part,
                            "no such file (%s)" % os.path.relpath(dest, self.root),
                        )
                        continue
                if anchor:
                    self.count["anchors"] += 1
                    if not dest.endswith(".md") or os.path.isdir(dest):
                        self.fail(page, num, "an anchor into a Markdown page", "#%s into %s" % (anchor, file_part))
                        continue
                    slugs = self.page(dest).slugs
                    if anchor not in slugs:
                        self.fail(
                            page,
                            num,
                            "a heading with the slug #%s in %s" % (anchor, os.path.relpath(dest, self.root)),
                            "none (close: %s)"
                            % ", ".join(sorted(s for s in slugs if s[:4] == anchor[:4])[:5] or ["-"]),
                        )

    # Repository paths.
    def check_paths(self, page):
        items = [(num, text, None) for num, text in page.spans]
        for start, _info, body in page.fences:
            base = None
            for off, line in enumerate(body):
                # A layout listing: "examples/   two_rank_encode, python/hf_train_step.py" (and
                # its indented continuation lines) may name paths relative to its entry.
                m = re.match(r"^([A-Za-z0-9_.-]+/(?:[A-Za-z0-9_.-]+/)*)\s{2,}\S", line)
                if m:
                    base = m.group(1)
                elif not line.startswith(" "):
                    base = None
                items.append((start + off, line, base))
        for num, text, base in items:
            for p in find_paths(text):
                self.count["paths"] += 1
                ok, missing = path_exists(self.root, p)
                if not ok and base and path_exists(self.root, base + p)[0]:
                    ok = True
                if not ok:
                    self.fail(page, num, "the repository path %s to exist" % p, "nothing at %s" % missing)

    # CLI invocations, options and keys.
    def check_key(self, page, num, key, sub):
        self.count["keys"] += 1
        if key in KNOWN_NOT_KEYS:
            return
        if key not in self.cli.keys:
            self.fail(page, num, "the config key %s in `frameshard train --print-config`" % key, "no such key")
        elif sub not in (None, "train", "ab") and not key.startswith("distributed."):
            self.fail(
                page,
                num,
                "a key under distributed for `frameshard %s`" % sub,
                "--%s (a recipe key only train and ab read)" % key,
            )

    def check_invocation(self, page, num, sub, args, what):
        if self.cli.partial and not self.cli.has_sub(sub):
            self.skipped += 1  # a torch-free build: no train, ab, verify, encode, calibrate
            return
        self.count["commands"] += 1
        if not self.cli.has_sub(sub):
            self.fail(
                page,
                num,
                "a frameshard subcommand (%s)" % ", ".join(sorted(self.cli.subcommands)),
                "%s in %s" % (sub, what),
            )
            return
        flags = self.cli.flags(sub)
        for tok in args:
            m = _FLAG_RE.match(tok)
            if not m:
                continue
            name = m.group(1)
            if "." in name:
                if self.cli.keys is not None:
                    self.check_key(page, num, name, sub)
                continue
            self.count["flags"] += 1
            if name not in flags:
                self.fail(page, num, "--%s in `frameshard %s --help`" % (name, sub), "no such option (in %s)" % what)

    def commands_in(self, tokens):
        """(subcommand, args) per frameshard invocation among the tokens."""
        for cmd in split_commands(tokens):
            for i, t in enumerate(cmd):
                if t == "frameshard" and i > 0 and cmd[i - 1] == "-m":
                    break  # `python -m frameshard ...`: the Python package's CLI, not this binary
                if t == "frameshard" or t.endswith("/frameshard"):
                    rest = cmd[i + 1 :]
                    if rest and _SUB_RE.match(rest[0]):
                        yield rest[0], rest[1:]
                    elif rest and rest[0].startswith("--"):
                        yield None, rest
                    break

    def check_cli(self, page):
        for start, info, body in page.fences:
            lang = info.split()[0].lower() if info.split() else ""
            if lang in SHELL_LANGS:
                for num, command in shell_commands(body, start):
                    self.check_command_text(page, num, command, "a fenced block")
            elif lang in ("yaml", "yml") and self.cli.keys is not None:
                paths = yaml_paths(body)
                tops = {k.split(".")[0] for k in self.cli.keys}
                if paths and paths[0][0].split(".")[0] in tops:
                    for path, off in paths:
                        self.check_key(page, start + off, path, None)
        section_sub = None
        heading_at = {num: raw for num, raw in page.headings}
        spans = sorted(page.spans)
        span_i = 0
        for num in sorted(set([n for n, _ in spans] + list(heading_at))):
            if num in heading_at:
                m = re.search(r"`(?:\S*/)?frameshard\s+([a-z][a-z0-9-]*)`", heading_at[num])
                section_sub = m.group(1) if m else None
            while span_i < len(spans) and spans[span_i][0] == num:
                self.check_span(page, num, spans[span_i][1], section_sub)
                span_i += 1

    def check_command_text(self, page, num, command, what):
        for sub, args in self.commands_in(tokenize(command)):
            if sub is None:
                self.check_top_flags(page, num, args, what)
            else:
                self.check_invocation(page, num, sub, args, what)

    def check_top_flags(self, page, num, args, what):
        flags = self.cli.flags(None)
        for tok in args[:1]:
            m = _FLAG_RE.match(tok)
            if m:
                self.count["commands"] += 1
                self.count["flags"] += 1
                if m.group(1) not in flags:
                    self.fail(page, num, "--%s in `frameshard --help`" % m.group(1), "no such option (in %s)" % what)

    def check_span(self, page, num, code, section_sub):
        tokens = tokenize(code)
        if not tokens:
            return
        if any(t == "frameshard" or t.endswith("/frameshard") for t in tokens):
            self.check_command_text(page, num, code, "inline code")
            return
        first = tokens[0].rstrip(":")
        if first in self.cli.subcommands and len(tokens) > 1 and tokens[1].startswith("--"):
            self.check_invocation(page, num, first, tokens[1:], "inline code")
            return
        if tokens[0].startswith("--"):
            m = _FLAG_RE.match(tokens[0])
            if m and "." in m.group(1):
                if self.cli.keys is not None:
                    self.check_key(page, num, m.group(1), None)
                return
            if section_sub and m:
                if self.cli.partial and not self.cli.has_sub(section_sub):
                    self.skipped += 1
                    return
                for tok in tokens:
                    f = _FLAG_RE.match(tok)
                    if not f or "." in f.group(1):
                        continue
                    self.count["flags"] += 1
                    if f.group(1) not in self.cli.flags(section_sub):
                        self.fail(
                            page,
                            num,
                            "--%s in `frameshard %s --help`" % (f.group(1), section_sub),
                            "no such option (inline code)",
                        )
            return
        if (
            self.cli.keys is not None
            and _KEY_RE.match(first)
            and first.split(".")[-1] not in FILE_EXTENSIONS
            and first.split(".")[0] in {k.split(".")[0] for k in self.cli.keys}
        ):
            self.check_key(page, num, first, None)

    # Runnable blocks.
    def run_blocks(self, page, scratch):
        for start, info, body in page.fences:
            if info.split()[:2] != ["bash", "runnable"]:
                continue
            script = "\n".join(body) + "\n"
            if self.cli.partial and any(
                not self.cli.has_sub(sub)
                for _, command in shell_commands(body, start)
                for sub, _ in self.commands_in(tokenize(command))
                if sub
            ):
                self.skipped += 1
                continue
            self.count["runnable"] += 1
            # Its own process group, so a timeout ends the commands it started too.
            proc = subprocess.Popen(
                ["bash", "-e", "-o", "pipefail", "-c", script],
                cwd=scratch,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                start_new_session=True,
            )
            try:
                stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.communicate()
                self.fail(page, start, "the runnable block to finish within %d s" % RUN_TIMEOUT_S, "a timeout")
                continue
            if proc.returncode != 0:
                tail = (stderr.strip() or stdout.strip()).splitlines()[-3:]
                self.fail(
                    page, start, "the runnable block to exit 0", "exit %d: %s" % (proc.returncode, " | ".join(tail))
                )


def make_scratch(root, binary):
    scratch = tempfile.mkdtemp(prefix="frameshard-docs-")
    for name in os.listdir(root):
        if name == "build":
            continue
        os.symlink(os.path.join(root, name), os.path.join(scratch, name))
    os.mkdir(os.path.join(scratch, "build"))
    os.symlink(binary, os.path.join(scratch, "build", "frameshard"))
    return scratch


def remove_scratch(scratch):
    # Only the links and what the blocks wrote there (never through a link into the tree).
    for dirpath, dirnames, filenames in os.walk(scratch, topdown=False, followlinks=False):
        for name in filenames + dirnames:
            p = os.path.join(dirpath, name)
            if os.path.islink(p) or os.path.isfile(p):
                os.unlink(p)
            else:
                os.rmdir(p)
    os.rmdir(scratch)


def main(argv):
    if len(argv) not in (2, 3):
        print("usage: check_docs.py REPO_ROOT [FRAMESHARD_BINARY]", file=sys.stderr)
        return 2
    root = os.path.abspath(argv[1])
    binary = os.path.abspath(argv[2]) if len(argv) == 3 else None
    cli = None
    if binary and os.path.isfile(binary) and os.access(binary, os.X_OK):
        try:
            cli = Cli(binary)
        except RuntimeError as e:
            print("docs check: %s; CLI, key and runnable checks skipped" % e)
    else:
        print(
            "docs check: no frameshard binary%s; CLI, key and runnable checks skipped"
            % (" at %s" % binary if binary else " given")
        )
    if cli is not None and cli.keys is None:
        print("docs check: `%s train --print-config` failed; config key checks skipped" % binary)

    files = [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    checker = Checker(root, cli)
    scratch = make_scratch(root, binary) if cli is not None else None
    try:
        for path in files:
            if not os.path.exists(path):
                checker.failures.append("%s:1: expected the file, found nothing" % os.path.relpath(path, root))
                continue
            page = checker.page(path)
            checker.count["files"] += 1
            checker.check_length(page)
            checker.check_links(page)
            checker.check_paths(page)
            if cli is not None:
                checker.check_cli(page)
                checker.run_blocks(page, scratch)
    finally:
        if scratch:
            remove_scratch(scratch)
    c = checker.count
    print(
        "docs check: %d files; %d links (%d anchors); %d paths; %s"
        % (
            c["files"],
            c["links"],
            c["anchors"],
            c["paths"],
            "%d CLI invocations, %d options, %d config keys; %d runnable blocks"
            % (c["commands"], c["flags"], c["keys"], c["runnable"])
            if cli is not None
            else "CLI checks skipped",
        )
    )
    if checker.skipped:
        print(
            "docs check: %d commands or runnable blocks skipped: the binary has no runtime "
            "subcommands (only %s)" % (checker.skipped, ", ".join(sorted(cli.subcommands)))
        )

    def where(f):
        name, line = f.split(":", 2)[:2]
        return (name != "README.md", name, int(line) if line.isdigit() else 0)

    for f in sorted(checker.failures, key=where):
        print(f)
    if checker.failures:
        print("docs check: %d failure(s)" % len(checker.failures))
        return 1
    print("docs check: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
