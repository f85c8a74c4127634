#!/usr/bin/env python3
"""tests/docs_paths.py [--self-test] [REPO [FILE...]] -- every repository path and
section reference the docs name must exist, and nothing in the repository names
the developers' files outside it (CTest docs.paths).

What is read: README.md and docs/*.md (all their text, code blocks included), the
comments of include/kvshare.h, and the string literals of every tools/*.c that
writes Prometheus "# HELP" lines (the exporter's HELP texts); for rule 7, every
other text file of the repository (below).  FILE... checks those files instead
(as docs, or as C when they end in .c or .h; each one that is not a .md file or
include/kvshare.h also by rule 7).

The repository is what `git ls-files --cached --others --exclude-standard` lists
(tracked files plus new ones not ignored, so build outputs never count); without
git, the files under REPO less build*/, .git and caches.  A path exists when it
is one of those files or a directory holding one.

Which words are paths (the rule):
  1. A word whose first component is a top-level entry of the repository
     (`docs/store.md`, `tests/`, `Makefile`, `io/posix.c`) is a repository path
     and must exist, relative to the repository root or to the doc's directory.
     A program may be named by its source less the extension (`perf/tp_scaling`
     for perf/tp_scaling.c, `tests/store_open`).
     Where a component holds a placeholder (`<`, `*`, `{`, `$`, `%`, `...`) only
     the components before it are checked (`tests/<module>_<topic>.c`: `tests`).
  2. A word starting with `../` is resolved from the doc's directory: outside
     the repository it is an error (the docs must not point at files the
     repository does not hold), inside it must exist.
  3. A bare `NAME.md` (no `/`) must exist in the doc's directory or at the root.
  4. `issue N` is an error: the repository holds no issue tracker.
  Everything else is not a repository path and is not checked: absolute paths
  (`/dev/shm`, `/proc/...`, `/usr/lib/...`, `/tmp/...`), URLs (`https://...`),
  `~/...`, `$VAR/...`, words whose first component is not a top-level entry
  (`build/bin/kvshare`, a build output; `load/store`; `host:port`).
Section references:
  5. `PATH §N` / `PATH §"Title"` (PATH optional: then the doc itself): PATH must
     be a .md file with a heading numbered N (`## N. ...`) or starting with
     Title.
  6. `PATH, "Title"` or `PATH "Title"` with PATH a .md file: Title must start a
     heading of PATH (`## Title ...`) or a bold run-in title (`**Title.**`); for
     any other file (`include/kvshare.h, "Cache" section`) Title must appear in it.
Outside the docs:
  7. No other text file of the repository -- C sources and headers, CMake files,
     the Makefile, the scripts of perf/ and tests/, the fuzz/ and python/
     READMEs, ... (all of it but README.md, docs/*.md and include/kvshare.h,
     which rules 1-6 read; fuzz/corpus/, fuzzer input; and this file) -- names
     DESIGN.md, STYLE.md or ../shared (any depth of ../): those are the
     developers' own files beside the checkout, which users of the repository
     do not have.  A comment points at the repository's docs instead
     (`docs/core.md, "Lifecycle and liveness"`), or says the thing itself.  The
     whole text counts, comments and code alike.  The only exceptions are
     SOURCE_EXCEPTIONS below, each a (file, exact word) with its reason: the
     tests that read the optional public Mooncake traces from ../shared/traces
     and skip without them.  An exception that matches nothing is an error too
     (remove it).
Exit 0 all good; 1 a bad reference (each printed as file:line: word: why).
--self-test runs the checker on planted docs and sources (every rule, good and
bad) first.
"""
import os
import re
import subprocess
import sys
import tempfile

PLACEHOLDER = re.compile(r'[<>*{}$%]|\.\.\.')
WORD = re.compile(r'[A-Za-z0-9_.+\-/<>*{}$%~@:]+')
HEADING = re.compile(r'^#{1,6}\s+(.*?)\s*#*\s*$')
BOLD = re.compile(r'\*\*([^*]+?)\*\*')
SECT = re.compile(r'(?:([A-Za-z0-9_./+\-]+\.[A-Za-z]+)\s*)?§\s*(\d+|"[^"]+")')
QUOTED = re.compile(r'([A-Za-z0-9_./+\-]+\.[A-Za-z0-9]+)\)?(?:,\s*|\s+)"([^"\n]{1,80})"( section)?')
ISSUE = re.compile(r'\bissues?\s+#?\d+\b', re.I)
# rule 7: a name of the developers' files outside the repository, with its path tail
OUTSIDE = re.compile(r'(?<![A-Za-z0-9_])(?:DESIGN|STYLE)\.md\b'
                     r'|(?<![A-Za-z0-9_.])(?:\.\./)+shared(?![A-Za-z0-9_\-])(?:/[A-Za-z0-9_.\-]+)*')

