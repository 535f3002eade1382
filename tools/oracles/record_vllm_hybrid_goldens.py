#!/usr/bin/env python3
"""Record golden scheduler traces of vLLM 0.32.0's hybrid KV cache manager: a full-attention group and a
sliding-window group (gpt-oss's layout: one group of each kind), with and without prefix caching, synchronous and
async, from vLLM's real ``Scheduler`` / ``AsyncScheduler``.

Regenerate (from the repo root, with the oracle venv of ``../shared/oracles/vllm-scheduler.md``):

    <venv>/bin/python tools/oracles/record_vllm_hybrid_goldens.py        # e.g. /work/.venv-vllm/bin/python

The scheduler is built as ``vllm_sched_oracle.build_scheduler`` builds it (its tiny model, its configs), with a
``KVCacheConfig`` of two groups instead of one: ``FullAttentionSpec`` and ``SlidingWindowSpec`` of the stream's
window, sharing the pool's ``num_gpu_blocks`` (vLLM's null block included). The engine loop and the files are
``record_vllm_spec_goldens``' (no drafts). Writes ``tests/golden/vllm_hybrid/<name>.json``; its config adds
``sliding_window``. ``tests/unit/test_vllm_hybrid_golden.py`` replays them through our scheduler with a
``KvLayout`` of one full and one sliding group, and needs no vLLM.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_vllm_goldens import stream  # noqa: E402
from record_vllm_goldens_apc import apc_stream, shared_requests  # noqa: E402
from record_vllm_spec_goldens import build, record_all, run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "vllm_hybrid"


def build_hybrid(cfg: dict):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, SlidingWindowSpec
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm_sched_oracle import _tiny_model_dir

    bs, asynchronous, caching = cfg["block_size"], cfg["async_scheduling"], cfg.get("enable_prefix_caching", False)
    model = ModelConfig(model=_tiny_model_dir(), skip_tokenizer_init=True, dtype="float32",
                        max_model_len=cfg["max_model_len"], seed=0)
    scheduler = SchedulerConfig(max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"],
                                max_model_len=cfg["max_model_len"], is_encoder_decoder=False,
                                enable_chunked_prefill=cfg["enable_chunked_prefill"],
                                long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
                                async_scheduling=asynchronous, scheduler_reserve_full_isl=cfg["reserve_full_isl"])
    vllm_config = VllmConfig(device_config=DeviceConfig(device="cpu"), model_config=model,
                             cache_config=CacheConfig(block_size=bs, enable_prefix_caching=caching),
                             scheduler_config=scheduler)
    sc = vllm_config.scheduler_config  # (as the oracle does: __post_init__ may rewrite these)
    sc.max_num_seqs, sc.max_num_batched_tokens = cfg["max_num_seqs"], cfg["max_num_batched_tokens"]
    sc.enable_chunked_prefill, sc.async_scheduling = cfg["enable_chunked_prefill"], asynchronous
    vllm_config.cache_config.block_size, vllm_config.cache_config.enable_prefix_caching = bs, caching
    vllm_config.cache_config.num_gpu_blocks = cfg["num_gpu_blocks"]
    spec = dict(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32)
    # (``prefix_cache_retention_interval`` 0, ``CacheConfig``'s default: with prefix caching a sliding group keeps
    # only the window's blocks before the prompt's replay boundary and a shared-prefix junction)
    kv_cache_config = KVCacheConfig(num_blocks=cfg["num_gpu_blocks"], kv_cache_tensors=[],
                                    prefix_cache_retention_interval=0, kv_cache_groups=[
        KVCacheGroupSpec(["model.layers.0.self_attn.attn"], FullAttentionSpec(**spec)),
        KVCacheGroupSpec(["model.layers.1.self_attn.attn"],
                         SlidingWindowSpec(**spec, sliding_window=cfg["sliding_window"]))])
    cls = AsyncScheduler if asynchronous else Scheduler
    sched = cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                structured_output_manager=StructuredOutputManager(vllm_config), block_size=bs, hash_block_size=bs,
                log_stats=False)
    assert sched.max_num_running_reqs == cfg["max_num_seqs"] and sched.max_model_len == cfg["max_model_len"]
    return sched


def hybrid(name, window, asynchronous, maker, *args, k=0, mean=0.0, **kw):
    name, cfg, reqs = maker(name, *args, **kw)  # (``stream(name, seed, …)`` or ``apc_stream(name, reqs, …)``)
    cfg.update(sliding_window=window, async_scheduling=asynchronous)
    cfg.setdefault("enable_prefix_caching", False)
    if k:  # (MTP/EAGLE drafts: ``record_vllm_spec_goldens.build``, the KV cache manager with EAGLE's block drop)
        cfg.update(num_speculative_tokens=k, mean_accepted=mean)
    return name, cfg, reqs


def streams() -> list[tuple[str, dict, list[dict]]]:
    """(``kv_factor`` × one group's largest request: above 2, as a request holds blocks in both groups.)"""
    S = shared_requests
    out = []
    for asynchronous, tag in ((False, "sync"), (True, "async")):
        out += [
            hybrid(f"{tag}_w32_loose", 32, asynchronous, stream, 1301, n=30, prompt=(1, 300),
                   output=(1, 80), max_num_seqs=16, budget=256, arrivals="spread", span=40),
            hybrid(f"{tag}_w20_tight", 20, asynchronous, stream, 1302, n=30, prompt=(16, 200),
                   output=(8, 96), block_size=8, kv_factor=2.4, max_num_seqs=24, budget=128, arrivals="burst"),
            hybrid(f"{tag}_w64_budget32", 64, asynchronous, stream, 1303, n=20,
                   prompt=(5, 250), output=(1, 40), max_num_seqs=6, budget=32, arrivals="spread", span=30),
            hybrid(f"{tag}_w16_noisl_bs4", 16, asynchronous, stream, 1304, n=24,
                   prompt=(4, 120), output=(4, 60), block_size=4, kv_factor=2.6, max_num_seqs=12, budget=64,
                   reserve_full_isl=False, arrivals="poisson", span=40),
            hybrid(f"{tag}_apc_w24_groups", 24, asynchronous, apc_stream,
                   S(1305, 40, block_size=8, output=(1, 40), groups=3, prefix=(16, 120), suffix=(1, 60), dup=0.3,
                     arrivals="spread", span=50), block_size=8, max_num_seqs=16, budget=256),
            hybrid(f"{tag}_apc_w12_tight", 12, asynchronous, apc_stream,
                   S(1306, 30, block_size=4, output=(4, 40), groups=3, prefix=(8, 60), suffix=(1, 30), dup=0.3,
                     arrivals="burst"), block_size=4, kv_factor=2.6, max_num_seqs=16, budget=128),
            # MTP/EAGLE drafts with prefix caching: EAGLE's block drop over both groups.
            hybrid(f"{tag}_apc_w24_groups_k2", 24, asynchronous, apc_stream,
                   S(1307, 40, block_size=8, output=(1, 40), groups=3, prefix=(16, 120), suffix=(1, 60), dup=0.3,
                     arrivals="spread", span=50), block_size=8, max_num_seqs=16, budget=256, k=2, mean=1.0),
            hybrid(f"{tag}_apc_w12_tight_k3", 12, asynchronous, apc_stream,
                   S(1308, 30, block_size=4, output=(4, 40), groups=3, prefix=(8, 60), suffix=(1, 30), dup=0.4,
                     aligned=0.3, arrivals="burst"), block_size=4, kv_factor=2.6, max_num_seqs=16, budget=128,
                   k=3, mean=1.5),
            hybrid(f"{tag}_k2_w16_tight", 16, asynchronous, stream, 1309, n=24, prompt=(8, 160), output=(4, 60),
                   block_size=8, kv_factor=2.4, max_num_seqs=12, budget=96, arrivals="burst", k=2, mean=1.0),
        ]
    return out


if __name__ == "__main__":
    record_all(streams(), OUT_DIR, lambda reqs, cfg: run(reqs, cfg, sched=build(cfg, cfg.get("num_speculative_tokens", 0),
                                                                           build_hybrid(cfg))))
