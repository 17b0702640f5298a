"""Each trial's seed, derived from the experiment's ``seed``, its index and what draws with it.

Every trial asks from its own process, so a sampler seeded with the bare ``seed`` would draw the
same "random" point in every trial. Seeding trial *i* with ``seed + i`` (as before) made
experiments overlap: seeds 1 and 3 shared every trial but two (trial 2 of one was trial 0 of
the other), and two tuners given the same seed (Metis and DNGO) asked identical random starts.
NumPy's SeedSequence mixes the three into 32 bits with no such structure: reproducible for the
same (seed, trial, stream), independent otherwise, as NumPy's parallel streams are.
"""

from __future__ import annotations

import zlib

from numpy.random import SeedSequence


def trial_seed(seed: int, trial_index: int, stream: str) -> int:
    """The 32-bit seed of trial ``trial_index`` of an experiment seeded ``seed``, for ``stream``
    (the tuner's name or class path: two tuners seeded alike draw apart)."""
    entropy = [seed % 2**64, zlib.crc32(stream.encode("utf-8"))]
    return int(SeedSequence(entropy, spawn_key=(trial_index,)).generate_state(1)[0])
