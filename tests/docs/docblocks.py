"""Documented outputs: find the fenced blocks of README.md and docs/*.md, run the commands that
tests/docs/manifest.toml says to check, and compare their real output with the block.

Conventions (the docs themselves carry no markers; the manifest names each block by its file and
its first line):

* A block is a *transcript* when it has lines starting with ``$ ``: each such line is a command
  (a trailing ``\\`` continues it on the next line), the lines up to the next ``$ `` line are its
  output (stdout and stderr as a terminal shows them). A line ``exit=N`` or ``[exit N]`` gives the
  expected exit status (default 0) and is not output. ``$ cat FILE`` whose FILE does not exist yet
  creates FILE with the lines shown (so a block can show the file it uses).
* A block without ``$ `` lines is the output of the manifest entry's ``command``.
* Comparison (``match``): ``exact`` (default): the lines must be equal, after trailing spaces are
  removed and blank lines at either end dropped; a line that is only ``...`` stands for any lines
  (none or more), and a line ending in `` ...`` matches any line that starts with what precedes the
  dots. ``excerpt``: the block's lines must appear in this order, anywhere in the output.
* Only what legitimately varies is normalised, on both sides: a rich progress bar's line (its
  times), ``h:mm:ss`` clock times, and the entry's own ``normalize`` regular expressions (timings,
  load averages, hashes of files the docs do not show). Every number computed from the seed must
  match exactly.
* Commands run with bash in a fresh temporary folder (``/tmp/`` in a command is that folder), with
  the venv's ``textdp`` first on PATH, ``COLUMNS`` set (default 80, as a pipe gets), a temporary
  ``TEXTDP_LEDGER_DIR`` and ``TEXTDP_CACHE`` (``cache = "user"`` keeps the user's cache, for entries
  that reuse a trained model).

Helper for doc writers::

    python tests/docs/docblocks.py list                 # every block and how it is checked
    python tests/docs/docblocks.py run ID [ID ...]      # run entries, print the real output and the diff
    python tests/docs/docblocks.py unlisted             # blocks the manifest must still classify
    python tests/docs/docblocks.py update ID [ID ...]   # paste the real output into an `exact` block
"""

from __future__ import annotations

import difflib
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = Path(__file__).with_name("manifest.toml")
DOC_FILES = ("README.md", "docs/*.md")

#: tags of code blocks; a code block needs a manifest entry only when it mentions a seed
CODE_TAGS = {"bash", "sh", "shell", "python", "py", "pycon", "toml", "yaml", "ini", "make", "makefile"}
SEED_RE = re.compile(r"--seed\b|\bseed\s*=|\brng\s*=\s*\d")

_FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([\w+-]*)")
_PROGRESS = re.compile(r"━+\s+\S+/\S+\s+\d+:\d\d:\d\d")
_CLOCK = re.compile(r"\b\d+:\d\d:\d\d\b")
_ISO_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d[\d:.+\-Z…]*")
_EXIT = re.compile(r"^\s*(?:exit=(\d+)|\[exit (\d+)\])\s*$")


@dataclass
class Block:
    file: str      # relative to the repository root
    line: int      # 1-based line of the opening fence
    tag: str
    lines: list[str]
    indent: str = ""

    @property
    def first(self) -> str:
        return next((ln.strip() for ln in self.lines if ln.strip()), "")

    @property
    def needs_entry(self) -> bool:
        """Untagged (or json/text/console) blocks show output; code blocks only when seeded."""
        text = "\n".join(self.lines)
        if self.tag.lower() in CODE_TAGS:
            return bool(SEED_RE.search(text))
        return True


@dataclass
class Entry:
    id: str
    file: str
    first: str
    check: str                      # fast | slow | none
    reason: str = ""
    command: str = ""               # for a block without `$ ` lines
    match: str = "exact"
    columns: int = 80
    cache: str = "temp"             # temp | user
    env: dict = field(default_factory=dict)
    setup: str = ""                 # bash run in the folder before the commands
    setup_python: str = ""          # python run in the folder before the commands
    normalize: list = field(default_factory=list)   # [[regex, replacement], ...]
    script: str = ""                # Python code block: every line it prints must appear in the block
    timeout: int = 600


