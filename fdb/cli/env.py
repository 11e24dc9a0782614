"""`python -m fdb env`: the settings as shell exports, for `eval "$(python -m fdb env)"`."""

from __future__ import annotations

import shlex
import sys

import typer

from fdb.settings import load_settings


def env_lines() -> list[str]:
    """`export NAME=value` for every runbook setting (the defaults resolved), in the runbook's
    order."""
    s = load_settings()
    values = [
        ("FDB_WORK", s.work),
        ("JUDGE", s.judge),
        ("GPU", s.gpu),
        ("SERVER_PORT", s.server_port),
        ("JUDGE_PORT", s.judge_port),
        ("MODEL_PATH", s.model_path),
        ("MODEL_REVISION", s.model_revision),
        ("JUDGE_MODEL_PATH", s.judge_model_path),
        ("SESSION_TIMEOUT_S", f"{s.session_timeout_s:g}"),
        ("V10_SESSION_TIMEOUT_S", f"{s.v10_session_timeout_s:g}"),
        ("SCORING_VENV", s.scoring_venv),
        # fdb scores in the interpreter that runs it unless SCORING_VENV names another venv
        (
            "SCORING_PYTHON",
            (s.scoring_venv / "bin" / "python") if s.scoring_venv else sys.executable,
        ),
        ("JUDGE_CONFIG", s.judge_config),
        ("JUDGE_URL", f"http://127.0.0.1:{s.judge_port}/v1"),
        ("SERVER_URL", f"ws://127.0.0.1:{s.server_port}/v1/realtime"),
    ]
    lines = []
    for name, value in values:
        if value is None:
            lines.append(f"# {name} is unset (no default in fdb)")
        else:
            lines.append(f"export {name}={shlex.quote(str(value))}")
    return lines


def env() -> None:
    """Print the runbook's settings as `export` lines with their defaults resolved (ports from the
    GPU index), so manual scoring commands see the same values: eval "$(python -m fdb env)"."""
    print("\n".join(env_lines()))


def register(app: typer.Typer) -> None:
    app.command("env", short_help='Print the settings as exports: eval "$(python -m fdb env)".')(
        env
    )
