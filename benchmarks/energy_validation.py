"""The energy model beside published GPU power measurements: the ML.ENERGY Leaderboard v3.0 (issue 26).

ML.ENERGY (J.-W. Chung et al., "The ML.ENERGY Benchmark", NeurIPS 2025 Datasets & Benchmarks; the v3.0 data in
``public/data/models/*__lm-arena-chat.json`` of github.com/ml-energy/leaderboard, commit 0cd52da) ran vLLM
0.11.1 on LMArena chat prompts, sending every request at once with ``max_num_seqs`` capping the batch, and
read each GPU's energy counter (NVML, via Zeus) over the steady window where the batch is full. Each point
here replays that as a closed loop of ``batch`` clients (the batch stays full until the last requests drain)
on the default timing, and compares the average power per GPU over the run with the measured one.

The prompts' lengths are not in the leaderboard files. ``--input-tokens`` sets their mean (lognormal, half as
wide); the default, 150, is Chatbot Arena's 94.9 tokens a prompt (W.-L. Chiang et al., "Chatbot Arena",
arXiv:2403.04132, Table 1; Llama-2 tokenizer, 1.3 turns a conversation) plus Llama 3.1's chat template
(about 28 tokens) and the history a later turn carries (the benchmark sends every turn with the turns
before it): an assumption. The outputs' mean is each run's own (``avg_output_len``). Prints one line per point: measured and predicted power
per GPU, the error, and the predicted and measured inter-token latency where the files give it. A
benchmark, not a test: it asserts nothing. docs/energy.md reports its figures.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simmodel import Simulation
from simmodel.config.load import parse_scenario

POINTS = (
    # (model, GPU, tensor, batch, measured W per GPU, measured median ITL ms, mean output tokens)
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 8, 486.4, 7.32, 389),
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 32, 559.7, 8.91, 390),
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 128, 669.2, 16.48, 405),
    ("meta-llama/Llama-3.1-8B-Instruct", "h100_sxm", 1, 256, 690.5, 26.13, 404),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100_sxm", 4, 8, 1765.4 / 4, 16.57, 350),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100_sxm", 4, 32, 1794.2 / 4, 20.05, 351),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100_sxm", 4, 128, 2183.8 / 4, 27.87, 359),
    ("meta-llama/Llama-3.1-70B-Instruct", "h100_sxm", 4, 256, 2354.3 / 4, 39.84, 349),
    ("meta-llama/Llama-3.1-70B-Instruct", "b200_sxm", 2, 8, 1698.0 / 2, 16.36, 352),
    ("meta-llama/Llama-3.1-70B-Instruct", "b200_sxm", 2, 32, 1735.0 / 2, 18.68, 346),
    ("meta-llama/Llama-3.1-70B-Instruct", "b200_sxm", 2, 128, 1913.1 / 2, 27.30, 353),
    ("meta-llama/Llama-3.1-70B-Instruct", "b200_sxm", 2, 256, 1941.7 / 2, 35.84, 361),
)
"""From ``public/data/models/meta-llama__Llama-3.1-{8B,70B}-Instruct__lm-arena-chat.json``: per-GPU average
power is the files' ``avg_power_watts`` (the sum over the run's GPUs) over the GPU count; ``avg_output_len``
is the mean output; the ITL is measured at the client."""


def scenario(model: str, gpu: str, tensor: int, batch: int, input_tokens: int, output_tokens: int,
             requests: int) -> dict:
    return {
        "traffic": {
            "source": {"type": "synthetic",
                       "input_tokens": {"distribution": "lognormal", "mean": input_tokens, "std": input_tokens // 2,
                                        "min": 4, "max": 8 * input_tokens},
                       "output_tokens": {"distribution": "lognormal", "mean": output_tokens,
                                         "std": output_tokens // 2, "min": 4, "max": 4096}},
            "load": {"type": "concurrency", "concurrency": batch},
            "stop": {"requests": requests},
        },
        "engine": {"model": model, "hardware": gpu, "backend": "vllm", "context_length": 16384, "seed": 1,
                   "workers": {"aggregated": {"parallelism": {"tensor": tensor},
                                              "scheduler": {"max_batched_tokens": 8192, "max_sequences": batch}}}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--input-tokens", type=int, default=150, help="mean prompt length (default 150)")
    parser.add_argument("--rounds", type=int, default=6, help="requests per client (default 6)")
    args = parser.parse_args()
    print(f"prompts of {args.input_tokens} tokens on average")
    print(f"{'model':<34} {'GPU':<9} {'TP':>2} {'batch':>5} {'measured W':>10} {'predicted W':>11} {'error':>7} "
          f"{'ITL ms':>7} {'measured':>8}")
    errors = []
    for model, gpu, tensor, batch, watts, itl, outputs in POINTS:
        data = scenario(model, gpu, tensor, batch, args.input_tokens, outputs, args.rounds * batch)
        summary = Simulation(parse_scenario(data, Path.cwd()), keep_events=False).run().summary
        predicted = summary["avg_power_w_per_gpu"]
        errors.append((predicted - watts) / watts)
        print(f"{model.split('/')[1]:<34} {gpu:<9} {tensor:>2} {batch:>5} {watts:>10.0f} {predicted:>11.0f} "
              f"{errors[-1]:>+7.1%} {summary['itl_ms']['p50']:>7.1f} {itl:>8.1f}")
    print(f"mean absolute error {sum(map(abs, errors)) / len(errors):.1%}, "
          f"H100 points {sum(abs(e) for e, p in zip(errors, POINTS) if p[1] == 'h100_sxm') / 8:.1%}")


if __name__ == "__main__":
    main()
