#!/usr/bin/env python3
"""Issue 10's burstiness cases on many fresh seeds: adaptive against the best
static split, with the spread of their difference.

The burstiness campaign (burstiness.py) evaluates each case on five seeds;
on demo a difference of one grid step on one seed moves a mean by 4-5%, so
this script reruns every case (the same grids, arms and arrival levels) on
a hundred seeds from --first on demo and steady (short traces), twenty on
chatdoc, mixed and the Azure traces in batches, and one on the Azure
traces' recorded arrivals (no seed changes them; its row gives no
interval). The default, 600 (seeds 600-699 and 600-619), is
the evaluation of the controller with the decode-noise robustness check,
on seeds never used before it; 800 evaluated the delivered-attainment
check after it (docs/controllers-rounds.md, fifth round), 1000 the check
counting only the split's own requests after a move (sixth round), 1200
the relative margin waived for a split missing an SLO by both accounts
(seventh round); 400 evaluated the controller with the
pending-context TPOT projection, 100 the controller before that, and
300-399 were development seeds (docs/controllers.md). Per case it prints
adaptive's and the best static split's mean sustained rate, their ratio,
the mean per-seed difference with a 95% interval (normal approximation:
mean +- 1.96 standard errors), on how many seeds adaptive sustains less,
as much, or more; the same against the best static split placed as
adaptive places (static:kPmD/alg1: routing held equal, role control
alone); the same against aggregated serving (a sweep of its own, as
burstiness.py runs it: mean, ratio of means, per-seed difference and
its interval, seeds below / equal / above; thirty-sixth round); and
adaptive's moves per hour and reversals within 60 s
(as burstiness.py counts them: over every swept rate, and over the rates
adaptive sustains).

    python3 campaigns/seed_spread.py [--bin bin/narwhal-bench] [--out DIR] [--first 600] [--cases demo:b8,...]
    python3 campaigns/seed_spread.py [--bin ...] [--out DIR] --pool 1000,1200
    python3 campaigns/seed_spread.py --pool-dirs DIR_A,DIR_B,...

With --pool-dirs DIR,DIR,... it pools the same way the sweeps that
burstiness.py kept in each directory (its --out, one run per seed set,
e.g. the evaluation seeds and two fresh sets), over the cases every
directory holds and the arms every sweep ran; nothing is run. The
directories must hold one build's sweeps (burstiness.py names each
sweep by the build and command line, not the sweep's contents), as
pooling two controllers' seeds measures neither.

With --pool, the sweeps of several seed sets (each as --first gives it)
are pooled per case: it prints adaptive / best static of the means over
all their seeds, and a 95% bootstrap interval of that ratio (2,000
resamples of the seeds, the best static split chosen again in each; a
fixed generator seed, so the output is the same every time), against
the token-placed splits and the /alg1 ones, and against aggregated
serving where every set has its sweep (its resamples drawn from a
generator of their own, so the static columns read as they did before
it; "-" where a set has none). Its three summary lines (the lowest case
of each column) give the interval to four places, and beside it a
second reading, a normal interval by the delta method for a ratio of
means, the rival fixed to the one chosen over all seeds (thirty-eighth
round).

About 70 minutes on two cores (forty-first round, every case; the
/alg1 splits nearly double the runs). Sweeps are cached in --out by binary and
command line, as burstiness.py caches them.
"""
import argparse
import glob
import json
import math
import os
import random
import statistics
import sys

import burstiness as B



def seeds_from(first):
    """The seeds of each trace: 100 on the short traces, 20 on the others."""
    many, few = f'{first}..{first + 99}', f'{first}..{first + 19}'
    return {'demo': many, 'steady': many, 'chatdoc': few, 'mixed': few, 'azure': few}


CASES = [(t, lv) for t in ['demo', 'steady', 'chatdoc', 'mixed'] for lv in ['cv1', 'cv2', 'cv3', 'cv4', 'b4', 'b8']]
CASES += [('azure', lv) for lv in ['cv1', 'b4', 'b8']]
AZURE = {'cv1': 'recorded arrivals', 'b4': 'recorded, in batches of mean 4', 'b8': 'recorded, in batches of mean 8'}


