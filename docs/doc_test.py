"""Runs the command-line examples in README.md and docs/*.md.

Usage: doc_test.py --spillway BINARY [--root REPO] [--list] [FILE.md ...]

Every fenced code block that shows shell commands is an example:

- a ```sh, ```bash or ```shell block: each line is a command (a line ending
  in a backslash continues on the next; blank and `#` lines are ignored), or,
  when its lines start with `$ `, as in a console block below;
- a ```console block or an unlabelled ``` block: the lines that start with
  `$ ` are commands (with their backslash continuations), the rest is the
  output they print, which is not compared;
- a ```python block: a script, run with this Python (/usr/bin/python3 under
  CTest), that makes another example's input.

A shell block runs when one of its commands invokes `spillway` (the CLI, as
`spillway` or `build/<preset>/src/cli/spillway`; both run BINARY); shell
blocks that do not (set-up and build commands) are left alone. Python blocks
always run. The blocks of one file run in order, in one temporary directory
of their own, so a block can read what an earlier block of the same file
wrote. A command that exits non-zero fails the test, naming the file and the
line of the command.

An HTML comment right before a block's opening fence (blank lines between
are allowed) changes how it runs; more than one may be given:

  <!-- doc-test: skip (REASON) -->   not run; the reason is printed
  <!-- doc-test: needs torch -->     run only if this Python imports torch,
                                     torchvision and onnx; else skipped, saying so
  <!-- doc-test: needs module -->    run only if the Python module was built
                                     (BINARY's build folder has python/spillway,
                                     which goes on PYTHONPATH); else skipped
  <!-- doc-test: file NAME -->       not run: the block's text is written to
                                     NAME in the file's directory before the
                                     file's first command, so a command may
                                     read it wherever it stands
  <!-- doc-test: run -->             run a shell block that does not invoke
                                     spillway
  <!-- doc-test: run last -->        run after the file's other blocks (an
                                     overview that uses files made below it)
"""

import argparse
import dataclasses
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

MARKER = re.compile(r"^\s*<!--\s*doc-test:\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(\s*)```\s*([A-Za-z0-9_+-]*)\s*$")
SHELL_LANGS = {"sh", "bash", "shell"}
CONSOLE_LANGS = {"console", ""}
# `spillway` as a command word, or the CLI's path in a build folder.
SPILLWAY_WORD = re.compile(r"(?:(?<=^)|(?<=[\s;&|(`]))(?:build/[A-Za-z0-9_.-]+/src/cli/)?spillway(?=\s|$|[;&|)`])")
COMMAND_TIMEOUT_S = 300


@dataclasses.dataclass
class Command:
    line: int  # 1-based line of its first line in the Markdown file
    text: str


@dataclasses.dataclass
class Block:
    path: str
    line: int  # 1-based line of the opening fence
    lang: str
    body: list  # (line number, text)
    markers: list  # the marker texts before it

    def commands(self):
        lines = self.body
        if self.lang == "python":
            return []
        console = self.lang in CONSOLE_LANGS or any(
            text.lstrip().startswith("$ ") for _, text in lines)
        commands = []
        i = 0
        while i < len(lines):
            number, text = lines[i]
            stripped = text.strip()
            i += 1
            if console:
                if not stripped.startswith("$ "):
                    continue
                stripped = stripped[2:].strip()
            if not stripped or stripped.startswith("#"):
                continue
            parts = [stripped]
            while parts[-1].endswith("\\") and i < len(lines):
                parts[-1] = parts[-1][:-1].rstrip()
                parts.append(lines[i][1].strip())
                i += 1
            commands.append(Command(number, " ".join(parts)))
        return commands

    def invokes_spillway(self):
        return any(SPILLWAY_WORD.search(c.text) for c in self.commands())

    def text(self):
        return "".join(text + "\n" for _, text in self.body)


def parse_blocks(path):
    """The fenced blocks of a Markdown file, each with the markers before it."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks = []
    markers = []
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = MARKER.match(line)
        fence = FENCE.match(line)
        if marker:
            markers.append((i + 1, marker.group(1)))
            i += 1
            continue
        if fence:
            indent, lang = fence.group(1), fence.group(2).lower()
            start = i + 1
            body = []
            i += 1
            while i < len(lines) and not re.match(r"^\s*```\s*$", lines[i]):
                text = lines[i]
                if text.startswith(indent):
                    text = text[len(indent):]
                body.append((i + 1, text))
                i += 1
            i += 1  # the closing fence
            blocks.append(Block(path, start, lang, body, [m for _, m in markers]))
            markers = []
            continue
        if line.strip() and markers:
            # A marker applies only to the block right after it.
            number, text = markers[0]
            raise SystemExit(f"{path}:{number}: doc-test marker '{text}' is not right before a "
                             "code block")
        i += 1
    if markers:
        number, text = markers[0]
        raise SystemExit(f"{path}:{number}: doc-test marker '{text}' is not before a code block")
    return blocks


def parse_marker(path, block, text):
    """(kind, argument) of a marker; exits on one it does not know."""
    m = re.fullmatch(r"skip\s*\((.+)\)", text)
    if m:
        return "skip", m.group(1).strip()
    if text == "needs torch":
        return "needs", "torch"
    if text == "needs module":
        return "needs", "module"
    m = re.fullmatch(r"file\s+([A-Za-z0-9_.-]+)", text)
    if m:
        return "file", m.group(1)
    if text == "run":
        return "run", None
    if text == "run last":
        return "last", None
    raise SystemExit(f"{path}:{block.line}: unknown doc-test marker '{text}' (know: "
                     "'skip (REASON)', 'needs torch', 'needs module', 'file NAME', 'run', 'run last')")


def have_torch():
    # The blocks that need torch export or read ONNX files with it, which
    # takes the onnx package too (a machine can have Debian's PyTorch
    # without it).
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        import onnx  # noqa: F401
    except ImportError as error:
        return f"{error.name} is not installed (python3-torch, python3-torchvision, python3-onnx)"
    return None


def tail(text, lines=20):
    parts = text.rstrip("\n").split("\n")
    return "\n".join("    | " + p for p in parts[-lines:])


def module_dir(binary):
    """The build folder's python/ (holding the spillway package), or None."""
    build = os.path.dirname(os.path.dirname(os.path.dirname(binary)))  # <build>/src/cli/spillway
    folder = os.path.join(build, "python")
    return folder if os.path.isfile(os.path.join(folder, "spillway", "__init__.py")) else None


