"""The prompt pool of a shared-prefix workload (inference-perf's ``shared_prefix`` data, SGLang bench's
``generated-shared-prefix``): groups of prompts that start with the same system prompt."""

from __future__ import annotations

import numpy as np

from simmodel.config.schema import SharedPrefixSource
from simmodel.traffic.lengths import sample_lengths


class SharedPrefixPool:
    """The distinct prompts of a shared-prefix workload: prompt p (in generation order: group p //
    prompts_per_group) is its group's system prompt then its own question. The pool is shuffled once;
    request i sends ``order[i mod size]``. KV content: a block wholly inside the system prompt is the
    group's, any other block the prompt's own (so a repeated prompt finds all of it cached)."""

    def __init__(self, source: SharedPrefixSource, rng: np.random.Generator) -> None:
        size = source.num_groups * source.prompts_per_group
        self.group = np.arange(size) // source.prompts_per_group
        self.system_tokens = sample_lengths(source.system_prompt_tokens, rng, source.num_groups)[self.group]
        self.prompt_tokens = self.system_tokens + sample_lengths(source.question_tokens, rng, size)
        self.order = rng.permutation(size)

    def prompt_of(self, i):
        return self.order[i % len(self.order)]

    def block_content(self, i: int, num_prompt_tokens: int, block_size: int):
        p = int(self.prompt_of(i))
        group, shared = int(self.group[p]), min(int(self.system_tokens[p]), num_prompt_tokens)

        def content(j: int) -> object:
            return (-2, group, j) if (j + 1) * block_size <= shared else (-5, p, j)
        return content

    def segments(self, i: int, num_prompt_tokens: int) -> list:
        p = int(self.prompt_of(i))
        shared = min(int(self.system_tokens[p]), num_prompt_tokens)
        segs = [((-2, int(self.group[p])), shared)]
        if num_prompt_tokens > shared:
            segs.append(((-5, p), num_prompt_tokens - shared))
        return segs
