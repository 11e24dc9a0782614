"""`python -m fdb serve-judge`: what it takes to serve the Qwen judge, or run your launch command."""

from __future__ import annotations

import typer

EXPLAIN = """\
fdb cannot start the Qwen judge itself: it bundles no LLM server and no judge checkpoint
(JUDGE=qwen needs Qwen3.8-27B on a GPU with at least 80 GB). Serve it with your own
OpenAI-compatible server, then let `judge` find it:

  checkpoint   {model}
  port         {port} (JUDGE_PORT; the server may use {nccl} for NCCL)
  judge config {config}
               (judge-config.json: model and tokenizer revisions, served model, precision,
               decoding, seeds, and the sha256 of the server's launch receipt; see docs/formats.md)
  endpoint     export JUDGE_URL=http://127.0.0.1:{port}/v1

For example, in the judge's own venv:
  python -m sglang.launch_server --model-path {model} --port {port} --host 127.0.0.1

or let this command run it in the foreground (Ctrl-C stops it):
  python -m fdb serve-judge -- python -m sglang.launch_server --model-path {model} --port {port}

Without a judge, `judge` leaves the labels and ratings pending; JUDGE=gpt with OPENAI_API_KEY
uses the paper's GPT judge instead."""


def explanation() -> str:
    from fdb.settings import load_settings

    s = load_settings()
    model = s.judge_model_path or (s.work / "models" / "Qwen3.8-27B")
    return EXPLAIN.format(model=model, port=s.judge_port, nccl=s.judge_port + 1, config=s.judge_config)


def serve_judge(ctx: typer.Context) -> None:
    """Without arguments: explain how to serve the Qwen judge (checkpoint, port, judge config path),
    since fdb cannot start one here. With `-- COMMAND ...`: run that command in the foreground with
    JUDGE_PORT, JUDGE_MODEL_PATH and JUDGE_CONFIG exported, and log it to
    $FDB_WORK/judge/port-<port>/judge-server.log as well as the terminal."""
    command = list(ctx.args)
    if not command:
        typer.echo(explanation())
        raise SystemExit(1)
    raise SystemExit(run_command(command))


def run_command(command: list[str]) -> int:
    import os
    import subprocess

    from fdb.settings import load_settings

    s = load_settings()
    model = s.judge_model_path or (s.work / "models" / "Qwen3.8-27B")
    env = dict(os.environ, JUDGE_PORT=str(s.judge_port), JUDGE_MODEL_PATH=str(model), JUDGE_CONFIG=str(s.judge_config))
    s.judge_config.parent.mkdir(parents=True, exist_ok=True)
    log_path = s.judge_config.parent / "judge-server.log"
    typer.echo(f"serve-judge: running {' '.join(command)} (port {s.judge_port}; log {log_path})", err=True)
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
    app.command("serve-judge", short_help="How to serve the Qwen judge (fdb cannot start one), or run your launch command.",
                context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(serve_judge)