def reversals(s):
    """Reversals within 60 s over changes of the prefill pool, over every
    swept rate and over the rates adaptive sustains (burstiness.py's)."""
    pct = lambda n, d: f'{n}/{d} ({100 * n / d:.0f}%)' if d else '0/0'
    return f"{pct(s['revs'], s['changes'])}; {pct(s['op_revs'], s['op_changes'])}"


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--bin', default=os.path.join(B.ROOT, 'bin', 'narwhal-bench'))
    p.add_argument('--out', default=os.path.join(B.ROOT, 'out', 'seed-spread'))
    p.add_argument('--first', type=int, default=600, help='the first seed of each trace (default 600)')
    p.add_argument('--pool', default='', help='first seeds of several sets (e.g. 1000,1200): pool them per case')
    p.add_argument('--cases', default='', help='only these cases, e.g. demo:b8,chatdoc:cv4 (default: every case)')
    p.add_argument('--pool-dirs', default='', help='directories of burstiness.py sweeps (e.g. its --out of '
                   'several --seeds runs), comma-separated: pool their seeds per case')
    a = p.parse_args()
    if a.cases:
        want = [tuple(c.partition(':')[::2]) for c in a.cases.split(',')]
        bad = [f'{t}:{lv}' for t, lv in want if (t, lv) not in CASES]
        if bad:
            p.error(f'--cases: {", ".join(bad)}: expected TRACE:LEVEL among '
                    f'{", ".join(f"{t}:{lv}" for t, lv in CASES)}')
        CASES[:] = [c for c in CASES if c in want]
    if a.pool_dirs:
        dirs = a.pool_dirs.split(',')
        for d in dirs:
            if not os.path.isdir(d):
                p.error(f'--pool-dirs: {d!r} is not a directory (expected burstiness.py --out directories)')
        pool_dirs(dirs)
        return
    os.makedirs(a.out, exist_ok=True)
    if a.pool:
        try:
            firsts = [int(x) for x in a.pool.split(',')]
        except ValueError:
            p.error(f'--pool {a.pool!r}: expected first seeds separated by commas, e.g. 1000,1200')
        pool(a, firsts)
        return
    SEEDS = seeds_from(a.first)
    B.SEEDS.update(SEEDS)
    print('| trace | arrivals | seeds | best static: mean sustained, req/s | adaptive | adaptive / best static (of means) '
          '| adaptive - best static per seed, req/s [95% interval] | seeds below / equal / above '
          '| best static placed as adaptive places (/alg1) | adaptive / it (of means); seeds below / equal / above '
          '| aggregated | adaptive / it (of means); adaptive - it per seed, req/s [95% interval]; seeds below / equal / above '
          '| adaptive moves/h | reversals within 60 s / changes: all rates; rates it sustains |')
    print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
    worst, worst_alg1, worst_agg = [], [], []
    tot = dict(revs=0, changes=0, op_revs=0, op_changes=0)
    for trace, level in CASES:
        d = B.sweep(a.bin, a.out, trace, level, B.STATIC + ',' + B.STATIC_ALG1 + ',adaptive')
        # Aggregated serving in a sweep of its own (as burstiness.py runs
        # it), so the cached sweeps of the other arms stay valid.
        ag = against(d, B.sweep(a.bin, a.out, trace, level, 'aggregated'), 'aggregated')
        s = B.summarise(d, 'adaptive')
        label = AZURE[level] if trace == 'azure' else B.LABEL[level]
        for k in tot:
            tot[k] += s[k]
        # The seeds the case ran, read off the sweep (the Azure traces'
        # recorded arrivals run on the first alone: burstiness.seeds_for).
        seeds = seed_label([x['seed'] for x in d['per_seed']])
        if ag['mean']:
            worst_agg.append((ag['ratio'], trace, label))
        if not s['best_mean']:
            print(f"| {trace} | {label} | {seeds} | none: no split sustains the grid's lowest rate | - | - | - | - | - | - "
                  f"| {agg_cells(ag)} | {s['moves_h']:.0f} | {reversals(s)} |")
            continue
        sus = lambda x, arm: x['sustained'][arm] or 0.0
        md, half = B.mean_interval([sus(x, 'adaptive') - sus(x, s['best']) for x in d['per_seed']])
        g, t = s['alg1'], s['tok']
        print(f"| {trace} | {label} | {seeds} | {s['best'].removeprefix('static:')} {s['best_mean']:.2f} | {s['arm_mean']:.2f} "
              f"| {s['ratio']:.3f} | {B.interval(md, half)} | {t['below']} / {t['equal']} / {t['above']} "
              f"| {g['best'].removeprefix('static:')} {g['mean']:.2f} | {g['ratio']:.3f}; {g['below']} / {g['equal']} / {g['above']} "
              f"| {agg_cells(ag)} | {s['moves_h']:.0f} | {reversals(s)} |",
              flush=True)
        worst.append((s['ratio'], trace, label))
        if g['mean']:
            worst_alg1.append((g['ratio'], trace, label))
    print()
    # --cases may leave only cases no split sustains: a list may be empty.
    lowest('best static', worst)
    lowest('best static placed as adaptive places (/alg1)', worst_alg1)
    lowest('aggregated', worst_agg)
    print(f'reversals within 60 s / changes over every case: all rates; rates adaptive sustains: {reversals(tot)}')


