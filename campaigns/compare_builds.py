#!/usr/bin/env python3
"""Two builds of the controller on the same seeds (docs/controllers.md,
"Burst insurance"): reads the sweeps that campaigns/seed_spread.py cached
for each build (run it twice, `--bin A --out DIR_A` and `--bin B --out
DIR_B`, with the same --first) and prints, per case found in both, the
best static split (identical in both: the static arms do not depend on
the controller), each build's adaptive mean sustained rate and adaptive /
best static split of the means with its 95% bootstrap interval (2,000
resamples, best split re-chosen per resample, fixed generator seed), the
seeds where A sustains less / more than B, the ratio against the best
split placed as adaptive places (/alg1), and reversals within 60 s over
changes at the rates adaptive sustains.

Usage:
  campaigns/compare_builds.py DIR_A DIR_B
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from seed_spread import load_sweep, pooled_ratio  # noqa: E402

LEVELS = {'cv1': 'Poisson (CV 1)', 'cv2': 'gamma CV 2', 'cv3': 'gamma CV 3', 'cv4': 'gamma CV 4',
          'b4': 'batches of mean 4', 'b8': 'batches of mean 8'}
AZURE = {'cv1': 'recorded arrivals', 'b4': 'recorded, in batches of mean 4', 'b8': 'recorded, in batches of mean 8'}


def load(d, trace, level):
    """The sweep seed_spread.py cached in d for the case, or None."""
    return load_sweep(d, trace, level, 'compare_builds.py', 'one --first per directory')


def sustained(sweep):
    arms = {}
    for x in sweep['per_seed']:
        for arm, v in x['sustained'].items():
            arms.setdefault(arm, []).append(v or 0.0)
    return arms


def reversals(sweep):
    """Adaptive's reversals within 60 s and split changes at the rates it sustains."""
    r = c = 0
    for x in sweep['per_seed']:
        top = x['sustained'].get('adaptive') or 0
        for run in x['runs']:
            if run['arm'] == 'adaptive' and run['rate'] <= top + 1e-9:
                r, c = r + run['reversals_60s'], c + run['split_changes']
    return r, c


def interval(arms, rng):
    n = len(arms['adaptive'])
    r = pooled_ratio(arms, range(n), False)
    if r is None:
        return None
    boot = sorted(x for x in (pooled_ratio(arms, [rng.randrange(n) for _ in range(n)], False)
                              for _ in range(2000)) if x is not None)
    return r, boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    a_dir, b_dir = sys.argv[1:]
    for d in (a_dir, b_dir):
        if not os.path.isdir(d):
            sys.exit(f'compare_builds.py: {d}: not a directory (expected a burstiness.py --out directory)')
    rng = random.Random(0)
    print(f'| trace | arrivals | seeds | best static, req/s | B ({b_dir}): adaptive; / best static [95%] '
          f'| A ({a_dir}): adaptive; / best static [95%] | A vs B: seeds lower / higher '
          '| / best static placed as adaptive places (/alg1): B; A '
          '| reversals within 60 s / changes at sustained rates: B; A |')
    print('|---|---|---|---|---|---|---|---|---|')
    worst = {}
    compared = 0
    for trace in ('demo', 'steady', 'chatdoc', 'mixed', 'azure'):
        for level in (('cv1', 'b4', 'b8') if trace == 'azure' else tuple(LEVELS)):
            a, b = load(a_dir, trace, level), load(b_dir, trace, level)
            if not (a and b):
                continue
            compared += 1
            if a['seeds'] != b['seeds']:
                sys.exit(f'compare_builds.py: {trace} {level}: the two directories swept different seeds')
            sa, sb = sustained(a), sustained(b)
            n = len(sa['adaptive'])
            best = max((x for x in sb if x.startswith('static:') and not x.endswith('/alg1')), key=lambda x: sum(sb[x]))
            mean_best = sum(sb[best]) / n
            cells = []
            for name, arms in (('B', sb), ('A', sa)):
                iv = interval(arms, rng)
                cells.append('-' if iv is None else
                             f"{sum(arms['adaptive']) / n:.2f}; {iv[0]:.3f} [{iv[1]:.3f}, {iv[2]:.3f}]")
                if iv:
                    worst.setdefault(name, []).append((iv[0], trace, level))
            alg1 = [pooled_ratio(arms, range(n), True) for arms in (sb, sa)]
            alg1 = ['-' if x is None else f'{x:.3f}' for x in alg1]
            lower = sum(1 for i in range(n) if sa['adaptive'][i] < sb['adaptive'][i])
            higher = sum(1 for i in range(n) if sa['adaptive'][i] > sb['adaptive'][i])
            revs = []
            for sweep in (b, a):
                r, c = reversals(sweep)
                revs.append(f'{r}/{c} ({100 * r / c:.0f}%)' if c else '0/0')
            label = AZURE[level] if trace == 'azure' else LEVELS[level]
            static = f'{best[len("static:"):]} {mean_best:.2f}' if mean_best > 0 else "none sustains the grid's lowest rate"
            print(f"| {trace} | {label} | {a['seeds'][0]}-{a['seeds'][-1]} | {static} | {cells[0]} | {cells[1]} "
                  f'| {lower} / {higher} | {alg1[0]}; {alg1[1]} | {revs[0]}; {revs[1]} |')
    if compared == 0:
        sys.exit(f'compare_builds.py: {a_dir} and {b_dir} share no case (trace and arrivals) to compare')
    for name in ('B', 'A'):
        if worst.get(name):
            r, trace, level = min(worst[name])
            print(f'minimum of adaptive / best static, {name}: {r:.3f} ({trace}, {LEVELS[level]})')


if __name__ == '__main__':
    main()