def run_file(path, root, binary, shims, list_only):
    """Runs one Markdown file's examples; returns (ran, skipped, failures)."""
    rel = os.path.relpath(path, root)
    blocks = parse_blocks(path)
    plan = []  # (block, action, detail)
    last = []  # the same, for the blocks marked `run last`
    torch_missing = None
    for block in blocks:
        kinds = [parse_marker(rel, block, m) for m in block.markers]
        skip = [arg for kind, arg in kinds if kind == "skip"]
        files = [arg for kind, arg in kinds if kind == "file"]
        needs_torch = any(kind == "needs" and arg == "torch" for kind, arg in kinds)
        needs_module = any(kind == "needs" and arg == "module" for kind, arg in kinds)
        forced = any(kind == "run" for kind, _ in kinds)
        target = last if any(kind == "last" for kind, _ in kinds) else plan
        if skip:
            target.append((block, "skip", skip[0]))
        elif files:
            target.append((block, "file", files[0]))
        elif block.lang == "python" or (
                (block.lang in SHELL_LANGS or block.lang in CONSOLE_LANGS) and
                (forced or block.invokes_spillway())):
            if needs_module and module_dir(binary) is None:
                target.append((block, "skip", "needs the Python module: install pybind11-dev "
                                              "and python3-dev and rebuild"))
                continue
            if needs_torch:
                if torch_missing is None:
                    torch_missing = have_torch() or ""
                if torch_missing:
                    target.append((block, "skip", f"needs torch: {torch_missing}"))
                    continue
            target.append((block, "run", None))
    plan += last
    if not plan:
        return 0, 0, []
    ran = skipped = 0
    failures = []
    with tempfile.TemporaryDirectory(prefix="doc_test.") as work:
        for block, action, detail in plan:
            if action == "file":
                with open(os.path.join(work, detail), "w", encoding="utf-8") as f:
                    f.write(block.text())
                print(f"{rel}:{block.line}: file {detail}")
        env = dict(os.environ)
        env["PATH"] = shims + os.pathsep + env.get("PATH", "")
        if module_dir(binary) is not None:
            env["PYTHONPATH"] = os.pathsep.join(
                filter(None, [module_dir(binary), env.get("PYTHONPATH")]))
        for block, action, detail in plan:
            if action == "skip":
                print(f"{rel}:{block.line}: SKIPPED ({detail})")
                skipped += 1
                continue
            if action != "run":
                continue
            if block.lang == "python":
                steps = [(block.line, "python block", [sys.executable, "-"], block.text())]
            else:
                steps = [(c.line, c.text,
                          ["bash", "-c", SPILLWAY_WORD.sub(shlex.quote(binary), c.text)], None)
                         for c in block.commands()]
            for line, shown, argv, stdin in steps:
                where = f"{rel}:{line}"
                if list_only:
                    print(f"{where}: $ {shown}")
                    continue
                start = time.monotonic()
                try:
                    result = subprocess.run(argv, cwd=work, env=env, input=stdin, text=True,
                                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            timeout=COMMAND_TIMEOUT_S)
                    code = result.returncode
                    output = result.stdout
                except subprocess.TimeoutExpired as timeout:
                    code = f"timeout after {COMMAND_TIMEOUT_S} s"
                    output = timeout.stdout or ""
                    if isinstance(output, bytes):
                        output = output.decode(errors="replace")
                took = time.monotonic() - start
                ran += 1
                if code == 0:
                    print(f"{where}: ok ({took:.1f} s) $ {shown}")
                else:
                    print(f"{where}: FAILED (exit {code}, {took:.1f} s) $ {shown}\n{tail(output)}")
                    failures.append(f"{where}: exit {code}: {shown}")
    return ran, skipped, failures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--spillway", required=True, help="the built spillway binary")
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="the repository (default: this file's parent's)")
    parser.add_argument("--list", action="store_true",
                        help="print the commands that would run, run nothing")
    parser.add_argument("files", nargs="*", help="Markdown files (default: README.md, docs/*.md)")
    args = parser.parse_args()
    binary = os.path.abspath(args.spillway)
    if not os.access(binary, os.X_OK):
        print(f"doc_test: {binary} is not an executable; build the spillway target")
        return 1
    files = args.files or ([os.path.join(args.root, "README.md")] +
                           sorted(glob.glob(os.path.join(args.root, "docs", "*.md"))))
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="doc_test_bin.") as shims:
        # `spillway` and `python3` in a command run BINARY and this Python.
        os.symlink(binary, os.path.join(shims, "spillway"))
        os.symlink(sys.executable, os.path.join(shims, "python3"))
        totals = [0, 0]
        failures = []
        for path in files:
            ran, skipped, failed = run_file(path, args.root, binary, shims, args.list)
            totals[0] += ran
            totals[1] += skipped
            failures += failed
    print(f"doc_test: {totals[0]} commands run, {totals[1]} blocks skipped, "
          f"{len(failures)} failed, {time.monotonic() - start:.1f} s")
    for failure in failures:
        print(f"  {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