# Rule 7's exceptions: (file, the exact word allowed there) -> why it is allowed.
SOURCE_EXCEPTIONS = {
    ('tests/tools_replay.cmake', '../shared/traces'):
        'passes the optional public Mooncake traces (docs/replay.md) to the '
        'tools_replay_trace case, which skips without them',
    ('tests/tools_replay.sh', '../shared/traces'):
        'replays those traces from beside the checkout, skipping each one not there',
    ('tests/tools_replay_trace.c', '../shared/traces'):
        'the case that loads those traces (the path from tools_replay.cmake), '
        'skipped when they are absent',
}


def repo_files(repo):
    try:
        out = subprocess.run(['git', '-C', repo, 'ls-files', '-z', '--cached', '--others',
                              '--exclude-standard'], capture_output=True, check=True).stdout
        files = {f for f in out.decode().split('\0') if f}
        files = {f for f in files if os.path.lexists(os.path.join(repo, f))}  # deleted, unstaged
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    files = set()
    for d, dirs, names in os.walk(repo):
        rel = os.path.relpath(d, repo)
        dirs[:] = [x for x in dirs if not (x.startswith(('build', '.git', '.pytest_cache',
                                                         '.benchmarks')) or x == '__pycache__')]
        for n in names:
            files.add(os.path.normpath(os.path.join(rel, n)))
    return files


class Repo:
    def __init__(self, root):
        self.root = os.path.abspath(root)
        self.files = repo_files(self.root)
        self.dirs = set()
        for f in self.files:
            p = os.path.dirname(f)
            while p:
                self.dirs.add(p)
                p = os.path.dirname(p)
        self.top = {f.split('/')[0] for f in self.files}
        # programs named after their source: perf/tp_scaling for perf/tp_scaling.c
        self.stems = {os.path.splitext(f)[0] for f in self.files if '/' in f}

    def exists(self, rel):
        rel = os.path.normpath(rel).rstrip('/')
        return rel in self.files or rel in self.dirs or rel in self.stems or rel == '.'

    def text(self, rel):
        with open(os.path.join(self.root, rel), encoding='utf-8', errors='replace') as f:
            return f.read()


def headings(text):
    hs, fence = [], False
    for line in text.split('\n'):
        if line.lstrip().startswith('```'):
            fence = not fence
            continue
        m = None if fence else HEADING.match(line)
        if m:
            hs.append(m.group(1).replace('`', ''))
    return hs


def has_title(repo, rel, title):
    """Whether title names a section of rel (rule 5/6)."""
    text = repo.text(rel)
    if not rel.endswith('.md'):
        return title in text
    t = title.replace('`', '').strip().lower()
    for h in headings(text):
        h = re.sub(r'^\d+\.\s*', '', h.lower())
        if h == t or (h.startswith(t) and not h[len(t)].isalnum()):
            return True
    for b in BOLD.findall(text):
        b = b.replace('`', '').strip().rstrip('.:').lower()
        if b == t:
            return True
    return False


def has_number(repo, rel, n):
    return any(re.match(re.escape(n) + r'[.\s]', h) for h in headings(repo.text(rel)))


def resolve(repo, doc, word):
    """The repo-relative path word names, or None (not a path), or '' (outside)."""
    ddir = os.path.dirname(doc)
    if word.startswith('../'):
        full = os.path.normpath(os.path.join(repo.root, ddir, word))
        if full != repo.root and not full.startswith(repo.root + os.sep):
            return ''
        return os.path.relpath(full, repo.root)
    if word.startswith(('/', '~', '$', '.')) or '//' in word or ':' in word or '@' in word:
        return None
    first = word.split('/')[0]
    if first in repo.top:
        if repo.exists(os.path.join(ddir, word)) and ddir:
            return os.path.normpath(os.path.join(ddir, word))
        return word
    if '/' not in word and word.endswith('.md'):
        if ddir and repo.exists(os.path.join(ddir, word)):
            return os.path.join(ddir, word)
        return word
    if ddir and '/' in word and repo.exists(os.path.join(ddir, first)):
        return os.path.normpath(os.path.join(ddir, word))  # docs/x.md naming a sibling dir
    return None