def doc_paths() -> list[Path]:
    out: list[Path] = []
    for pat in DOC_FILES:
        out.extend(sorted(ROOT.glob(pat)))
    return out


def parse_blocks(path: Path) -> list[Block]:
    rel = str(path.relative_to(ROOT))
    lines = path.read_text(encoding="utf-8").split("\n")
    blocks, i = [], 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, tag = m.group(1), m.group(2), m.group(3)
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence[0] * len(fence)):
            ln = lines[i]
            body.append(ln[len(indent):] if ln.startswith(indent) else ln.lstrip())
            i += 1
        blocks.append(Block(rel, start + 1, tag, body, indent))
        i += 1
    return blocks


def all_blocks() -> list[Block]:
    return [b for p in doc_paths() for b in parse_blocks(p)]


def load_manifest(path: Path = MANIFEST) -> list[Entry]:
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return [Entry(**e) for e in data.get("block", [])]


def find_block(entry: Entry, blocks: list[Block]) -> Block | None:
    hits = [b for b in blocks if b.file == entry.file and b.first == entry.first.strip()]
    return hits[0] if len(hits) == 1 else None


# ---------------------------------------------------------------- transcripts

@dataclass
class Step:
    command: str
    expected: list[str]
    exit: int = 0


def split_transcript(block: Block, entry: Entry) -> list[Step]:
    steps: list[Step] = []
    lines = list(block.lines)
    if not any(ln.startswith("$ ") for ln in lines):
        if not entry.command:
            raise ValueError(f"{entry.id}: the block has no `$ ` lines and the entry no command")
        steps.append(Step(entry.command, []))
        for ln in lines:
            _add_output(steps[-1], ln)
        return steps
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("$ "):
            cmd = ln[2:]
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1].rstrip() + " " + lines[i].strip()
            steps.append(Step(cmd.strip(), []))
        elif steps:
            _add_output(steps[-1], ln)
        i += 1
    return steps


def _add_output(step: Step, line: str) -> None:
    m = _EXIT.match(line)
    if m:
        step.exit = int(m.group(1) or m.group(2))
    else:
        step.expected.append(line)


def normalise(lines: list[str], entry: Entry) -> list[str]:
    out = []
    for ln in lines:
        ln = ln.rstrip()
        if _PROGRESS.search(ln):
            continue  # a progress bar's last state: its times vary, and a pipe may not show it
        ln = _ISO_TIME.sub("<date and time>", ln)
        ln = _CLOCK.sub("<clock>", ln)
        for pat, rep in entry.normalize:
            ln = re.sub(pat, rep, ln)
        out.append(ln)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


def _line_matches(doc: str, real: str) -> bool:
    if doc == real:
        return True
    if doc.endswith(" ...") or doc.endswith(";..."):
        return real.startswith(doc[:-3].rstrip())
    return False


def compare(expected: list[str], actual: list[str], mode: str) -> str | None:
    """None when ``actual`` shows what the docs show, else a readable difference."""
    if mode == "excerpt":
        j = 0
        for d in expected:
            if not d.strip() or d.strip() == "...":
                continue
            while j < len(actual) and not _line_matches(d, actual[j]):
                j += 1
            if j == len(actual):
                return f"documented line not found (in order) in the output:\n  {d!r}"
            j += 1
        return None
    # exact, with `...` gaps
    chunks: list[list[str]] = [[]]
    for d in expected:
        if d.strip() == "...":
            chunks.append([])
        else:
            chunks[-1].append(d)
    if len(chunks) == 1:
        ok = len(expected) == len(actual) and all(_line_matches(d, a) for d, a in zip(expected, actual))
        return None if ok else _diff(expected, actual)
    pos = 0
    for k, chunk in enumerate(chunks):
        if not chunk:
            continue
        last = k == len(chunks) - 1
        starts = [0] if k == 0 else ([len(actual) - len(chunk)] if last else range(pos, len(actual) - len(chunk) + 1))
        for s in starts:
            if s >= pos and all(_line_matches(d, a) for d, a in zip(chunk, actual[s:s + len(chunk)])) \
                    and s + len(chunk) <= len(actual):
                pos = s + len(chunk)
                break
        else:
            return _diff(expected, actual)
    return None


