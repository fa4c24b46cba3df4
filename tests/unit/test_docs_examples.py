"""The documentation's examples stay true: every shell command in README.md and docs/*.md that
names this project's CLI, scripts, benchmarks or workers is checked against the code, and every
relative link points to a file (and heading) that exists.

What counts as a command: every line of a fenced block marked ``bash``, ``sh`` or ``shell``; the
``$ `` lines of a ``console`` block; and, in an unmarked block, the lines that start with
``python -m orchestrate`` or ``$ ``. Lines ending in ``\\`` are joined, a leading ``$ `` and a
trailing ``# comment`` are dropped, and a line is cut into commands at ``&&``, ``||``, ``;`` and
``|``; a ``$(...)`` substitution is a command of its own. Then:

- ``python -m orchestrate ...`` (after ``VAR=value`` assignments; also ``python3`` and
  ``.venv/bin/python``): its options, up to the first ``--``, must parse with the real parser,
  the combination must be one ``run`` accepts, and a ``-m app.NAME`` target after ``--`` must be
  a worker of ``app/`` whose own options parse (where torch is installed);
- ``bash scripts/NAME.sh``: the script exists;
- ``python -m benchmarks.NAME``: ``benchmarks/NAME.py`` exists;
- ``torchrun ... -m app.NAME ...`` (also inside ``bash -c '...'``): as a target above.

Anything else (docker, apt-get, pip, cd, export, ...) is not checked.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.util
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional
from unittest import mock

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_LANGUAGES = {"bash", "sh", "shell"}
CONSOLE_LANGUAGES = {"console", "shell-session"}
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
PYTHON = re.compile(r"^(?:\S*/)?python(?:3(?:\.\d+)?)?$")
MIN_CHECKED = 25


@dataclass(frozen=True)
class Command:
    """One command of a documentation example."""

    path: Path
    line: int  # 1-based line of the example's first line in its file
    text: str  # the command, joined, without prompt or comment
    kind: str  # orchestrate, script, benchmark, app or "" (not checked)
    words: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


# Reading the examples ---------------------------------------------------------------------------


def code_blocks(path: Path) -> Iterator[tuple[str, list[tuple[int, str]]]]:
    """Every fenced code block of a Markdown file: its language and its (line number, text) lines,
    without the indentation of its fence (blocks inside list items are indented)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence = len(opening["indent"]), opening["fence"]
        language = (opening["info"].split() or [""])[0].lower()
        body: list[tuple[int, str]] = []
        i += 1
        while i < len(lines):
            closing = FENCE.match(lines[i])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence) \
                    and not closing["info"].strip():
                break
            text = lines[i]
            body.append((i + 1, text[indent:] if text[:indent].strip() == "" else text.lstrip()))
            i += 1
        i += 1
        yield language, body