def trim(word):
    """The checkable part of a word: trailing punctuation off, cut at a placeholder."""
    word = word.rstrip('.,:;')
    parts = word.split('/')
    for i, p in enumerate(parts):
        if PLACEHOLDER.search(p):
            return '/'.join(parts[:i]) if i else ''
    return word


def check_text(repo, doc, text, errs):
    lines = text.split('\n')
    joined = ' '.join(lines)  # quoted titles may follow their path on the next line
    offs, o = [], 0
    for line in lines:
        offs.append(o)
        o += len(line) + 1

    def lineno(pos):
        lo, hi = 0, len(offs) - 1
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if offs[mid] <= pos:
                lo = mid
            else:
                hi = mid - 1
        return lo + 1

    def bad(pos, word, why):
        errs.append(f'{doc}:{lineno(pos)}: {word}: {why}')

    for m in WORD.finditer(joined):
        raw = m.group(0)
        if m.start() > 0 and joined[m.start() - 1] in '/:':
            continue  # the tail of a URL or an absolute path
        word = trim(raw)
        if not word or word in ('.', '..'):
            continue
        rel = resolve(repo, doc, word)
        if rel is None:
            continue
        if rel == '':
            bad(m.start(), word, 'points outside the repository')
        elif not repo.exists(rel):
            bad(m.start(), word, 'no such file or directory in the repository')
    for m in ISSUE.finditer(joined):
        bad(m.start(), m.group(0), 'the repository has no issue tracker: say what is meant')
    for m in SECT.finditer(joined):
        path, ref = m.group(1), m.group(2)
        rel = resolve(repo, doc, path.rstrip('.,')) if path else doc
        if path and rel is None:
            rel = path  # a bare name before § (DESIGN.md §4): it must be a repo file
        if not rel or not repo.exists(rel) or not rel.endswith('.md'):
            bad(m.start(), m.group(0), f'§ names no .md file of the repository ({path or doc})')
        elif ref.startswith('"') and not has_title(repo, rel, ref.strip('"')):
            bad(m.start(), m.group(0), f'no section {ref} in {rel}')
        elif not ref.startswith('"') and not has_number(repo, rel, ref):
            bad(m.start(), m.group(0), f'no section numbered {ref} in {rel}')
    for m in QUOTED.finditer(joined):
        path, title = m.group(1), m.group(2)
        rel = resolve(repo, doc, trim(path))
        if not rel or not repo.exists(rel) or os.path.isdir(os.path.join(repo.root, rel)):
            continue  # not a repository file (reported above when it should be one)
        if not rel.endswith('.md') and not m.group(3):
            continue  # a quoted argument after a program, not a section
        if not has_title(repo, rel, title):
            bad(m.start(), f'{path}, "{title}"', f'no section "{title}" in {rel}')


C_TOKEN = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'', re.S)


def c_keep(text, kind):
    """text with only its comments (kind 'comment': the leading '*' of their lines
    blanked) or only its string literals' contents (kind 'string': escapes
    blanked, \\" kept as a quote) left; the rest spaces, newlines kept, so
    offsets and line numbers stay the file's."""
    out = [c if c == '\n' else ' ' for c in text]
    for m in C_TOKEN.finditer(text):
        tok, a = m.group(0), m.start()
        if kind == 'comment' and tok.startswith('/'):
            body = re.sub(r'(^|\n)([ \t]*)\*(?!/)', lambda x: x.group(1) + x.group(2) + ' ',
                          tok[2:-2] if tok.startswith('/*') else tok[2:])
            out[a + 2:a + 2 + len(body)] = body
        elif kind == 'string' and tok.startswith('"'):
            body = re.sub(r'\\(.)', lambda x: ' "' if x.group(1) == '"' else '  ', tok[1:-1])
            out[a + 1:a + 1 + len(body)] = body
    return ''.join(out)


def default_docs(repo):
    docs = ['README.md'] + sorted(f for f in repo.files
                                  if f.startswith('docs/') and f.endswith('.md'))
    docs.append('include/kvshare.h')
    for f in sorted(repo.files):
        if f.startswith('tools/') and f.endswith('.c') and '# HELP' in repo.text(f):
            docs.append(f)
    return docs


