"""Official judge texts, read at run time from the user's Full-Duplex-Bench checkout and
hash-verified; fdb never vendors them (CC BY-NC 4.0).

- ``instruction/behavior.txt``: the v1.5 behavior system prompt, pinned by sha256.
- ``eval_user_interruption.py``: the v1.0 interruption scorer. Its system prompt, user-message
  f-string, model name and seed are extracted with ``ast`` (the module is never imported or
  run), and its parse pattern must be the official one (``fdb-official-scoring.md`` §3.3). fdb
  records no pin for this file's sha256 at the runbook revision, so one must be given
  (``--reference-scorer-sha256``) until ``RELEVANCE_SCORER_SHA256`` is filled in.

A checkout is its root (holding ``v1_v1.5/evaluation/``) or that evaluation directory itself.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from fdb.errors import FdbError
from fdb.io import sha256_bytes

OFFICIAL_REVISION = "3e799c45a045256f47d5f1c9cda90157e2d2ec9e"
BEHAVIOR_PROMPT = "instruction/behavior.txt"
BEHAVIOR_SHA256 = "19e5477dac9a9a1e11de126783a0b820b3ecb70db5e91181824fa944e1947977"
RELEVANCE_SCORER = "eval_user_interruption.py"
RELEVANCE_SCORER_SHA256: str | None = None  # not known to fdb yet; see the module docstring
OFFICIAL_PARSE_PATTERN = r"Analysis:\s*(.*?)\nI would rate the AI's response as (\d+)"
TEMPLATE_FIELDS = {"in_before_interrupt_text": "context", "in_interrupt_text": "interrupt",
                   "out_after_interrupt_text": "response"}


def evaluation_dir(source: Path) -> Path:
    """The directory of the official evaluation scripts inside a checkout."""
    source = Path(source).expanduser()
    for candidate in (source / "v1_v1.5" / "evaluation", source / "evaluation", source):
        if (candidate / BEHAVIOR_PROMPT).is_file() or (candidate / RELEVANCE_SCORER).is_file():
            return candidate
    raise FdbError(f"{source} is not a Full-Duplex-Bench checkout (no v1_v1.5/evaluation/{BEHAVIOR_PROMPT})",
                   f"pass --reference-source pointing at a checkout at revision {OFFICIAL_REVISION[:7]}")


@dataclass(frozen=True)
class OfficialText:
    path: Path
    sha256: str
    text: str


def _read_pinned(path: Path, expected: str, what: str) -> OfficialText:
    data = path.read_bytes()
    actual = sha256_bytes(data)
    if actual != expected:
        raise FdbError(f"{path} has sha256 {actual}, not the pinned {expected}",
                       f"{what} must come from Full-Duplex-Bench at revision {OFFICIAL_REVISION[:7]}; "
                       "check out that revision (fdb uses no other text)")
    return OfficialText(path=path, sha256=actual, text=data.decode("utf-8"))


def behavior_prompt(source: Path) -> OfficialText:
    """The official behavior prompt, verified against its pinned sha256."""
    path = evaluation_dir(source) / BEHAVIOR_PROMPT
    if not path.is_file():
        raise FdbError(f"{path} does not exist", "pass --reference-source pointing at a Full-Duplex-Bench checkout")
    return _read_pinned(path, BEHAVIOR_SHA256, "the behavior prompt")


@dataclass(frozen=True)
class RelevanceSource:
    """The official relevance prompt and message template, as read from the scorer file."""

    path: Path
    sha256: str
    system_prompt: str
    template: tuple[str | tuple[str], ...]  # literal text, or (field,) for a placeholder
    model: str
    seed: int

    def user_message(self, context: str, interrupt: str, response: str) -> str:
        values = {"context": context, "interrupt": interrupt, "response": response}
        return "".join(part if isinstance(part, str) else str(values[part[0]]) for part in self.template)


def _assigned(tree: ast.AST) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            found.setdefault(node.targets[0].id.lower().lstrip("_"), node.value)
    return found


def _template(node: ast.expr, path: Path) -> tuple[str | tuple[str], ...]:
    if not isinstance(node, ast.JoinedStr):
        raise FdbError(f"{path}: user_msg is not an f-string", "the scorer file is not the official one")
    parts: list[str | tuple[str]] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        elif (isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name)
              and value.value.id in TEMPLATE_FIELDS and value.conversion == -1 and value.format_spec is None):
            parts.append((TEMPLATE_FIELDS[value.value.id],))
        else:
            raise FdbError(f"{path}: unexpected placeholder in user_msg", "the scorer file is not the official one")
    fields = sorted(p[0] for p in parts if isinstance(p, tuple))
    if fields != sorted(TEMPLATE_FIELDS.values()):
        raise FdbError(f"{path}: user_msg has fields {fields}", "the scorer file is not the official one")
    return tuple(parts)


def _constant(found: dict[str, ast.expr], name: str, kind: type, path: Path):
    node = found.get(name)
    if not (isinstance(node, ast.Constant) and isinstance(node.value, kind)):
        raise FdbError(f"{path}: no {name} constant", "the scorer file is not the official one")
    return node.value


def _check_pattern(tree: ast.AST, path: Path) -> None:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "compile"
                and node.args and isinstance(node.args[0], ast.Constant)):
            if node.args[0].value == OFFICIAL_PARSE_PATTERN:
                return
    raise FdbError(f"{path}: the rating parse pattern is not the official one",
                   "the scorer file is not the official one")


def relevance_source(source: Path, expected_sha256: str | None = None) -> RelevanceSource | None:
    """The official relevance prompt and message from a checkout; None when it has no scorer."""
    path = evaluation_dir(source) / RELEVANCE_SCORER
    if not path.is_file():
        return None
    pin = expected_sha256 or RELEVANCE_SCORER_SHA256
    data = path.read_bytes()
    if pin is None:
        raise FdbError(f"fdb has no pinned sha256 for {path} (its sha256 is {sha256_bytes(data)})",
                       f"check that the checkout is at revision {OFFICIAL_REVISION[:7]}, then pass "
                       "--reference-scorer-sha256 with that value")
    text = _read_pinned(path, pin, "the interruption scorer").text
    tree = ast.parse(text)
    found = _assigned(tree)
    _check_pattern(tree, path)
    return RelevanceSource(path=path, sha256=pin, system_prompt=_constant(found, "system_msg", str, path),
                           template=_template(found.get("user_msg"), path),
                           model=_constant(found, "model_name", str, path),
                           seed=_constant(found, "seed", int, path))