def logical_lines(body: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """Physical lines joined where one ends in a backslash; each with its first line's number."""
    start, parts = 0, []
    for number, text in body:
        if not parts:
            start = number
        stripped = text.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            parts.append(stripped[:-1].strip())
            continue
        parts.append(stripped.strip())
        yield start, " ".join(p for p in parts if p)
        parts = []
    if parts:
        yield start, " ".join(p for p in parts if p)


def strip_comment(line: str) -> str:
    """The line without a trailing shell comment: a ``#`` that starts a word outside quotes."""
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        if quote == "'":
            if char == "'":
                quote = ""
        elif quote == '"':
            if char == "\\":
                i += 1
            elif char == '"':
                quote = ""
        elif char == "\\":
            i += 1
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
        i += 1
    return line.rstrip()


def split_commands(line: str) -> list[str]:
    """Cut a line into its commands: at ``&&``, ``||``, ``;`` and ``|`` outside quotes, and each
    ``$(...)`` substitution as a command of its own (replaced by ``RUN_ID`` where it stood)."""
    commands: list[str] = []
    current: list[str] = []
    quote = ""
    i = 0
    while i < len(line):
        char = line[i]
        if quote == "'":
            current.append(char)
            quote = "" if char == "'" else quote
        elif char == "\\" and i + 1 < len(line):
            current.append(line[i:i + 2])
            i += 1
        elif line.startswith("$(", i):
            depth, j = 1, i + 2
            while j < len(line) and depth:
                depth += {"(": 1, ")": -1}.get(line[j], 0)
                j += 1
            commands.extend(split_commands(line[i + 2:j - 1]))
            current.append("RUN_ID")
            i = j
            continue
        elif quote == '"':
            current.append(char)
            quote = "" if char == '"' else quote
        elif char in "'\"":
            current.append(char)
            quote = char
        elif line.startswith(("&&", "||"), i) or char in ";|":
            commands.append("".join(current))
            current = []
            i += 2 if line.startswith(("&&", "||"), i) else 1
            continue
        else:
            current.append(char)
        i += 1
    commands.append("".join(current))
    return [c.strip() for c in commands if c.strip()]


def example_lines(language: str, body: list[tuple[int, str]]) -> Iterator[tuple[int, str]]:
    """The command lines of one block, without their prompt."""
    if language in SHELL_LANGUAGES:
        for number, text in logical_lines(body):
            yield number, text[2:] if text.startswith("$ ") else text
    elif language in CONSOLE_LANGUAGES or language == "":
        # Output lines are not commands: only prompted lines (and, unmarked, CLI lines).
        for number, text in logical_lines(body):
            if text.startswith("$ "):
                yield number, text[2:]
            elif language == "" and text.startswith("python -m orchestrate"):
                yield number, text


def classify(words: list[str]) -> str:
    """Which check a command gets (see the module's text); "" for none."""
    while words and ASSIGNMENT.match(words[0]):
        words = words[1:]
    if not words:
        return ""
    if len(words) >= 3 and PYTHON.match(words[0]) and words[1] == "-m":
        if words[2] == "orchestrate":
            return "orchestrate"
        if words[2].startswith("benchmarks."):
            return "benchmark"
    if words[0] in ("bash", "sh") and len(words) > 1 and words[1].startswith("scripts/"):
        return "script"
    if any(re.search(r"\btorchrun\b", w) for w in words) and app_modules(words):
        return "app"
    return ""


def app_modules(words: list[str]) -> list[tuple[str, list[str]]]:
    """The ``-m app.NAME`` targets of a torchrun command, with their arguments; a ``bash -c``
    script is read as the command it runs."""
    found = []
    for i, word in enumerate(words):
        if " " in word and "torchrun" in word:
            found.extend(app_modules(shlex.split(word)))
        elif word == "-m" and i + 1 < len(words) and words[i + 1].startswith("app."):
            found.append((words[i + 1], [w for w in words[i + 2:] if w != "..."]))
    return found


def collect() -> list[Command]:
    commands = []
    for path in DOC_FILES:
        for language, body in code_blocks(path):
            for number, line in example_lines(language, body):
                for text in split_commands(strip_comment(line)):
                    try:
                        words = shlex.split(text)
                    except ValueError:  # unbalanced quotes: checked below if it names the project
                        words = text.split()
                    kind = classify(list(words))
                    commands.append(Command(path, number, text, kind, tuple(words)))
    return commands


COMMANDS = collect()
CHECKED = [c for c in COMMANDS if c.kind]


# Checking them ---------------------------------------------------------------------------------


def check_app_target(command: Command, module: str, args: list[str]) -> None:
    name = module[len("app."):]
    if not (ROOT / "app" / f"{name}.py").is_file():
        pytest.fail(f"{command.where}: app/{name}.py does not exist: {command.text}")
    if importlib.util.find_spec("torch") is None:
        return  # the workers' own options need torch to be read
    parse = getattr(importlib.import_module(module), "parse_args", None)
    if parse is None:
        return
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            parse(args)
    except SystemExit as exc:
        if exc.code:
            pytest.fail(f"{command.where}: {module} refuses {args}: {errors.getvalue().strip()}\n  {command.text}")


def check_orchestrate(command: Command) -> None:
    from orchestrate.cli.main import build_parser
    from orchestrate.cli.options import request_from_args, split_target
    from orchestrate.errors import UsageError

    words = list(command.words)
    while ASSIGNMENT.match(words[0]):
        words = words[1:]
    options, target = split_target(words[3:])
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            args = build_parser().parse_args(options)
    except SystemExit as exc:
        pytest.fail(f"{command.where}: the CLI refuses this example (exit {exc.code}):\n  {command.text}\n"
                    f"  {errors.getvalue().strip()}")
    assert getattr(args, "handler", None) is not None, f"{command.where}: no command given: {command.text}"
    if args.command in ("run", "plan", "export", "chaos"):
        request = request_from_args(args, target)
        try:
            request.check_combination()
        except UsageError as exc:
            if "not found" not in str(exc):  # an example's own files (--sbatch my_job.sbatch) are the reader's
                pytest.fail(f"{command.where}: the CLI refuses this combination: {exc}\n  {command.text}")
        for module, module_args in app_modules(["torchrun", *target]):
            check_app_target(command, module, module_args)
    elif target:
        pytest.fail(f"{command.where}: `{args.command}` takes no torchrun target after --: {command.text}")


class _Parsed(Exception):
    """Raised once a benchmark's options were parsed: nothing of it runs."""


def check_benchmark_options(command: Command, module: str, args: list[str]) -> None:
    """A benchmark example's options, parsed by the benchmark's own parser (its ``main(argv)``,
    stopped as soon as they are read); one whose main takes no argv is not asked."""
    import argparse
    import inspect

    loaded = importlib.import_module(module)
    if not inspect.signature(loaded.main).parameters:
        return
    parse_args, parse_known_args = argparse.ArgumentParser.parse_args, argparse.ArgumentParser.parse_known_args
    inside_parse_args = []

    def parse_then_stop(self, *given, **options):
        inside_parse_args.append(True)
        parse_args(self, *given, **options)  # (its own parse_known_args, below, returns to it)
        raise _Parsed()

    def parse_known_then_stop(self, *given, **options):
        parsed = parse_known_args(self, *given, **options)
        if inside_parse_args:
            return parsed
        raise _Parsed()  # a main that reads the rest itself (suite_cost's pytest arguments)

    errors = io.StringIO()
    try:
        with mock.patch.object(argparse.ArgumentParser, "parse_args", parse_then_stop), \
                mock.patch.object(argparse.ArgumentParser, "parse_known_args", parse_known_then_stop), \
                contextlib.redirect_stderr(errors), contextlib.redirect_stdout(io.StringIO()):
            loaded.main(args)
    except _Parsed:
        return
    except SystemExit as exc:
        pytest.fail(f"{command.where}: {module} refuses {args} (exit {exc.code}): {errors.getvalue().strip()}\n"
                    f"  {command.text}")
    pytest.fail(f"{command.where}: {module}'s main read no options with argparse: {command.text}")


@pytest.mark.parametrize("command", CHECKED, ids=[c.where for c in CHECKED])
def test_example_is_true(command: Command) -> None:
    if command.kind == "orchestrate":
        check_orchestrate(command)
    elif command.kind == "script":
        script = command.words[[w.startswith("scripts/") for w in command.words].index(True)]
        assert (ROOT / script).is_file(), f"{command.where}: {script} does not exist: {command.text}"
    elif command.kind == "benchmark":
        words = [w for w in command.words if not ASSIGNMENT.match(w)]
        module = words[2]
        path = ROOT / (module.replace(".", "/") + ".py")
        assert path.is_file(), f"{command.where}: {path.relative_to(ROOT)} does not exist: {command.text}"
        check_benchmark_options(command, module, [w for w in words[3:] if w != "..."])
    elif command.kind == "app":
        for module, args in app_modules(list(command.words)):
            check_app_target(command, module, args)


def test_enough_examples_are_checked() -> None:
    """A broken extractor must not pass by finding nothing."""
    kinds = {kind: sum(c.kind == kind for c in CHECKED) for kind in ("orchestrate", "script", "benchmark", "app")}
    print(f"{len(CHECKED)} commands checked of {len(COMMANDS)} in {len(DOC_FILES)} files: {kinds}")
    assert len(CHECKED) >= MIN_CHECKED, f"only {len(CHECKED)} commands checked: {kinds}"
    assert kinds["orchestrate"] >= 20
    assert all(count for count in kinds.values()), kinds


def test_the_extractor() -> None:
    """The pieces the examples rely on: comments, continuations, substitutions, prompts."""
    assert strip_comment("python -m orchestrate ps   # every run") == "python -m orchestrate ps"
    assert strip_comment("run --copy-env 'NCCL_#*' -- x.py") == "run --copy-env 'NCCL_#*' -- x.py"
    assert strip_comment('echo "a # b" # c') == 'echo "a # b"'
    assert strip_comment("echo a#b") == "echo a#b"
    assert split_commands("RUN=$(python -m orchestrate run -d -- x.py)  ") == [
        "python -m orchestrate run -d -- x.py", "RUN=RUN_ID"]
    assert split_commands("source .venv/bin/activate && python -m orchestrate ps | cat") == [
        "source .venv/bin/activate", "python -m orchestrate ps", "cat"]
    assert split_commands("jq -c 'select(.a | .b)' f") == ["jq -c 'select(.a | .b)' f"]
    assert list(logical_lines([(1, "a \\"), (2, "  b \\"), (3, "  c"), (4, "d")])) == [(1, "a b c"), (4, "d")]
    assert list(example_lines("console", [(1, "$ python -m orchestrate ps"), (2, "RUN ID  NODES")])) == [
        (1, "python -m orchestrate ps")]
    assert classify(["CI=true", ".venv/bin/python", "-m", "orchestrate", "ps"]) == "orchestrate"
    assert classify(["docker", "compose", "up"]) == ""
    assert classify(["srun", "bash", "-c", "exec torchrun --nnodes 2 -m app.train"]) == "app"


# Links -------------------------------------------------------------------------------------------

LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?(?P<target>[^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^(#{1,6})\s+(?P<title>.+?)\s*#*\s*$")


def prose_lines(path: Path) -> Iterator[tuple[int, str]]:
    """The lines outside fenced code blocks, with inline code removed."""
    fence = ""
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        opening = FENCE.match(text)
        if opening and (not fence or (opening["fence"][0] == fence[0] and len(opening["fence"]) >= len(fence))):
            fence = "" if fence else opening["fence"]
            continue
        if not fence:
            yield number, re.sub(r"(`+).*?\1", "", text)


def slug(title: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", title).replace("`", "").lower()
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    fence = ""
    for text in path.read_text(encoding="utf-8").splitlines():
        opening = FENCE.match(text)
        if opening and (not fence or (opening["fence"][0] == fence[0] and len(opening["fence"]) >= len(fence))):
            fence = "" if fence else opening["fence"]
            continue
        heading = None if fence else HEADING.match(text)
        if heading:
            base = slug(heading["title"])
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links() -> list[tuple[Path, int, str]]:
    """Every relative link and image of the docs (a link's text may run over two lines)."""
    links = []
    for path in DOC_FILES:
        lines = dict(prose_lines(path))
        text = "\n".join(lines.get(n, "") for n in range(1, max(lines, default=0) + 1))
        for match in LINK.finditer(text):
            target = match["target"]
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                links.append((path, text.count("\n", 0, match.start()) + 1, target))
    return links


LINKS = relative_links()


def test_docs_have_links() -> None:
    assert len(LINKS) >= 20, LINKS


@pytest.mark.parametrize("path, line, target", LINKS,
                         ids=[f"{p.relative_to(ROOT)}:{n}:{t}" for p, n, t in LINKS])
def test_relative_link_resolves(path: Path, line: int, target: str) -> None:
    file_part, _, anchor = target.partition("#")
    linked = (path.parent / file_part).resolve() if file_part else path
    where = f"{path.relative_to(ROOT)}:{line}"
    assert linked.exists(), f"{where}: {target} points to {linked}, which does not exist"
    if anchor and linked.suffix == ".md":
        assert anchor in anchors(linked), f"{where}: {target}: no heading with anchor #{anchor} in {linked.name}"


def test_every_docs_page_is_linked_from_readme() -> None:
    readme_links = {(ROOT / t.partition("#")[0]).resolve() for p, _, t in LINKS if p.name == "README.md"}
    missing = [p.name for p in DOC_FILES[1:] if p.resolve() not in readme_links]
    assert not missing, f"docs pages that README.md does not link: {missing}"


def first_line_of(path: Path) -> Optional[str]:
    lines = path.read_text(encoding="utf-8").splitlines()
    return lines[0] if lines else None


@pytest.mark.parametrize("path", DOC_FILES[1:], ids=[p.name for p in DOC_FILES[1:]])
def test_docs_page_starts_with_a_title(path: Path) -> None:
    first = first_line_of(path)
    assert first is not None and first.startswith("# "), f"{path.name} must start with a '# Title' line"
