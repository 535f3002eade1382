#!/usr/bin/env python3
"""SGLang 0.5.23's real scheduler with HiCache (``--enable-hierarchical-cache``) on CPU: one stream, one process.

Run by ``record_sglang_hicache_goldens.py`` with the SGLang oracle venv's python (never imported by simmodel):

    <venv>/bin/python tools/oracles/sglang_hicache_oracle.py --requests reqs.json --config cfg.json \
        [--forward-cost-s 0.01] [--per-token-cost-s 0] [--ignore-eos] --out trace.jsonl

It imports the shared scheduler oracle (``../shared/oracles/sglang_sched_oracle.py``, folder overridable with
``SGLANG_ORACLE_DIR``) and runs its loop (``run``: SGLang's ``event_loop_normal`` with overlap off, the same
step and clock rules as the plain goldens) unchanged. What this script adds, all at run time:

* **HiCache on.** While the shared oracle's ``build_scheduler`` runs, ``PortArgs.init_new`` (called on the
  fresh ``ServerArgs`` before anything resolves it) first sets ``enable_hierarchical_cache=True`` and the
  config's ``hicache_ratio`` / ``hicache_size`` / ``hicache_write_policy`` on it (io backend and memory
  layout stay SGLang's defaults). The tree cache is then SGLang's ``UnifiedRadixCache`` with its
  ``HybridCacheController`` and a real host pool (the Rust tree core unless
  ``SGLANG_UNIFIED_RADIX_TREE_CORE_BACKEND=python``).
* **Two fakes** (what needs CUDA): the CPU entry of ``pool_host.common.ALLOC_MEMORY_FUNCS`` returns a plain
  zero tensor (``cudaHostRegister`` fails on CPU torch); ``L2TransferEngine.submit_device_to_host`` /
  ``submit_host_to_device`` copy nothing, call ``on_layer_done`` for every layer and return completion
  events whose ``query()`` is True. So a transfer is done as soon as it is submitted: a write-through
  backup's path lock is released by the next ``check_hicache_events`` (the start of the next
  ``get_next_batch_to_run``), a load-back is acked at the same point, and a write-back eviction's
  synchronous wait returns at once. The tree logic, locks, host pool accounting, eviction and
  load-back decisions are SGLang's.
* **Probes** (wrappers that call the original and only read what it returns or what SGLang stored), summed
  over everything that happens from the previous recorded pass up to the end of this pass's
  ``process_batch_result`` (idle ``get_next_batch_to_run`` calls in between included):
    - ``PrefillAdder.add_one_req``: on entry ``req.prefix_len`` (device prefix from ``match_kv_cache``),
      ``req.host_hit_length`` (host part of the match) and ``req.needs_host_load_back()``; on exit, if the
      request is in ``adder.can_run_list`` (admitted), ``req.host_loaded_length`` (tokens the load-back
      committed; 0 when ``init_load_back`` declined, e.g. under ``load_back_threshold``, or when no load
      was needed).
    - ``tree_cache.cache_controller.write`` (every D->H backup: write-through inserts and write-back
      evictions alike): tokens of each call that got host slots (``len`` of the returned host indices).
    - ``tree_cache.cache_controller.load`` (every H->D load-back): ``len`` of the returned device indices.
    - ``tree_cache.update_eviction_metrics(n, t)`` (called once per ``UnifiedRadixCache._evict`` with the
      full-KV tokens it freed on the device, demoted or deleted): ``n``.
    - ``tree_core.evict_device_next_node`` / ``evict_device_leaf``: ``result.unbacked_tokens`` (device
      tokens freed with no host copy, i.e. deleted, not demoted); ``tree_core.drop_subtree_no_host``:
      ``result.tracker[FULL]`` when ``result.is_dropped`` (write-back host-pressure drops).
    - ``tree_cache.evict_host``: its return value (host tokens freed by host eviction).
  At the end of each pass (when the shared loop writes the pass's record) it reads
  ``mem_pool_host.size - mem_pool_host.available_size()`` and ``tree_cache.protected_size()``.

Each pass record of the shared oracle gets (prefill and mixed passes: the first three)
  ``device_prefix {id: n}``, ``host_match {id: n}``, ``host_hit {id: n}`` for the requests admitted this pass;
  ``host_used_tokens``, ``protected_tokens``, ``backed_up_tokens``, ``loaded_tokens``,
  ``device_evicted_tokens``, ``dropped_tokens``, ``host_evicted_tokens``.
The summary record gets ``hicache`` {host_pool_tokens (``mem_pool_host.size``), device_pool_tokens
(``max_total_num_tokens``), tree_core (class name), write_policy, io_backend, mem_layout,
load_back_threshold, write_through_threshold} and, per request, ``cached_tokens`` (``req.cached_tokens``),
``cached_tokens_details`` (``output_streamer.get_cached_tokens_details(req)``: {device, host} or None),
``host_hit_tokens`` (sum of its ``host_hit`` over its admissions) and ``admissions``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
ORACLE_DIR = Path(os.environ.get("SGLANG_ORACLE_DIR", REPO.parent / "shared" / "oracles"))
sys.path.insert(0, str(ORACLE_DIR))
import sglang_sched_oracle as base  # noqa: E402

HICACHE_KEYS = ("hicache_ratio", "hicache_size", "hicache_write_policy")


class _DoneEvent:
    """A completion event of a transfer that has already happened."""

    def query(self):
        return True

    def synchronize(self):
        return None

    def wait(self, *args, **kwargs):
        return None

    def record(self, *args, **kwargs):
        return None

    def elapsed_time(self, other):
        return 0.0


def install_cpu_fakes() -> None:
    import torch
    from sglang.srt.mem_cache import l2_transfer
    from sglang.srt.mem_cache.pool_host import common

    def plain_host_tensor(dims, dtype, device, pin_memory, allocator, registration_granularity_bytes=None):
        return torch.zeros(dims, dtype=dtype)

    common.ALLOC_MEMORY_FUNCS["cpu"] = plain_host_tensor

    def done():
        return l2_transfer.TransferCompletion(_DoneEvent(), _DoneEvent(), False)

    def device_to_host(self, transfers):
        return done()

    def host_to_device(self, transfers, *, transfer_layer_id_max, start_event=None, on_layer_done=None):
        if on_layer_done is not None:
            for layer in range(transfer_layer_id_max):
                on_layer_done(layer)
        return done()

    l2_transfer.L2TransferEngine.submit_device_to_host = device_to_host
    l2_transfer.L2TransferEngine.submit_host_to_device = host_to_device


class Probe:
    """What the wrappers saw since the last pass record, and the run's requests."""

    def __init__(self):
        self.sched = None
        self.reqs = {}  # rid -> Req
        self.host_hit_total = {}
        self.admissions = {}
        self.reset()

    def reset(self):
        self.device_prefix, self.host_match, self.host_hit = {}, {}, {}
        self.backed_up = self.loaded = self.device_evicted = self.dropped = self.host_evicted = 0

    def admitted(self, req, device_prefix, host_match, loaded):
        rid = req.rid
        self.reqs[rid] = req
        self.device_prefix[rid], self.host_match[rid], self.host_hit[rid] = device_prefix, host_match, loaded
        self.host_hit_total[rid] = self.host_hit_total.get(rid, 0) + loaded
        self.admissions[rid] = self.admissions.get(rid, 0) + 1


