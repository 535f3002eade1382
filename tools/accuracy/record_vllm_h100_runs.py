"""Record the measured end-to-end vLLM runs that ``benchmarks/accuracy_report.py`` checks the default timing
against: ``benchmarks/data/vllm_h100_e2e.json``, the figures (not the files) of the runs in
``../shared/accuracy/vllm-0.15-h100-train/``, with the source of each.

    python3 tools/accuracy/record_vllm_h100_runs.py [--check]

The runs are vLLM 0.15.1 deployments on H100-80GB SXM measured with inference-perf (completions API,
streaming, ``ignore_eos``), published by the inference-sim project (github.com/inference-sim/inference-sim,
``training/``) as the training and validation set of its simulator. Kept per run: the model, tensor
parallelism, the engine flags, the shared-prefix workload (as inference-perf resolved it where the raw
results say so), the load stages where their rates are public, the prompt overhead the server counted
(raw results only), and per stage the measured E2E and TTFT (mean, p90, p99) and the derived time per
output token with the output count it was derived with.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "accuracy" / "vllm-0.15-h100-train"
OUT = REPO / "benchmarks" / "data" / "vllm_h100_e2e.json"


def _figures(block: dict) -> dict:
    return {k: block[k] for k in ("mean", "p90", "p99") if block.get(k) is not None}


def _stage(stage: dict, raw: Path | None) -> dict:
    out = {"e2e_ms": _figures(stage["e2e_ms"]), "ttft_ms": _figures(stage["ttft_ms"]),
           "itl_ms_mean": stage["itl_ms"]["mean"]}
    if raw is not None:
        metrics = json.loads((raw / "results" / f"stage_{stage['stage_index']}_lifecycle_metrics.json").read_text())
        ok = metrics["successes"]
        out |= {"output_len_mean": ok["output_len"]["mean"], "prompt_len_mean": ok["prompt_len"]["mean"],
                "requests": ok["count"], "failures": metrics["failures"]["count"]}
    return out


def record() -> dict:
    runs = []
    for run in json.loads((SHARED / "runs.json").read_text()):
        work = run["workload"]
        sp = work["shared_prefix"]
        raw = SHARED / "raw" / run["id"].removeprefix("raw-") if run["id"].startswith("raw-") else None
        pool = {"groups": sp["num_unique_system_prompts"], "prompts_per_group": sp["num_users_per_system_prompt"]}
        if raw is not None:  # the pool inference-perf actually built (its resolved config)
            resolved = yaml.safe_load((raw / "results" / "config.yaml").read_text())["data"]["shared_prefix"]
            pool = {"groups": resolved["num_groups"], "prompts_per_group": resolved["num_prompts_per_group"]}
        stages = work["stages"] if isinstance(work["stages"], list) else None
        flags = run["engine_flags"]
        runs.append({
            "id": run["id"], "source": run["source_name"] if "source_name" in run else run["id"],
            "measured_source": run["measured"]["source"], "model": run["model"], "gpu": run["gpu"],
            "tensor": run["tp"], "workload_class": work["workload_class"],
            "flags": {k: flags[k] for k in ("max_num_batched_tokens", "max_num_seqs", "max_model_len", "block_size",
                                            "enable_prefix_caching", "enable_chunked_prefill", "kv_cpu_offload")},
            "workload": {**pool, "system_prompt_len": sp["system_prompt_len"], "question_len": sp["question_len"],
                         "output_len": sp["output_len"]},
            "stages": None if stages is None else [{"rate": s["rate_rps"], "duration_s": s["duration_s"]}
                                                   for s in stages],
            "stages_note": None if stages is not None else work["stages"],
            "measured": [_stage(s, raw) for s in run["measured"]["stages"]],
        })
    return {"source": "inference-sim project (github.com/inference-sim/inference-sim, training/): vLLM 0.15.1 on "
                      "H100-80GB SXM, inference-perf shared_prefix stages; figures as gathered in "
                      "shared/accuracy/vllm-0.15-h100-train (runs.json, raw/*/results)",
            "definitions": {"itl_ms_mean": "(e2e mean - ttft mean) / (output_len_mean - 1), output_len_mean as the "
                                           "client counted it (inference-perf re-tokenizes the streamed text)",
                            "prompt_len_mean": "prompt tokens the server counted (raw runs only)"},
            "runs": runs}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--check", action="store_true", help="compare with the file on disk, write nothing")
    args = ap.parse_args()
    if not (SHARED / "runs.json").is_file():
        print(f"record_vllm_h100_runs.py: {SHARED / 'runs.json'}: not found (the shared folder beside the "  # noqa: T201
              f"checkout holds the runs; a clone alone does not)", file=sys.stderr)
        return 2
    text = json.dumps(record(), indent=1) + "\n"
    if args.check:
        same = OUT.read_text() == text
        print("up to date" if same else f"{OUT} differs")  # noqa: T201
        return 0 if same else 1
    OUT.write_text(text)
    print(f"wrote {OUT}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
