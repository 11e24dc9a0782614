"""Official judge texts, read at run time from the user's Full-Duplex-Bench checkout and
hash-verified against the one pin table (``fdb.official_source``); fdb never vendors them
(CC BY-NC 4.0).

- ``instruction/behavior.txt``: the v1.5 behavior system prompt.
- ``eval_user_interruption.py``: the v1.0 interruption scorer. Its system prompt, user-message
  f-string, model name and seed are extracted with ``ast`` (the module is never imported or
  run), and its parse pattern must be the official one (``fdb-official-scoring.md`` §3.3).

A file that differs from its pin stops with its path and both hashes, unless the user accepted
the checkout's revision (``--accept-revision``); the ``CheckoutCheck`` that vouched for the text
travels with it into the judge's parameters and outputs.

A checkout is its root (holding ``v1_v1.5/evaluation/``) or that evaluation directory itself.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from fdb.errors import FdbError
from fdb.io import sha256_bytes
from fdb.official_source import (
    BEHAVIOR_PROMPT,
    EVALUATION_DIR,
    PINNED_REVISION,
    RELEVANCE_SCORER,
    CheckoutCheck,
    pinned_path,
    verify_checkout,
)

OFFICIAL_PARSE_PATTERN = r"Analysis:\s*(.*?)\nI would rate the AI's response as (\d+)"
TEMPLATE_FIELDS = {
    "in_before_interrupt_text": "context",
    "in_interrupt_text": "interrupt",
    "out_after_interrupt_text": "response",
}


def evaluation_dir(source: Path) -> Path:
    """The directory of the official evaluation scripts inside a checkout."""
    source = Path(source).expanduser()
    for rel in (BEHAVIOR_PROMPT, RELEVANCE_SCORER):
        path = pinned_path(source, rel)
        if path.is_file():
            return source / EVALUATION_DIR if path == source / rel else source
    raise FdbError(
        f"{source} is not a Full-Duplex-Bench checkout (no {BEHAVIOR_PROMPT})",
        f"pass --reference-source pointing at a checkout at revision {PINNED_REVISION[:7]}",
    )


@dataclass(frozen=True)
class OfficialText:
    path: Path
    sha256: str
    text: str
    check: CheckoutCheck  # what vouched for the text: the pin, or the revision the user accepted


def _read_checked(source: Path, rel: str, accept_revision: str | None) -> OfficialText:
    evaluation_dir(source)  # a directory that is no checkout at all says so
    check = verify_checkout(source, [rel], accept_revision=accept_revision)
    path = pinned_path(source, rel)
    data = path.read_bytes()
    if sha256_bytes(data) != check.files[rel]:  # the text used is the text checked
        raise FdbError(
            f"{path} changed while fdb read it", "rerun when nothing writes into the checkout"
        )
    return OfficialText(path=path, sha256=check.files[rel], text=data.decode("utf-8"), check=check)


def behavior_prompt(source: Path, accept_revision: str | None = None) -> OfficialText:
    """The official behavior prompt, verified against the pin table (or an accepted revision)."""
    return _read_checked(Path(source), BEHAVIOR_PROMPT, accept_revision)


@dataclass(frozen=True)
class RelevanceSource:
    """The official relevance prompt and message template, as read from the scorer file."""

    path: Path
    sha256: str
    system_prompt: str
    template: tuple[str | tuple[str], ...]  # literal text, or (field,) for a placeholder
    model: str
    seed: int
    check: CheckoutCheck

    def user_message(self, context: str, interrupt: str, response: str) -> str:
        values = {"context": context, "interrupt": interrupt, "response": response}
        return "".join(
            part if isinstance(part, str) else str(values[part[0]]) for part in self.template
        )


def _assigned(tree: ast.AST) -> dict[str, ast.expr]:
    found: dict[str, ast.expr] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            found.setdefault(node.targets[0].id.lower().lstrip("_"), node.value)
    return found


def _template(node: ast.expr, path: Path) -> tuple[str | tuple[str], ...]:
    if not isinstance(node, ast.JoinedStr):
        raise FdbError(
            f"{path}: user_msg is not an f-string", "the scorer file is not the official one"
        )
    parts: list[str | tuple[str]] = []
    for value in node.values:
        if isinstance(value, ast.Constant) and isinstance(value.value, str):
            parts.append(value.value)
        elif (
            isinstance(value, ast.FormattedValue)
            and isinstance(value.value, ast.Name)
            and value.value.id in TEMPLATE_FIELDS
            and value.conversion == -1
            and value.format_spec is None
        ):
            parts.append((TEMPLATE_FIELDS[value.value.id],))
        else:
            raise FdbError(
                f"{path}: unexpected placeholder in user_msg",
                "the scorer file is not the official one",
            )
    fields = sorted(p[0] for p in parts if isinstance(p, tuple))
    if fields != sorted(TEMPLATE_FIELDS.values()):
        raise FdbError(
            f"{path}: user_msg has fields {fields}", "the scorer file is not the official one"
        )
    return tuple(parts)


def _constant(found: dict[str, ast.expr], name: str, kind: type, path: Path):
    node = found.get(name)
    if not (isinstance(node, ast.Constant) and isinstance(node.value, kind)):
        raise FdbError(f"{path}: no {name} constant", "the scorer file is not the official one")
    return node.value


def _check_pattern(tree: ast.AST, path: Path) -> None:
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "compile"
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            if node.args[0].value == OFFICIAL_PARSE_PATTERN:
                return
    raise FdbError(
        f"{path}: the rating parse pattern is not the official one",
        "the scorer file is not the official one",
    )


def relevance_source(source: Path, accept_revision: str | None = None) -> RelevanceSource | None:
    """The official relevance prompt and message from a checkout; None when it has no scorer."""
    if not pinned_path(source, RELEVANCE_SCORER).is_file():
        return None
    official = _read_checked(Path(source), RELEVANCE_SCORER, accept_revision)
    path, text = official.path, official.text
    tree = ast.parse(text)
    found = _assigned(tree)
    _check_pattern(tree, path)
    return RelevanceSource(
        path=path,
        sha256=official.sha256,
        system_prompt=_constant(found, "system_msg", str, path),
        template=_template(found.get("user_msg"), path),
        model=_constant(found, "model_name", str, path),
        seed=_constant(found, "seed", int, path),
        check=official.check,
    )
