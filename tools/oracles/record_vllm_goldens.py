#!/usr/bin/env python3
"""Record golden scheduler traces from vLLM 0.32.0's real v1 scheduler (sync engine, no prefix caching).

Regenerate (from the repo root, /work/main):

    bash ../shared/oracles/install_vllm_oracle_venv.sh <venv>      # once; e.g. /work/venv-vllm
    <venv>/bin/python tools/oracles/record_vllm_goldens.py          # e.g. /work/venv-vllm/bin/python

It imports ``run()`` from ``../shared/oracles/vllm_sched_oracle.py`` (override the folder with
``VLLM_ORACLE_DIR``), drives every request stream below through vLLM's scheduler in one process and
writes ``tests/golden/vllm/<name>.json``. The streams are generated from fixed seeds, so two runs
give byte-identical files. ``tests/unit/test_vllm_golden.py`` replays each file through our
``VllmScheduler`` (``tests/stepdriver.py``) and needs no vLLM.

A golden file is compact JSON, one record per line:
    {"name", "vllm_version", "config": {block_size, num_gpu_blocks (incl. vLLM's null block),
     max_num_seqs, max_num_batched_tokens, max_model_len, enable_chunked_prefill,
     long_prefill_token_threshold, reserve_full_isl},
     "requests": [{id, arrival_step, prompt_tokens, output_tokens}, ...],
     "steps": [{step, scheduled {id: n}, preempted [ids], finished [ids], emitted {id: n}}, ...],
     "summary": {id: {emitted_tokens, num_preemptions, finish_step}}}
Records whose ``scheduled`` is empty (vLLM's trailing empty schedule() calls) are dropped.
"""

from __future__ import annotations

import io
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from golden_io import vllm_oracle_config  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ORACLE_DIR = Path(os.environ.get("VLLM_ORACLE_DIR", REPO.parent / "shared" / "oracles"))
OUT_DIR = REPO / "tests" / "golden" / "vllm"


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


# ---------------------------------------------------------------------------------------------
# Request streams
# ---------------------------------------------------------------------------------------------

def make_requests(seed: int, n: int, prompt: tuple[int, int], output: tuple[int, int],
                  arrivals: str = "spread", span: int = 50, max_model_len: int | None = None,
                  bursts: tuple[int, ...] = (0,)) -> list[dict]:
    """``n`` requests with uniform prompt/output lengths and arrival steps.

    arrivals: "burst" (all at step 0), "spread" (uniform over [0, span)), "bursts" (each request at
    one of ``bursts``), "poisson" (exponential gaps with mean span / n), "sparse" (gaps large
    enough that the engine goes idle in between). Prompts are clipped to ``max_model_len - 1``.
    """
    rng = random.Random(seed)
    reqs = []
    t = 0.0
    for i in range(n):
        p = rng.randint(*prompt)
        if max_model_len is not None:
            p = min(p, max_model_len - 1)
        o = rng.randint(*output)
        if arrivals == "burst":
            a = 0
        elif arrivals == "spread":
            a = rng.randrange(span)
        elif arrivals == "bursts":
            a = rng.choice(bursts)
        elif arrivals == "poisson":
            t += rng.expovariate(n / span)
            a = int(t)
        elif arrivals == "sparse":
            a = i * span
        else:
            raise ValueError(arrivals)
        reqs.append({"id": f"r{i}", "arrival_step": a, "prompt_tokens": p, "output_tokens": o})
    # Both sides queue same-step arrivals in input order (FCFS); shuffle so that this order is
    # not the id order, then sort stably by arrival step.
    rng.shuffle(reqs)
    reqs.sort(key=lambda r: r["arrival_step"])
    return reqs


def fitting_blocks(reqs: list[dict], block_size: int, max_model_len: int) -> int:
    """Usable blocks that every single request needs to finish alone (full-ISL reservation incl.)."""
    return max(cdiv(min(r["prompt_tokens"] + r["output_tokens"], max_model_len), block_size)
               for r in reqs)


