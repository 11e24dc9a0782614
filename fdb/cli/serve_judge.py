"""`python -m fdb serve-judge`: what it takes to serve the Qwen judge, or run your launch
command."""

from __future__ import annotations

import os
import subprocess

import typer
from pydantic import ValidationError

from fdb.errors import FdbError
from fdb.io import redact_secrets, validation_summary
from fdb.settings import load_settings

EXPLAIN = """\
fdb cannot start the Qwen judge itself: it bundles no LLM server and no judge checkpoint
(JUDGE=qwen needs Qwen3.8-27B on a GPU with at least 80 GB). Serve it with your own
OpenAI-compatible server, then let `judge` find it:

  checkpoint   {model}
  port         {port} (JUDGE_PORT; the server may use {nccl} for NCCL)
  judge config {config}
               (judge-config.json: model and tokenizer revisions, served model, precision,
               decoding, seeds, and the sha256 of the server's launch receipt; `serve-judge --
               COMMAND` writes both for the command it starts; see docs/formats.md)
  endpoint     export JUDGE_URL=http://127.0.0.1:{port}/v1

For example, in the judge's own venv:
  python -m sglang.launch_server --model-path {model} --port {port} --host 127.0.0.1

or let this command run it in the foreground (Ctrl-C stops it) and write the judge config and
launch receipt for it (the checkpoint's commit comes from {model}.revision or --model-revision):
  python -m fdb serve-judge --runtime "sglang X.Y" -- python -m sglang.launch_server --model-path \
{model} --port {port}

Without a judge, `judge` leaves the labels and ratings pending; JUDGE=gpt with OPENAI_API_KEY
uses the paper's GPT judge instead."""


def explanation() -> str:
    s = load_settings()
    model = s.judge_model_path or (s.work / "models" / "Qwen3.8-27B")
    return EXPLAIN.format(
        model=model, port=s.judge_port, nccl=s.judge_port + 1, config=s.judge_config
    )


def serve_judge(
    ctx: typer.Context,
    model_id: str = typer.Option(
        "Qwen/Qwen3.8-27B", help="Hugging Face id of the judge checkpoint (judge config model_id)."
    ),
    model_revision: str | None = typer.Option(
        None,
        help="Full 40-hex commit of the checkpoint; default: the "
        "content of <JUDGE_MODEL_PATH>.revision.",
    ),
    tokenizer_id: str | None = typer.Option(None, help="Tokenizer id (default: --model-id)."),
    tokenizer_revision: str | None = typer.Option(
        None, help="Full 40-hex commit of the tokenizer (default: the model revision)."
    ),
    served_model: str = typer.Option(
        "qwen3.8-27b", help="Model name the server answers with (judge config served_model)."
    ),
    precision: str = typer.Option("bf16", help="Precision the server loads the checkpoint in."),
    runtime: str | None = typer.Option(
        None,
        help="Serving runtime and version, e.g. 'sglang 0.5.2' (recorded in the launch receipt).",
    ),
) -> None:
    """Without a command: explain how to serve the Qwen judge (checkpoint, port, judge config path),
    since fdb cannot start one here. With `-- COMMAND ...`: write the judge config and its launch
    receipt for COMMAND ($FDB_WORK/judge/port-<port>/judge-config.json and launch-receipt.json,
    atomically, secrets redacted, no key), then run COMMAND in the foreground with JUDGE_PORT,
    JUDGE_MODEL_PATH and JUDGE_CONFIG exported, logged to judge-server.log there as well as the
    terminal. `judge` and `generate --all-stages` then find the config (export JUDGE_URL)."""
    command = list(ctx.args)
    if not command:
        typer.echo(explanation())
        raise SystemExit(1)
    config = write_config(
        command,
        model_id=model_id,
        model_revision=model_revision,
        tokenizer_id=tokenizer_id,
        tokenizer_revision=tokenizer_revision,
        served_model=served_model,
        precision=precision,
        runtime=runtime,
    )
    typer.echo(f"serve-judge: wrote {config} and its launch receipt", err=True)
    raise SystemExit(run_command(command))


def _model_revision(model, given: str | None) -> str:
    if given:
        return given
    path = model.parent / f"{model.name}.revision"
    if not path.is_file():
        raise FdbError(
            f"serve-judge needs the judge checkpoint's commit: no --model-revision and no {path}",
            f"pass --model-revision <40-hex commit>, or write it to {path}",
        )
    return path.read_text(encoding="utf-8").strip()


def write_config(
    command: list[str],
    *,
    model_id: str,
    model_revision: str | None,
    tokenizer_id: str | None,
    tokenizer_revision: str | None,
    served_model: str,
    precision: str,
    runtime: str | None,
):
    """Write launch-receipt.json and judge-config.json for ``command``; returns the config path.
    An invalid value (a revision that is not a full commit) stops before anything is written."""
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from judges.launch import launch_receipt, write_launch

    s = load_settings()
    model = s.judge_model_path or (s.work / "models" / "Qwen3.8-27B")
    revision = _model_revision(model, model_revision)
    try:
        receipt = launch_receipt(
            command,
            runtime=runtime,
            model_id=model_id,
            model_revision=revision,
            model_path=str(model),
            tokenizer_id=tokenizer_id or model_id,
            tokenizer_revision=tokenizer_revision or revision,
            precision=precision,
            port=s.judge_port,
        )
        write_launch(s.judge_config, receipt, served_model)
    except ValidationError as exc:
        raise FdbError(
            f"serve-judge: the judge config would not be valid: {validation_summary(exc)}",
            "pass full 40-hex commits to --model-revision / --tokenizer-revision",
        ) from exc
    return s.judge_config


def run_command(command: list[str]) -> int:
    # lazy: keeps `fdb --help` fast; loaded when the command runs
    from fdb.provenance import redact_command

    s = load_settings()
    model = s.judge_model_path or (s.work / "models" / "Qwen3.8-27B")
    env = dict(
        os.environ,
        JUDGE_PORT=str(s.judge_port),
        JUDGE_MODEL_PATH=str(model),
        JUDGE_CONFIG=str(s.judge_config),
    )
    s.judge_config.parent.mkdir(parents=True, exist_ok=True)
    log_path = s.judge_config.parent / "judge-server.log"
    shown = " ".join(redact_command(command))
    typer.echo(
        f"serve-judge: running {redact_secrets(shown)} (port {s.judge_port}; log {log_path})",
        err=True,
    )
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            for line in proc.stdout:
                log.write(line)
                log.flush()
                typer.echo(line.decode("utf-8", "replace").rstrip("\n"), err=True)
            return proc.wait()
        except KeyboardInterrupt:
            proc.terminate()
            return proc.wait()


def register(app: typer.Typer) -> None:
    app.command(
        "serve-judge",
        short_help="How to serve the Qwen judge (fdb cannot start one), or run your launch "
        "command.",
        context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    )(serve_judge)