def check(repo, docs):
    errs = []
    for doc in docs:
        text = repo.text(doc)
        if doc.endswith('.h'):
            text = c_keep(text, 'comment')
        elif doc.endswith('.c'):
            text = c_keep(text, 'string')
        check_text(repo, doc, text, errs)
    return errs


def doc_read_whole(rel):
    """Whether rules 1-6 read rel (all of it, or all its comments): rule 7 skips it."""
    return rel in ('README.md', 'include/kvshare.h') or \
        (rel.startswith('docs/') and rel.endswith('.md'))


def default_sources(repo):
    """Rule 7's files: every text file of the repository but the docs, fuzzer input
    and this checker (whose planted cases name what it looks for)."""
    me = os.path.relpath(os.path.abspath(__file__), repo.root)
    return sorted(f for f in repo.files
                  if not doc_read_whole(f) and not f.startswith('fuzz/corpus/') and f != me
                  and os.path.isfile(os.path.join(repo.root, f)))


def check_sources(repo, files, exceptions, full):
    """Rule 7 over files; full: files is the whole default set, so an exception
    for a file that is not there any more is stale too."""
    errs, used = [], set()
    for rel in files:
        with open(os.path.join(repo.root, rel), 'rb') as f:
            data = f.read()
        if b'\0' in data:
            continue  # binary: no text to name anything
        text = data.decode('utf-8', errors='replace')
        for m in OUTSIDE.finditer(text):
            word = m.group(0).rstrip('.')
            if (rel, word) in exceptions:
                used.add((rel, word))
                continue
            line = text.count('\n', 0, m.start()) + 1
            errs.append(f'{rel}:{line}: {word}: names a file outside the repository '
                        f'(the developers\' own): point at docs/ or say it here (rule 7)')
    for (rel, word), why in sorted(exceptions.items()):
        if (rel, word) not in used and (rel in files or full):
            errs.append(f'{rel}: exception for {word} matches nothing: remove it from '
                        f'SOURCE_EXCEPTIONS ({why})')
    return errs


SELF_DOCS = {
    'README.md': 'see docs/a.md and [b](docs/b.md), tests/, Makefile, tests/<x>_<y>.c\n',
    'docs/a.md': '# A\n\n## 1. Words\n\n## Startup: ready\n\n- **No hostage.** x\n',
    'docs/b.md': 'B\n',
    'include/h.h': '/* the "Cache" section */\nint x;\n',
    'tests/t.c': 'int main(void) { return 0; }\n',
    'tools/exp.c': 'static const char *h = "# HELP %s %s\\n";\n',
}
# (doc text, number of errors expected)
SELF_CASES = [
    ('docs/a.md, "Startup" and docs/a.md "No hostage" and docs/a.md §1 and docs/a.md §"Words"', 0),
    ('https://x.org/docs/nope.md, /dev/shm/kvshare.x, /proc/self/maps, /usr/lib/x86_64-linux-gnu,'
     ' /tmp/kvshare-bench.XXXX, ~/.cache/kvshare, $ORIGIN/../lib, build/bin/kvshare,'
     ' load/store, host:port, tests/<module>_<topic>.c, docs/*.md, ../README.md', 0),
    ('include/h.h, "Cache" section; see (docs/a.md), "Startup"', 0),
    ('see DESIGN.md for it', 1),
    ('DESIGN.md §7', 2),  # a missing file, and a § into it
    ('the traces in ../shared/traces', 1),
    ('docs/nope.md and tests/nope.c and tests/vllm/', 3),
    ('as issue 15 asked', 1),
    ('docs/a.md §2', 1),
    ('docs/a.md, "Shutdown"', 1),
    ('docs/a.md §"Hostage"', 1),
]
SELF_C = [
    ('include/h.h', '/* per DESIGN.md §4 */\nint x; /* docs/b.md, docs/nope.md */\n', 3),
    ('include/h.h', 'int a = 1 / 2; /* docs/a.md,\n * "Startup" */\n', 0),
    ('tools/exp.c', 'p("# HELP m 1 on a fallback (DESIGN.md 7)."\n  " also docs/nope.md");\n', 2),
    ('tools/exp.c', 'p("# HELP m see README.md, docs/a.md");\n', 0),
]
# Rule 7: (file, text, errors expected), checked with SELF_EXCEPTIONS; the file is
# written under its own name (exceptions name files).
SELF_EXCEPTIONS = {('tests/opt.cmake', '../shared/traces'): 'optional data, skipped without'}
SELF_SRC = [
    ('core/slot.c', '/*\n * core/slot.c -- the slot protocol of DESIGN.md §4.\n */\nint x;\n', 1),
    ('io/copy.h', '/* head slices (docs/a.md, "Startup"); tensor sizes: DESIGN.md */\n', 1),
    ('tests/seeds.cmake', '# Fixed seeds (STYLE.md rule 5)\nadd_test(NAME x COMMAND y)\n', 1),
    ('tools/trace.c', '/* per block (../shared/traces/README.md); of ../../shared */\n', 2),
    ('perf/p.sh', '#!/bin/sh\necho "see DESIGN.md"  # in code too\n', 1),
    ('perf/p.py', '# the traces of ../shared/traces\n', 1),
    ('fuzz/README.md', 'seeds from `../shared/traces`\n', 1),
    ('perf/ok.sh', '# docs/a.md, "Startup"; docs/design.md; MY_DESIGN.md; ../sharedx;\n'
                   '# shared/traces beside the checkout; /dev/shm/kvshare.x\n', 0),
    ('tests/opt.cmake', 'set(T "${ROOT}/../shared/traces")  # optional, skipped without\n', 0),
    ('tests/opt.cmake', 'set(T "${ROOT}/../shared/traces/x") # not the excepted word\n', 2),
    ('tests/opt.cmake', '# the excepted file may still not name DESIGN.md\n', 2),  # + unused
    ('tests/other.cmake', 'set(T "${ROOT}/../shared/traces")  # no exception here\n', 1),
]