def lowest(what, rows):
    """The summary line of adaptive's lowest ratio to what over the
    cases, rows of (ratio, trace, label), and every case under 0.97;
    nothing when no case has the ratio."""
    if not rows:
        return
    r, trace, label = min(rows)
    under = ", ".join(f"{t} {lb} {x:.4f}" for x, t, lb in sorted(rows) if x < 0.97) or "none"
    print(f'minimum adaptive / {what} over {len(rows)} cases: {r:.4f} ({trace}, {label}); under 0.97: {under}')


def against(d, g, other, arm='adaptive'):
    """arm of sweep d against other, the one arm of sweep g (the same
    case and seeds): other's mean sustained rate, arm's ratio to it (of
    means), their per-seed difference's mean and 95% interval (normal
    approximation), and on how many seeds arm sustains less, as much and
    more (a seed that sustains nothing counts 0)."""
    sus = lambda x, a: x['sustained'][a] or 0.0
    own = {x['seed']: sus(x, arm) for x in d['per_seed']}
    theirs = {x['seed']: sus(x, other) for x in g['per_seed']}
    if set(own) != set(theirs):
        sys.exit(f'seed_spread.py: the {other} sweep ran seeds {sorted(theirs)}, the {arm} sweep {sorted(own)}')
    diff = [own[k] - theirs[k] for k in sorted(own)]
    mean = statistics.mean(theirs.values())
    md, half = B.mean_interval(diff)
    return dict(mean=mean, ratio=statistics.mean(own.values()) / mean if mean else float('nan'), diff=md, half=half,
                below=sum(1 for x in diff if x < -1e-9), equal=sum(1 for x in diff if abs(x) <= 1e-9),
                above=sum(1 for x in diff if x > 1e-9))


def agg_cells(ag):
    """The aggregated columns of the table."""
    return (f"{ag['mean']:.2f} | {ag['ratio']:.3f}; {B.interval(ag['diff'], ag['half'])}; "
            f"{ag['below']} / {ag['equal']} / {ag['above']}")


def seed_label(seeds):
    """The seeds cell: one seed, a run of consecutive seeds as A-B, or
    the list."""
    seeds = sorted(seeds)
    if len(seeds) == 1:
        return str(seeds[0])
    if seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f'{seeds[0]}-{seeds[-1]}'
    return ','.join(map(str, seeds))


def rival(mean, alg1):
    """The arm adaptive is measured against, from the arms' means: the
    best static split (token-placed, or /alg1), or with alg1 None
    aggregated serving; None when there is none."""
    if alg1 is None:
        return 'aggregated' if 'aggregated' in mean else None
    return max((a for a in mean if a.startswith('static:') and a.endswith('/alg1') == alg1),
               key=lambda a: mean[a], default=None)


def pooled_ratio(arms, idx, alg1):
    """adaptive / its rival (above) of the means over the seeds idx
    (indices, repeats allowed); None when no split sustains anything."""
    mean = {a: sum(v[i] for i in idx) / len(idx) for a, v in arms.items()}
    best = rival(mean, alg1)
    return mean['adaptive'] / mean[best] if best and mean[best] > 0 else None


def delta_interval(arms, alg1):
    """A normal 95% interval for pooled_ratio over every seed by the delta
    method (a second reading beside the bootstrap's), against the rival
    chosen over all seeds."""
    n = len(arms['adaptive'])
    mean = {a: sum(v) / n for a, v in arms.items()}
    best = rival(mean, alg1)
    if best is None or mean[best] <= 0 or n < 2:
        return None
    r = mean['adaptive'] / mean[best]
    d = [(x - r * y) / mean[best] for x, y in zip(arms['adaptive'], arms[best])]
    m = sum(d) / n
    se = (sum((v - m) ** 2 for v in d) / (n - 1) / n) ** 0.5
    return r - 1.96 * se, r + 1.96 * se


def pool(a, firsts):
    """Per case, the ratio over the pooled seeds of every set in firsts,
    with its 95% bootstrap interval."""
    def sweeps(trace, level):
        out, sets, ags = [], [], []
        for first in firsts:
            B.SEEDS.update(seeds_from(first))
            sets.append(B.SEEDS[trace].replace('..', '-'))
            out.append(B.sweep(a.bin, a.out, trace, level, B.STATIC + ',' + B.STATIC_ALG1 + ',adaptive'))
            ags.append(B.sweep(a.bin, a.out, trace, level, 'aggregated'))
        return out, sets, ags
    pooled(sweeps)