def stream(name, seed, *, n, prompt, output, block_size=16, usable=None, kv_factor=None,
           max_num_seqs=256, budget=8192, max_model_len=None, chunked=True, lpt=0,
           reserve_full_isl=True, **arrival_kw):
    """One stream spec. KV is ``usable`` blocks, or ``kv_factor`` x the largest single request."""
    mml = max_model_len
    reqs = make_requests(seed, n, prompt, output, max_model_len=mml, **arrival_kw)
    if mml is None:
        mml = max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
    assert all(r["prompt_tokens"] < mml for r in reqs), name
    need = fitting_blocks(reqs, block_size, mml)
    if usable is None:
        usable = max(need, int(need * kv_factor)) if kv_factor else 100_000
    assert usable >= need, (name, usable, need)
    if not chunked:
        budget = max(budget, mml)
    assert budget >= max_num_seqs, name
    cfg = {
        "block_size": block_size,
        "num_gpu_blocks": usable + 1,  # + vLLM's null block
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": budget,
        "max_model_len": mml,
        "enable_chunked_prefill": chunked,
        "long_prefill_token_threshold": lpt,
        "reserve_full_isl": reserve_full_isl,
    }
    return name, cfg, reqs


def streams() -> list[tuple[str, dict, list[dict]]]:
    return [
        # Loose KV, random lengths, various arrival patterns.
        stream("loose_spread", 101, n=40, prompt=(1, 300), output=(1, 48), max_num_seqs=32,
               budget=512, arrivals="spread", span=80),
        stream("loose_burst", 102, n=50, prompt=(1, 200), output=(1, 32), max_num_seqs=64,
               budget=1024, arrivals="burst"),
        stream("loose_poisson_bs8", 103, n=60, prompt=(8, 120), output=(1, 24), block_size=8,
               max_num_seqs=16, budget=256, arrivals="poisson", span=120),
        stream("loose_sparse_idle", 104, n=12, prompt=(1, 64), output=(1, 20), max_num_seqs=8,
               budget=64, arrivals="sparse", span=40),
        # Tight KV: many preemptions.
        stream("tight_burst", 201, n=30, prompt=(16, 160), output=(8, 64), kv_factor=2.0,
               max_num_seqs=32, budget=512, arrivals="burst"),
        stream("tight_spread", 202, n=40, prompt=(8, 128), output=(4, 64), kv_factor=2.5,
               max_num_seqs=32, budget=256, arrivals="spread", span=60),
        stream("tight_bs4", 203, n=24, prompt=(4, 60), output=(4, 40), block_size=4,
               kv_factor=1.5, max_num_seqs=16, budget=128, arrivals="burst"),
        stream("tight_bs32_bursts", 204, n=36, prompt=(16, 200), output=(8, 48), block_size=32,
               kv_factor=2.0, max_num_seqs=24, budget=384, arrivals="bursts", bursts=(0, 15, 30)),
        stream("tight_minimal_kv", 205, n=10, prompt=(10, 80), output=(10, 60), kv_factor=1.0,
               max_num_seqs=8, budget=128, arrivals="burst"),
        stream("tight_bs1", 206, n=12, prompt=(2, 30), output=(2, 20), block_size=1,
               kv_factor=2.0, max_num_seqs=8, budget=64, arrivals="spread", span=20),
        # Small token budgets: chunked prefill.
        stream("budget16_seqs4", 301, n=16, prompt=(5, 120), output=(1, 16), max_num_seqs=4,
               budget=16, arrivals="spread", span=40),
        stream("budget32_seqs8_tight", 302, n=20, prompt=(10, 150), output=(2, 24),
               kv_factor=2.0, max_num_seqs=8, budget=32, arrivals="burst"),
        stream("budget64_seqs16", 303, n=40, prompt=(1, 250), output=(1, 20), max_num_seqs=16,
               budget=64, arrivals="poisson", span=150),
        stream("budget48_bs8_tight", 304, n=24, prompt=(8, 96), output=(4, 32), block_size=8,
               kv_factor=1.6, max_num_seqs=12, budget=48, arrivals="spread", span=30),
        # long_prefill_token_threshold.
        stream("lpt32", 401, n=30, prompt=(1, 300), output=(1, 24), max_num_seqs=16, budget=128,
               lpt=32, arrivals="spread", span=40),
        stream("lpt8_budget32", 402, n=20, prompt=(4, 90), output=(1, 16), max_num_seqs=8,
               budget=32, lpt=8, arrivals="burst"),
        stream("lpt48_tight", 403, n=30, prompt=(16, 200), output=(4, 48), kv_factor=2.0,
               max_num_seqs=16, budget=256, lpt=48, arrivals="bursts", bursts=(0, 10, 25)),
        stream("lpt64_sparse_lone", 404, n=6, prompt=(100, 400), output=(1, 8), max_num_seqs=4,
               budget=256, lpt=64, arrivals="sparse", span=30),
        # Chunked prefill off (budget >= max_model_len).
        stream("nochunk_loose", 501, n=30, prompt=(1, 200), output=(1, 32), max_model_len=256,
               chunked=False, max_num_seqs=16, budget=256, arrivals="spread", span=40),
        stream("nochunk_tight", 502, n=30, prompt=(16, 180), output=(4, 48), max_model_len=256,
               chunked=False, kv_factor=2.0, max_num_seqs=16, budget=320, arrivals="burst"),
        stream("nochunk_seqs4_bursts", 503, n=24, prompt=(1, 120), output=(1, 24),
               max_model_len=160, chunked=False, max_num_seqs=4, budget=160, arrivals="bursts",
               bursts=(0, 5, 20)),
        # scheduler_reserve_full_isl=False.
        stream("noisl_tight", 601, n=30, prompt=(16, 200), output=(4, 48), kv_factor=1.5,
               max_num_seqs=32, budget=64, reserve_full_isl=False, arrivals="burst"),
        stream("noisl_spread_bs8", 602, n=36, prompt=(8, 160), output=(2, 40), block_size=8,
               kv_factor=2.0, max_num_seqs=16, budget=48, reserve_full_isl=False,
               arrivals="spread", span=50),
        stream("noisl_lpt16", 603, n=24, prompt=(8, 150), output=(2, 32), kv_factor=1.8,
               max_num_seqs=16, budget=96, lpt=16, reserve_full_isl=False, arrivals="poisson",
               span=40),
        # max_model_len below prompt + output: generation stops at the limit.
        stream("mml_limit_loose", 701, n=30, prompt=(10, 127), output=(1, 100), max_model_len=128,
               max_num_seqs=16, budget=256, arrivals="spread", span=40),
        stream("mml_limit_tight", 702, n=30, prompt=(10, 127), output=(1, 100), max_model_len=128,
               kv_factor=2.0, max_num_seqs=16, budget=128, arrivals="burst"),
        stream("mml_limit_budget16", 703, n=16, prompt=(4, 63), output=(1, 64), max_model_len=64,
               max_num_seqs=4, budget=16, arrivals="spread", span=30),
        stream("mml_limit_nochunk", 704, n=24, prompt=(1, 95), output=(1, 80), max_model_len=96,
               chunked=False, kv_factor=2.0, max_num_seqs=8, budget=96, arrivals="bursts",
               bursts=(0, 12)),
        stream("mml_limit_noisl_lpt", 705, n=24, prompt=(20, 159), output=(1, 120),
               max_model_len=160, kv_factor=1.5, max_num_seqs=12, budget=64, lpt=24,
               reserve_full_isl=False, arrivals="burst"),
        # max_num_seqs limiting.
        stream("seqs1", 801, n=10, prompt=(1, 50), output=(1, 12), max_num_seqs=1, budget=64,
               arrivals="burst"),
        stream("seqs2_burst", 802, n=20, prompt=(1, 80), output=(1, 16), max_num_seqs=2,
               budget=32, arrivals="burst"),
        stream("seqs4_tight", 803, n=30, prompt=(8, 100), output=(4, 40), kv_factor=1.5,
               max_num_seqs=4, budget=64, arrivals="spread", span=20),
        # Edge shapes: block-aligned prompts, single-token outputs, prompts at max_model_len - 1.
        stream("aligned_bs16", 901, n=24, prompt=(1, 8), output=(1, 1), max_num_seqs=8,
               budget=64, arrivals="burst"),
        stream("prefill_only", 902, n=30, prompt=(1, 200), output=(1, 1), kv_factor=1.5,
               max_num_seqs=16, budget=96, arrivals="spread", span=15),
        stream("prompt_mml_minus1", 903, n=12, prompt=(63, 63), output=(1, 10), max_model_len=64,
               block_size=8, kv_factor=2.0, max_num_seqs=4, budget=32, arrivals="burst"),
        stream("mixed_all", 904, n=60, prompt=(1, 250), output=(1, 80), max_model_len=256,
               kv_factor=2.0, max_num_seqs=24, budget=96, lpt=40, arrivals="poisson", span=60),
    ]