def self_test():
    fails = 0
    with tempfile.TemporaryDirectory(prefix='kvshare-docs-paths.') as d:
        for rel, text in SELF_DOCS.items():
            os.makedirs(os.path.join(d, os.path.dirname(rel)), exist_ok=True)
            with open(os.path.join(d, rel), 'w') as f:
                f.write(text)
        repo = Repo(d)  # no git here: the walk
        cases = [('docs/case.md', t, n) for t, n in SELF_CASES] + SELF_C
        for i, (rel, text, want) in enumerate(cases):
            p = os.path.join(d, os.path.dirname(rel), f'case{i}' + os.path.splitext(rel)[1])
            with open(p, 'w') as f:
                f.write(text)
            errs = check(repo, [os.path.relpath(p, d)])
            if len(errs) != want:
                fails += 1
                print(f'docs_paths self-test case {i} ({text!r}): {len(errs)} errors, '
                      f'want {want}:', *errs, sep='\n  ')
            os.unlink(p)
        for i, (rel, text, want) in enumerate(SELF_SRC, len(cases)):
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, 'w') as f:
                f.write(text)
            errs = check_sources(repo, [rel], SELF_EXCEPTIONS, False)
            if len(errs) != want:
                fails += 1
                print(f'docs_paths self-test case {i} ({rel}: {text!r}): {len(errs)} errors, '
                      f'want {want}:', *errs, sep='\n  ')
            os.unlink(p)
        errs = check_sources(repo, [], SELF_EXCEPTIONS, True)  # the exception's file gone
        if len(errs) != 1:
            fails += 1
            print('docs_paths self-test: a stale exception not reported:', *errs, sep='\n  ')
        cases += SELF_SRC + [None]
    print(f'docs_paths self-test: {len(cases) - fails}/{len(cases)} cases as expected')
    return fails == 0


def main(argv):
    ok = True
    if argv and argv[0] == '--self-test':
        ok = self_test()
        argv = argv[1:]
    repo = Repo(argv[0] if argv else os.path.join(os.path.dirname(__file__), '..'))
    given = [os.path.relpath(os.path.abspath(f), repo.root) for f in argv[1:]]
    docs = given or default_docs(repo)
    sources = [f for f in given if not f.endswith('.md') and not doc_read_whole(f)] \
        if given else default_sources(repo)
    errs = check(repo, docs) + check_sources(repo, sources, SOURCE_EXCEPTIONS, not given)
    for e in errs:
        print(e)
    print(f'docs_paths: {len(docs)} docs, {len(sources)} other files (rule 7), '
          f'{len(errs)} bad references')
    return 0 if ok and not errs else 1


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