def _diff(expected: list[str], actual: list[str]) -> str:
    return "\n".join(difflib.unified_diff(expected, actual, "documented", "real output", lineterm="", n=2))


# ---------------------------------------------------------------- running

def _env(entry: Entry, work: Path) -> dict:
    env = dict(os.environ)
    venv_bin = Path(sys.executable).parent
    env["PATH"] = f"{venv_bin}{os.pathsep}{env.get('PATH', '')}"
    env["COLUMNS"] = str(entry.columns)
    env.pop("LINES", None)
    env["PYTHONUNBUFFERED"] = "1"  # stdout and stderr in the order a terminal shows them
    env["TERM"] = "dumb"
    for k in ("FORCE_COLOR", "CLICOLOR_FORCE", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(k, None)
    env["NO_COLOR"] = "1"
    env["TEXTDP_LEDGER_DIR"] = str(work / ".ledgers")
    if entry.cache != "user":
        env["TEXTDP_CACHE"] = str(work / ".cache")
    for k, v in entry.env.items():
        env[k] = str(v).replace("{work}", str(work))
    return env


@dataclass
class Result:
    step: Step
    command: str
    output: list[str]
    exit: int
    seconds: float
    problem: str | None = None


def run_entry(entry: Entry, block: Block, work: Path | None = None) -> list[Result]:
    own = work is None
    tmp = tempfile.TemporaryDirectory(prefix="textdp-docs-") if own else None
    work = Path(tmp.name) if own else work
    try:
        return _run(entry, block, work)
    finally:
        if tmp is not None:
            tmp.cleanup()


def _run(entry: Entry, block: Block, work: Path) -> list[Result]:
    env = _env(entry, work)
    if entry.script:
        return [_run_script(entry, block, work, env)]
    if entry.setup_python:
        subprocess.run([sys.executable, "-c", entry.setup_python], cwd=work, env=env, check=True,
                       timeout=entry.timeout, capture_output=True)
    if entry.setup:
        subprocess.run(["bash", "-c", entry.setup], cwd=work, env=env, check=True, timeout=entry.timeout,
                       capture_output=True)
    results = []
    for step in split_transcript(block, entry):
        cmd = step.command
        words = shlex.split(cmd) if cmd.startswith("cat ") else []
        if len(words) == 2 and not (work / words[1]).exists():  # `$ cat FILE`: the block shows FILE
            (work / words[1]).write_text("\n".join(step.expected).strip("\n") + "\n", encoding="utf-8")
        run_cmd = cmd.replace("/tmp/", f"{work}/")
        t0 = time.perf_counter()
        p = subprocess.run(["bash", "-c", run_cmd], cwd=work, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=entry.timeout)
        secs = time.perf_counter() - t0
        text = p.stdout.decode("utf-8", "replace").replace(f"{work}/", "/tmp/").replace(str(work), "/tmp")
        out = text.split("\n")
        res = Result(step, cmd, out, p.returncode, secs)
        exp_n, out_n = normalise(step.expected, entry), normalise(out, entry)
        problems = []
        if p.returncode != step.exit:
            problems.append(f"exit status {p.returncode}, documented {step.exit}")
        d = compare(exp_n, out_n, entry.match)
        if d is not None:
            problems.append(d)
        res.problem = "\n".join(problems) or None
        results.append(res)
    return results


def _run_script(entry: Entry, block: Block, work: Path, env: dict) -> Result:
    """A Python block: the entry's script recomputes the values the block shows in its comments and
    prints them in the block's own format; each printed line must occur in the block."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-c", entry.script], cwd=work, env=env, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=entry.timeout)
    out = p.stdout.decode("utf-8", "replace").split("\n")
    res = Result(Step("python <script>", []), "python <script of the manifest entry>", out, p.returncode,
                 time.perf_counter() - t0)
    text = "\n".join(block.lines)
    if p.returncode != 0:
        res.problem = "the entry's script failed:\n" + "\n".join(out[-20:])
    else:
        missing = [ln.strip() for ln in out if ln.strip() and ln.strip() not in text]
        if missing:
            res.problem = "values the code gives but the block does not show:\n" + "\n".join(f"  {m!r}" for m in missing)
    return res


def update_block(entry: Entry, block: Block) -> str:
    """Rewrite an ``exact`` block (without ``...`` gaps) of a transcript or command output with the
    real output of its commands; the commands and the style of the exit lines are kept."""
    if entry.match != "exact" or entry.script or any(ln.strip() == "..." for ln in block.lines):
        return "not updated: only exact blocks without `...` gaps are rewritten (edit it by hand)"
    results = run_entry(entry, block)
    if not any(r.problem for r in results):
        return "up to date"
    style = "[exit {}]" if any(ln.strip().startswith("[exit") for ln in block.lines) else "exit={}"
    new: list[str] = []
    cmd_lines = _command_lines(block)
    for k, r in enumerate(results):
        new.extend(cmd_lines[k] if cmd_lines else [])
        out = [ln.rstrip() for ln in r.output if not _PROGRESS.search(ln)]
        while out and not out[0].strip():
            out.pop(0)
        while out and not out[-1].strip():
            out.pop()
        new.extend(out)
        if r.exit != 0 or r.step.exit != 0:
            new.append(style.format(r.exit))
    path = ROOT / block.file
    lines = path.read_text(encoding="utf-8").split("\n")
    start = block.line  # index of the first body line (the fence is at line - 1)
    lines[start:start + len(block.lines)] = [block.indent + ln if ln else ln for ln in new]
    path.write_text("\n".join(lines), encoding="utf-8")
    return f"rewritten ({len(block.lines)} -> {len(new)} lines)"


def _command_lines(block: Block) -> list[list[str]]:
    out, i, lines = [], 0, block.lines
    while i < len(lines):
        if lines[i].startswith("$ "):
            cur = [lines[i]]
            while cur[-1].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cur.append(lines[i])
            out.append(cur)
        i += 1
    return out


# ---------------------------------------------------------------- helper CLI

def _main(argv: list[str]) -> int:
    blocks = all_blocks()
    entries = load_manifest()
    if not argv or argv[0] == "list":
        for e in entries:
            b = find_block(e, blocks)
            where = f"{b.file}:{b.line}" if b else f"{e.file}: NOT FOUND"
            print(f"{e.check:5} {e.id:32} {where}  {e.reason[:60]}")
        return 0
    if argv[0] == "unlisted":
        listed = {(e.file, e.first.strip()) for e in entries}
        for b in blocks:
            if b.needs_entry and (b.file, b.first) not in listed:
                print(f"{b.file}:{b.line} [{b.tag}] {b.first[:100]}")
        return 0
    if argv[0] == "run":
        bad = 0
        for e in entries:
            if e.id not in argv[1:]:
                continue
            b = find_block(e, blocks)
            if b is None:
                print(f"== {e.id}: block not found in {e.file}")
                bad += 1
                continue
            for r in run_entry(e, b):
                print(f"== {e.id}: $ {r.command}   [exit {r.exit}, {r.seconds:.1f} s]")
                print("\n".join(r.output).rstrip("\n"))
                if r.problem:
                    bad += 1
                    print(f"-- DRIFT:\n{r.problem}")
        return 1 if bad else 0
    if argv[0] == "update":
        for e in entries:
            if e.id in argv[1:]:
                # the doc is re-read for every entry: a rewritten block moves the ones after it
                print(f"{e.id}: {update_block(e, find_block(e, all_blocks()))}")
        return 0
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