def _postprocess(streams_list):
    # "aligned_bs16" wants prompts that are exact multiples of the block size.
    for name, cfg, reqs in streams_list:
        if name == "aligned_bs16":
            for r in reqs:
                r["prompt_tokens"] *= cfg["block_size"]
            cfg["max_model_len"] = max(r["prompt_tokens"] + r["output_tokens"] for r in reqs)
    return streams_list


# ---------------------------------------------------------------------------------------------
# Recording
# ---------------------------------------------------------------------------------------------

def record(name: str, cfg: dict, reqs: list[dict], run, vllm_version: str) -> dict:
    oracle_cfg = vllm_oracle_config(cfg)
    buf = io.StringIO()
    summary = run(reqs, oracle_cfg, out=buf, max_idle_steps=50)
    assert summary["initial_free_blocks"] == cfg["num_gpu_blocks"] - 1, name
    steps = []
    for line in buf.getvalue().splitlines():
        rec = json.loads(line)
        if "summary" in rec or not rec["scheduled"]:
            continue
        steps.append({
            "step": rec["step"],
            "scheduled": rec["scheduled"],
            "preempted": sorted(rec["preempted"]),
            "finished": sorted(rec["finished"]),
            "emitted": rec["emitted"],
        })
    per_req = {
        rid: {k: s[k] for k in ("emitted_tokens", "num_preemptions", "finish_step")}
        for rid, s in summary["requests"].items()
    }
    for r in reqs:  # every request must finish with its tokens (or stop at max_model_len)
        s = per_req[r["id"]]
        expect = min(r["output_tokens"], cfg["max_model_len"] - r["prompt_tokens"])
        assert s["finish_step"] is not None and s["emitted_tokens"] == expect, (name, r, s)
    return {"name": name, "vllm_version": vllm_version, "config": cfg, "requests": reqs,
            "steps": steps, "summary": per_req}


