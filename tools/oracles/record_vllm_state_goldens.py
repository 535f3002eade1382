#!/usr/bin/env python3
"""Record golden scheduler traces of vLLM 0.32.0's hybrid KV cache manager with a state group: a full-attention group
beside a Mamba group (the layout of Nemotron-H, Qwen3-Next and other Mamba / linear-attention hybrids), without
prefix caching (``mamba_cache_mode`` none), synchronous and async, with and without MTP drafts, from vLLM's real
``Scheduler`` / ``AsyncScheduler``.

Regenerate (from the repo root, with the oracle venv of ``../shared/oracles/vllm-scheduler.md``):

    <venv>/bin/python tools/oracles/record_vllm_state_goldens.py        # e.g. /work/.venv-vllm/bin/python

The scheduler is built as ``record_vllm_hybrid_goldens.build_hybrid`` builds it, with a ``MambaSpec`` group in place
of the sliding one: its ``block_size`` is ``max_model_len`` (``MambaModelConfig`` sets ``mamba_block_size`` so when
prefix caching is off) and ``num_speculative_blocks`` is the stream's drafts (``MambaSpec`` gets
``num_speculative_tokens`` from the speculative config). With drafts the scheduler is given what ``VllmConfig`` derives
for k MTP drafts (``record_vllm_spec_goldens.build``), its ``_spec_decode_step_blocks`` counting the attention group
only, as ``Scheduler.__init__`` counts it. The engine loop and the files are ``record_vllm_spec_goldens``'. Writes
``tests/golden/vllm_state/<name>.json``; ``tests/unit/test_vllm_state_golden.py`` replays them through our scheduler
with a ``KvLayout`` of one full and one state group, and needs no vLLM. The scheduler's block size is the groups' LCM, as ``resolve_kv_cache_block_sizes`` makes
it; without prefix caching or a connector nothing reads it.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_vllm_goldens import stream  # noqa: E402
from record_vllm_goldens_apc import apc_stream, shared_requests  # noqa: E402
from record_vllm_spec_goldens import build, record_all, run  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
OUT_DIR = REPO / "tests" / "golden" / "vllm_state"
APC_DIR = REPO / "tests" / "golden" / "vllm_state_apc"


def build_state(cfg: dict):
    import torch
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.math_utils import cdiv
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, MambaSpec
    from vllm.v1.structured_output import StructuredOutputManager
    from vllm_sched_oracle import _tiny_model_dir

    bs, asynchronous, mml = cfg["block_size"], cfg["async_scheduling"], cfg["max_model_len"]
    k = cfg.get("num_speculative_tokens", 0)
    caching = cfg.get("enable_prefix_caching", False)
    mode = "align" if caching else "none"  # (``MambaModelConfig``: align whenever prefix caching is on)
    model = ModelConfig(model=_tiny_model_dir(), skip_tokenizer_init=True, dtype="float32", max_model_len=mml, seed=0)
    scheduler = SchedulerConfig(max_num_seqs=cfg["max_num_seqs"], max_num_batched_tokens=cfg["max_num_batched_tokens"],
                                max_model_len=mml, is_encoder_decoder=False,
                                enable_chunked_prefill=cfg["enable_chunked_prefill"],
                                long_prefill_token_threshold=cfg["long_prefill_token_threshold"],
                                async_scheduling=asynchronous, scheduler_reserve_full_isl=cfg["reserve_full_isl"])
    vllm_config = VllmConfig(device_config=DeviceConfig(device="cpu"), model_config=model,
                             cache_config=CacheConfig(block_size=bs, enable_prefix_caching=caching,
                                                      mamba_cache_mode=mode),
                             scheduler_config=scheduler)
    sc = vllm_config.scheduler_config  # (as the oracle does: __post_init__ may rewrite these)
    sc.max_num_seqs, sc.max_num_batched_tokens = cfg["max_num_seqs"], cfg["max_num_batched_tokens"]
    sc.enable_chunked_prefill, sc.async_scheduling = cfg["enable_chunked_prefill"], asynchronous
    vllm_config.cache_config.block_size, vllm_config.cache_config.enable_prefix_caching = bs, caching
    vllm_config.cache_config.mamba_cache_mode = mode
    vllm_config.cache_config.num_gpu_blocks = cfg["num_gpu_blocks"]
    attention = FullAttentionSpec(block_size=bs, num_kv_heads=1, head_size=1, dtype=torch.float32)
    # Align mode: the state's block is the attention block (``mamba_block_size``); Mamba-2's mixer can write a
    # checkpoint inside a pass (``MambaMixer2.get_kv_cache_spec``: one checkpoint block, alignment 1), a gated
    # DeltaNet (Qwen3-Next) cannot, so the scheduler cuts its prefill at block boundaries.
    checkpoint = caching and cfg.get("state_checkpoint", False)
    state = MambaSpec(block_size=bs if caching else mml, shapes=((1,),), dtypes=(torch.float32,),
                      mamba_cache_mode=mode, num_speculative_blocks=k,
                      num_prefill_checkpoint_blocks=int(checkpoint), prefill_checkpoint_alignment=1 if checkpoint else None)
    # (``prefix_cache_retention_interval`` 0, ``CacheConfig``'s default: a Mamba group keeps only the states at the
    # prompt's replay boundary and at shared-prefix junctions)
    kv_cache_config = KVCacheConfig(num_blocks=cfg["num_gpu_blocks"], kv_cache_tensors=[],
                                    prefix_cache_retention_interval=0, kv_cache_groups=[
        KVCacheGroupSpec(["model.layers.0.self_attn.attn"], attention),
        KVCacheGroupSpec(["model.layers.1.mixer"], state)])
    cls = AsyncScheduler if asynchronous else Scheduler
    lcm = math.lcm(bs, state.block_size)  # (``resolve_kv_cache_block_sizes``: the groups' LCM, no finer hashing)
    sched = cls(vllm_config=vllm_config, kv_cache_config=kv_cache_config,
                structured_output_manager=StructuredOutputManager(vllm_config), block_size=lcm, hash_block_size=lcm,
                log_stats=False)
    assert sched.max_num_running_reqs == cfg["max_num_seqs"] and sched.max_model_len == mml
    assert sched.has_mamba_layers and sched.need_mamba_block_aligned_split == caching
    sched = build(cfg, k, sched)
    if k:  # (``Scheduler.__init__`` leaves the Mamba groups out of the per-step blocks)
        sched._spec_decode_step_blocks = cdiv(1 + 2 * k, bs)
    return sched


def state(name, asynchronous, k, mean, seed, **kw):
    name, cfg, reqs = stream(name, seed, **kw)
    cfg.update(async_scheduling=asynchronous, enable_prefix_caching=False)
    if k:
        cfg.update(num_speculative_tokens=k, mean_accepted=mean)
    return name, cfg, reqs


def streams() -> list[tuple[str, dict, list[dict]]]:
    """(``kv_factor`` × one group's largest request: above 1, as a request also holds its states.)"""
    out = []
    for asynchronous, tag in ((False, "sync"), (True, "async")):
        out += [
            state(f"{tag}_loose", asynchronous, 0, 0, 1401, n=30, prompt=(1, 300), output=(1, 80), max_num_seqs=16,
                  budget=256, arrivals="spread", span=40),
            state(f"{tag}_tight_bs8", asynchronous, 0, 0, 1402, n=30, prompt=(16, 200), output=(8, 96), block_size=8,
                  kv_factor=1.6, max_num_seqs=24, budget=128, arrivals="burst"),
            state(f"{tag}_budget32", asynchronous, 0, 0, 1403, n=20, prompt=(5, 250), output=(1, 40), max_num_seqs=6,
                  budget=32, arrivals="spread", span=30),
            state(f"{tag}_mml_limit", asynchronous, 0, 0, 1404, n=20, prompt=(10, 127), output=(1, 100),
                  max_model_len=128, max_num_seqs=12, budget=128, arrivals="spread", span=30),
            state(f"{tag}_k2_tight", asynchronous, 2, 1.0, 1405, n=30, prompt=(16, 160), output=(8, 64),
                  kv_factor=1.8, max_num_seqs=24, budget=256, arrivals="burst"),
            state(f"{tag}_k3_bs4", asynchronous, 3, 1.5, 1406, n=24, prompt=(4, 120), output=(4, 60), block_size=4,
                  kv_factor=2.0, max_num_seqs=12, budget=96, arrivals="poisson", span=40),
            state(f"{tag}_k2_mml_limit", asynchronous, 2, 2.0, 1407, n=20, prompt=(10, 127), output=(1, 100),
                  max_model_len=128, max_num_seqs=12, budget=128, arrivals="spread", span=30),
        ]
    return out


def cached(name, asynchronous, checkpoint, reqs, k=0, mean=0.0, **kw):
    name, cfg, reqs = apc_stream(name, reqs, async_scheduling=asynchronous, **kw)
    cfg.update(state_checkpoint=checkpoint)
    if k:  # (MTP drafts: speculative state blocks, EAGLE's block drop)
        cfg.update(num_speculative_tokens=k, mean_accepted=mean)
    return name, cfg, reqs


def cached_streams() -> list[tuple[str, dict, list[dict]]]:
    """Prefix caching (align mode): shared system prompts, duplicates, block-aligned prompts, tight KV."""
    S = shared_requests
    out = []
    for asynchronous, tag in ((False, "sync"), (True, "async")):
        for checkpoint, kind in ((False, "split"), (True, "ckpt")):
            out += [
                cached(f"{tag}_{kind}_groups_bs16", asynchronous, checkpoint,
                       S(1501, 40, block_size=16, output=(1, 32), groups=4, prefix=(20, 140), suffix=(1, 60),
                         arrivals="spread", span=60), block_size=16, max_num_seqs=32, budget=512),
                cached(f"{tag}_{kind}_dups_bs8_budget64", asynchronous, checkpoint,
                       S(1502, 40, block_size=8, output=(1, 24), groups=3, prefix=(16, 100), suffix=(1, 40), dup=0.4,
                         aligned=0.3, arrivals="burst"), block_size=8, max_num_seqs=32, budget=64),
                cached(f"{tag}_{kind}_tight_bs4", asynchronous, checkpoint,
                       S(1503, 30, block_size=4, output=(4, 40), groups=3, prefix=(8, 60), suffix=(1, 30), dup=0.3,
                         arrivals="burst"), block_size=4, kv_factor=2.5, max_num_seqs=16, budget=128),
                # Prompt trees, strict prefixes of earlier prompts, block-aligned prompts.
                cached(f"{tag}_{kind}_tree_prefixes_bs16", asynchronous, checkpoint,
                       S(1504, 40, block_size=16, output=(1, 24), groups=3, prefix=(40, 130), subgroups=3,
                         subprefix=(10, 70), suffix=(1, 50), prefix_of=0.2, aligned=0.3, arrivals="poisson", span=60),
                       block_size=16, max_num_seqs=24, budget=384),
                # Blocks wider than the budget (sub-block chunks), and a long-prefill threshold.
                cached(f"{tag}_{kind}_bs32_budget24", asynchronous, checkpoint,
                       S(1505, 24, block_size=32, output=(1, 16), groups=2, prefix=(40, 120), suffix=(1, 60),
                         dup=0.3, arrivals="spread", span=40), block_size=32, max_num_seqs=8, budget=24),
                cached(f"{tag}_{kind}_lpt20_bs8", asynchronous, checkpoint,
                       S(1506, 30, block_size=8, output=(2, 20), groups=3, prefix=(20, 90), suffix=(1, 40), dup=0.3,
                         arrivals="spread", span=30), block_size=8, max_num_seqs=16, budget=96, lpt=20),
                # Tight KV with duplicates: preemptions of requests that hit, resumed with hits.
                cached(f"{tag}_{kind}_tight_dups_bs8", asynchronous, checkpoint,
                       S(1507, 36, block_size=8, output=(8, 48), groups=2, prefix=(24, 80), suffix=(1, 24), dup=0.4,
                         aligned=0.3, arrivals="bursts", bursts=(0, 10, 20)),
                       block_size=8, kv_factor=2.0, max_num_seqs=24, budget=256),
                # MTP drafts with prefix caching.
                cached(f"{tag}_{kind}_groups_bs16_k2", asynchronous, checkpoint,
                       S(1508, 40, block_size=16, output=(1, 32), groups=4, prefix=(20, 140), suffix=(1, 60),
                         dup=0.3, arrivals="spread", span=60), block_size=16, max_num_seqs=32, budget=512, k=2,
                       mean=1.0),
                cached(f"{tag}_{kind}_tight_bs8_k3", asynchronous, checkpoint,
                       S(1509, 30, block_size=8, output=(4, 40), groups=3, prefix=(16, 80), suffix=(1, 30), dup=0.3,
                         aligned=0.3, arrivals="burst"), block_size=8, kv_factor=2.5, max_num_seqs=16, budget=128,
                       k=3, mean=1.5),
            ]
    return out


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else "none"
    if which in ("none", "all"):
        record_all(streams(), OUT_DIR, lambda reqs, cfg: run(reqs, cfg, sched=build_state(cfg)))
    if which in ("align", "all"):
        record_all(cached_streams(), APC_DIR, lambda reqs, cfg: run(reqs, cfg, sched=build_state(cfg)))