PROBE = Probe()


def _wrap(obj, name, after):
    """Replace ``obj.name`` by a call of the original followed by ``after(result, *args, **kwargs)``."""
    orig = getattr(obj, name)

    def wrapper(*args, **kwargs):
        result = orig(*args, **kwargs)
        after(result, *args, **kwargs)
        return result

    setattr(obj, name, wrapper)


def install_probes(s) -> None:
    from sglang.srt.managers.schedule_policy import PrefillAdder
    from sglang.srt.mem_cache.unified_cache.component_type import ComponentType

    tc = s.tree_cache
    cc = tc.cache_controller
    assert cc is not None, "HiCache is not on: the tree cache has no cache controller"
    orig_add = PrefillAdder.add_one_req

    def add_one_req(self, req, *args, **kwargs):
        device_prefix, host_match = int(req.prefix_len), int(req.host_hit_length)
        needs_load = req.needs_host_load_back()
        result = orig_add(self, req, *args, **kwargs)
        if any(r is req for r in self.can_run_list):
            PROBE.admitted(req, device_prefix, host_match, int(req.host_loaded_length) if needs_load else 0)
        return result

    PrefillAdder.add_one_req = add_one_req

    def wrote(host_indices, *args, **kwargs):
        if host_indices is not None:
            PROBE.backed_up += len(host_indices)

    def loaded(device_indices, *args, **kwargs):
        if device_indices is not None:
            PROBE.loaded += len(device_indices)

    def evicted(result, num_tokens, *args, **kwargs):
        PROBE.device_evicted += int(num_tokens)

    def unbacked(result, *args, **kwargs):
        PROBE.dropped += int(result.unbacked_tokens or 0)

    def dropped_subtree(result, *args, **kwargs):
        if result.is_dropped:
            PROBE.dropped += int(result.tracker.get(ComponentType.FULL, 0))

    def host_evicted(n, *args, **kwargs):
        PROBE.host_evicted += int(n)

    _wrap(cc, "write", wrote)
    _wrap(cc, "load", loaded)
    _wrap(tc, "update_eviction_metrics", evicted)
    _wrap(tc, "evict_host", host_evicted)
    _wrap(tc.tree_core, "evict_device_next_node", unbacked)
    _wrap(tc.tree_core, "evict_device_leaf", unbacked)
    _wrap(tc.tree_core, "drop_subtree_no_host", dropped_subtree)