def dump(golden: dict) -> str:
    c = lambda x: json.dumps(x, separators=(",", ":"))  # noqa: E731
    lines = ["{", f'"name":{c(golden["name"])},', f'"vllm_version":{c(golden["vllm_version"])},',
             f'"config":{c(golden["config"])},', '"requests":[']
    lines.append(",\n".join(c(r) for r in golden["requests"]))
    lines.append("],")
    lines.append('"steps":[')
    lines.append(",\n".join(c(s) for s in golden["steps"]))
    lines.append("],")
    lines.append(f'"summary":{c(golden["summary"])}')
    lines.append("}")
    return "\n".join(lines) + "\n"


def main() -> None:
    sys.path.insert(0, str(ORACLE_DIR))
    import vllm  # noqa: PLC0415
    from vllm_sched_oracle import run  # noqa: PLC0415  (needs the vLLM venv)

    OUT_DIR.mkdir(parents=True, exist_ok=True)
    total_bytes = total_steps = total_preempt = 0
    all_streams = _postprocess(streams())
    names = [s[0] for s in all_streams]
    assert len(names) == len(set(names))
    for name, cfg, reqs in all_streams:
        golden = record(name, cfg, reqs, run, vllm.__version__)
        text = dump(golden)
        (OUT_DIR / f"{name}.json").write_text(text)
        npre = sum(s["num_preemptions"] for s in golden["summary"].values())
        total_bytes += len(text)
        total_steps += len(golden["steps"])
        total_preempt += npre
        print(f"{name:24s} reqs={len(reqs):3d} steps={len(golden['steps']):4d} "
              f"preemptions={npre:4d} bytes={len(text)}")
    print(f"{len(all_streams)} streams, {total_steps} steps, {total_preempt} preemptions, "
          f"{total_bytes} bytes -> {OUT_DIR}")


if __name__ == "__main__":
    main()