def load_sweep(d, trace, level, who, hint, arm='adaptive'):
    """The one sweep of the case cached in d that ran arm (burstiness.py's
    and this script's file names), or None; several are an error naming
    who and hint. burstiness.py keeps aggregated serving beside the
    adaptive arm's sweep as a sweep of its own (thirty-third round): with
    arm 'aggregated', that sweep (aggregated serving alone)."""
    found = []
    for path in sorted(glob.glob(os.path.join(d, f'{trace}-{level}-*.json'))):
        with open(path) as f:
            sw = json.load(f)
        arms = sw.get('arms', [])
        if arm in arms and (arm == 'adaptive' or arms == [arm]):
            found.append((path, sw))
    if len(found) > 1:
        sys.exit(f'{who}: {d}: several sweeps of {trace} {level} ({", ".join(p for p, _ in found)}): {hint}')
    return found[0][1] if found else None


def pool_dirs(dirs):
    """pool over the sweeps burstiness.py (or this script) kept in dirs:
    per case, every directory's one sweep of it; a case missing from any
    directory is left out."""
    def sweeps(trace, level):
        out, sets, ags = [], [], []
        for d in dirs:
            sw = load_sweep(d, trace, level, 'seed_spread.py', 'one build and seed set per directory')
            if sw is None:
                return None, None, None
            out.append(sw)
            seeds = sorted(x['seed'] for x in sw['per_seed'])
            sets.append(f'{seeds[0]}-{seeds[-1]}' if len(seeds) > 1 else str(seeds[0]))
            ags.append(load_sweep(d, trace, level, 'seed_spread.py', 'one build and seed set per directory', 'aggregated'))
        return out, sets, ags
    pooled(sweeps)


def pooled(sweeps):
    """The pooled table: sweeps(trace, level) gives the case's sweeps and
    their seed sets' names (None when the case is not in every set)."""
    rng, rng_agg = random.Random(0), random.Random(1)
    print('| trace | arrivals | seeds | adaptive / best static (of means) [95% bootstrap interval] '
          '| adaptive / best static placed as adaptive places (/alg1) [95%] | adaptive / aggregated [95%] |')
    print('|---|---|---|---|---|---|')
    worst = {False: [], True: [], None: []}
    for trace, level in CASES:
        ds, sets, ags = sweeps(trace, level)
        if ds is None:
            continue
        # The arms every set swept (a set run with the bound has two more).
        common = set.intersection(*(set(x['sustained']) for d in ds for x in d['per_seed']))
        arms = {arm: [] for arm in common}
        # Aggregated serving, where every set has its sweep (of the same seeds).
        both = all(g is not None for g in ags)
        if both:
            arms['aggregated'] = []
        for d, g in zip(ds, ags):
            agg = {x['seed']: x['sustained']['aggregated'] or 0.0 for x in g['per_seed']} if both else {}
            for x in d['per_seed']:
                for arm in common:
                    arms[arm].append(x['sustained'][arm] or 0.0)
                if both:
                    if x['seed'] not in agg:
                        sys.exit(f"seed_spread.py: {trace} {level}: the aggregated sweep lacks seed {x['seed']}")
                    arms['aggregated'].append(agg[x['seed']])
        n = len(arms['adaptive'])
        cells = []
        for alg1 in (False, True, None):
            if alg1 is None and not both:
                cells.append('-')
                continue
            r = pooled_ratio(arms, range(n), alg1)
            if r is None:
                cells.append("none: aggregated sustains nothing" if alg1 is None else
                             "none: no split sustains the grid's lowest rate")
                continue
            # Aggregated serving's resamples come from a generator of their
            # own, so the static columns read as they did before it.
            g = rng_agg if alg1 is None else rng
            boot = sorted(x for x in (pooled_ratio(arms, [g.randrange(n) for _ in range(n)], alg1)
                                      for _ in range(2000)) if x is not None)
            lo, hi = boot[int(0.025 * len(boot))], boot[int(0.975 * len(boot)) - 1]
            cells.append(f'{r:.3f} [{lo:.3f}, {hi:.3f}]')
            worst[alg1].append((r, lo, hi, trace, AZURE[level] if trace == 'azure' else B.LABEL[level],
                                delta_interval(arms, alg1)))
        label = AZURE[level] if trace == 'azure' else B.LABEL[level]
        print(f"| {trace} | {label} | {', '.join(sets)} ({n}) | {cells[0]} | {cells[1]} | {cells[2]} |", flush=True)
    for alg1, name in ((False, 'best static'), (True, 'best static placed as adaptive places (/alg1)'),
                       (None, 'aggregated')):
        if worst[alg1]:
            r, lo, hi, trace, label, dm = min(worst[alg1], key=lambda w: w[:5])
            normal = f'; delta method [{dm[0]:.4f}, {dm[1]:.4f}]' if dm else ''
            print(f'minimum adaptive / {name} over {len(worst[alg1])} cases: {r:.4f} [{lo:.4f}, {hi:.4f}]{normal} '
                  f'({trace}, {label})')


if __name__ == '__main__':
    main()