def hicache_build(orig_build, hicache: dict):
    """The shared ``build_scheduler`` with HiCache's server arguments added, and the probes installed."""

    def build(**cfg):
        stubs = base._install_import_stubs()  # before any sglang import (torchvision stub)
        install_cpu_fakes()
        from sglang.srt import server_args as sa_mod

        # The shared build_scheduler makes ServerArgs(...) then PortArgs.init_new(server_args) before anything
        # resolves the arguments: set HiCache's fields on the record there, for this one call.
        port_args = sa_mod.PortArgs
        plain_init_new = port_args.__dict__["init_new"]

        def init_new(server_args, *args, **kwargs):
            server_args.enable_hierarchical_cache = True
            for key, value in hicache.items():
                setattr(server_args, key, value)
            return plain_init_new.__func__(server_args, *args, **kwargs)

        port_args.init_new = staticmethod(init_new)
        try:
            s = orig_build(**cfg)
        finally:
            port_args.init_new = plain_init_new
        s._oracle_stubs = stubs
        PROBE.sched = s
        install_probes(s)
        return s

    return build


class RecordWriter:
    """The shared loop's output file: adds the probes' fields to each record."""

    def __init__(self, f):
        self.f = f

    def write(self, line: str):
        rec = json.loads(line)
        s = PROBE.sched
        tc = s.tree_cache
        host = tc.cache_controller.mem_pool_host
        if "summary" in rec:
            self.summary(rec["summary"], s, tc, host)
        else:
            if rec["mode"] != "decode":
                rec["device_prefix"] = PROBE.device_prefix
                rec["host_match"] = PROBE.host_match
                rec["host_hit"] = PROBE.host_hit
            else:
                assert not PROBE.device_prefix, (rec["step"], PROBE.device_prefix)
            rec.update(host_used_tokens=int(host.size - host.available_size()),
                       protected_tokens=int(tc.protected_size()), backed_up_tokens=PROBE.backed_up,
                       loaded_tokens=PROBE.loaded, device_evicted_tokens=PROBE.device_evicted,
                       dropped_tokens=PROBE.dropped, host_evicted_tokens=PROBE.host_evicted)
            PROBE.reset()
        self.f.write(json.dumps(rec) + "\n")

    @staticmethod
    def summary(summ: dict, s, tc, host):
        cc = tc.cache_controller
        summ["hicache"] = {
            "host_pool_tokens": int(host.size),
            "device_pool_tokens": int(s.max_total_num_tokens),
            "tree_core": type(tc.tree_core).__name__,
            "write_policy": cc.write_policy,
            "io_backend": s.server_args.hicache_io_backend,
            "mem_layout": s.server_args.hicache_mem_layout,
            "load_back_threshold": int(tc.load_back_threshold),
            "write_through_threshold": int(tc.write_through_threshold),
        }
        for rid, st in summ["requests"].items():
            req = PROBE.reqs[rid]
            st["cached_tokens"] = int(req.cached_tokens)
            details = s.output_streamer.get_cached_tokens_details(req)
            st["cached_tokens_details"] = None if details is None else {k: int(v) for k, v in details.items()}
            st["host_hit_tokens"] = PROBE.host_hit_total.get(rid, 0)
            st["admissions"] = PROBE.admissions.get(rid, 0)

    def close(self):
        self.f.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", required=True, help="JSON list of requests (the shared oracle's input)")
    ap.add_argument("--config", required=True, help="JSON: the shared oracle's build_scheduler arguments "
                                                    "plus hicache_ratio / hicache_size / hicache_write_policy")
    ap.add_argument("--forward-cost-s", type=float, default=0.01)
    ap.add_argument("--per-token-cost-s", type=float, default=0.0)
    ap.add_argument("--ignore-eos", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    reqs = json.loads(Path(a.requests).read_text())
    cfg = json.loads(Path(a.config).read_text())
    hicache = {k: cfg.pop(k) for k in HICACHE_KEYS if cfg.get(k) is not None}
    cfg.pop("enable_hierarchical_cache", None)
    base.build_scheduler = hicache_build(base.build_scheduler, hicache)
    out = RecordWriter(open(a.out, "w"))
    try:
        summ = base.run(reqs, cfg, out=out, forward_cost_s=a.forward_cost_s, per_token_cost_s=a.per_token_cost_s,
                        ignore_eos=a.ignore_eos)
    finally:
        out.close()
    print(json.dumps({k: v for k, v in summ.items() if k not in ("requests", "config")}), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # SGLang leaves non-daemon helper threads behind


if __name__ == "__main__":
    main()
