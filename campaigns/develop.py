#!/usr/bin/env python3
"""The held-out protocol's development runs (docs/controllers.md, "Held-out
protocol for tuning the adaptive controller"): the adaptive arm alone, on
the development seeds, over every burstiness case of campaigns/burstiness.py
(five traces, arrival CV 1-4 and batches of mean 4 and 8), so that a change
of the controller can be compared with the controller before it, seed by
seed, without spending the evaluation seeds.

Usage:
  campaigns/develop.py run --bin BIN --out DIR [--cases demo:cv1,steady:b8,...] [--first N]
  campaigns/develop.py compare DIR_A DIR_B
  campaigns/develop.py attainment DIR_A DIR_B [--cases ...] [--all-rates]
  campaigns/develop.py failures DIR [--arm ARM]

`run` sweeps BIN's adaptive arm once per case (`BIN sim ... --arms adaptive
--rates GRID --seeds DEV --json`) and keeps each sweep's JSON in DIR as
TRACE-LEVEL.json; a case whose file exists is not run again. Environment
variables reach BIN unchanged, so a variant gated by one runs the same way.
DIR is stamped with BIN's SHA-256 and the NB_* variables of the first run
(and the seeds, with --first, and the refinement); a run of another build,
environment, seeds or refinement into it is refused, so a directory never
mixes two controllers. `--refine N` (default 3, as the evaluation) bisects
each seed's sustained rate N times within its grid step (sim --refine).
Two sweeps at a time (the machine's two cores).

`run --first N` sweeps fresh seeds instead: 100 from N on demo and steady,
20 on chatdoc and mixed (seed_spread.py's), 5 on the Azure traces. It is
the cheap held-out check of a change that moves only the adaptive arm
(the static splits it is judged against do not change): two builds run
with the same --first and compared seed for seed, in minutes rather than
seed_spread.py's hour or more per build.

`compare` prints one line per case found in both directories: the mean
sustained rate of A and of B (a seed that sustains nothing counts 0), the
per-seed difference B - A with its 95% interval (normal approximation;
forty-first round), how many seeds B sustains less and more than A, and
reversals within 60 s over split changes, summed over every seed and
rate.

`attainment` pairs the two runs' attainment seed by seed at each grid
rate of each case found in both (forty-fourth round): the mean of B's
attainment minus A's in points with its 95% interval, how many seeds B
qualifies less and more, and the TTFT misses, TPOT misses and spilled
prompts summed over the seeds, A -> B. The interval is Student's t
(compare's is the normal approximation, too narrow over the 5-20 seeds
of most cases). Rows run up to the first grid rate above every seed's
sustained rate in A (the rates that decide a
sustained rate; `--all-rates` for the whole grid), and a row whose
interval excludes zero is marked (`*`). A case sitting at the 90% line
turns half a point of attainment into a sustained rate that jumps on
a few seeds and not on others; this reading shows whether such a
change is systematic, at which rates, and what it trades.

`failures` reads every sweep in DIR (develop.py's own, or any `sim
--seeds ... --json` output kept there) and says, per file, how ARM
(default adaptive) fails at each seed's first rate under 90%: more than
10% of the offered requests missing TTFT alone (`ttft`), TPOT alone
(`tpot`), both SLOs past 10% (`both`), each within 10% and together
over it (`joint`: a per-SLO check at 90% sees no miss), or neither
(`other`: refusals, expiries, answers cut at their cap or too short),
and how many seeds never fail on the grid (`none`). A request is
counted under the first check it failed, TTFT before TPOT.

The development seeds: demo 300-399, steady 300-339, chatdoc and mixed
300-309, the Azure traces 300 (one seed: a seed there takes minutes).
"""
import argparse
import concurrent.futures as cf
import hashlib
import json
import math
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import burstiness as B  # noqa: E402  (the traces, levels and grids)

DEV_SEEDS = {'demo': '300..399', 'steady': '300..339', 'chatdoc': '300..309', 'mixed': '300..309',
             'azure': '300..300'}
# The Azure traces keep their recorded arrivals: no gamma redraw there.
CASES = [(t, lv) for t in ('demo', 'steady', 'chatdoc', 'mixed', 'azure') for lv in B.LEVELS
         if t != 'azure' or lv in ('cv1', 'b4', 'b8')]


def eval_seeds(first):
    """An evaluation's seeds from first: 100 on demo and steady, 20 on
    chatdoc and mixed (as seed_spread.py), 5 on the Azure traces."""
    span = {'demo': 100, 'steady': 100, 'chatdoc': 20, 'mixed': 20, 'azure': 5}
    return {t: f'{first}..{first + k - 1}' for t, k in span.items()}


def parse_cases(text):
    if not text:
        return CASES
    out = []
    for c in text.split(','):
        t, _, lv = c.partition(':')
        if (t, lv) not in CASES:
            sys.exit(f'develop.py: --cases: {c!r}: expected TRACE:LEVEL with TRACE one of '
                     f'{", ".join(B.TRACES)} and LEVEL one of {", ".join(B.LEVELS)} '
                     f'(the Azure traces: cv1, b4, b8)')
        out.append((t, lv))
    return out


def stamp_dir(out, binary, seeds, refine):
    """Stamps out with the build, the NB_* environment and the refinement
    of its sweeps, or exits when it holds another's."""
    with open(binary, 'rb') as f:
        build = hashlib.sha256(f.read()).hexdigest()
    env = ' '.join(f'{k}={v}' for k, v in sorted(os.environ.items()) if k.startswith('NB_'))
    stamp = f'{build} {env}'.strip()
    if seeds is not DEV_SEEDS:
        stamp = f'{build} {env} seeds {seeds["demo"]}'.strip()
    if refine:
        stamp += f' refine {refine}'
    stamp += '\n'
    path = os.path.join(out, 'STAMP')
    if os.path.exists(path):
        with open(path) as f:
            have = f.read()
        if have != stamp:
            sys.exit(f'develop.py: {out} holds sweeps of another build or environment '
                     f'({have.strip()}; this run: {stamp.strip()}): use another --out')
        return
    with open(path, 'w') as f:
        f.write(stamp)


def run_case(binary, out, trace, level, seeds, refine):
    path = os.path.join(out, f'{trace}-{level}.json')
    args = [binary, 'sim'] + B.TRACES[trace] + B.LEVELS[level] + [
        '--arms', 'adaptive', '--rates', B.GRID[trace], '--seeds', B.seeds_for(trace, level, seeds[trace]), '--json']
    if refine:
        args += ['--refine', str(refine)]
    try:
        B.run_cached(args, path)
    except RuntimeError as e:
        raise RuntimeError(f'{trace} {level}: {e}') from None
    return path


def load(path):
    with open(path) as f:
        d = json.load(f)
    per = {s['seed']: (s['sustained'].get('adaptive') or 0) for s in d['per_seed']}
    runs = [r for s in d['per_seed'] for r in s['runs'] if r['arm'] == 'adaptive']
    return per, sum(r['reversals_60s'] for r in runs), sum(r['split_changes'] for r in runs)


def difference(a, b):
    """B's sustained rate minus A's, per seed: the mean and its 95%
    interval (burstiness.mean_interval), or the one seed's difference."""
    m, half = B.mean_interval([b[s] - a[s] for s in sorted(a)])
    if math.isnan(half):
        return f'B-A {m:+.3f} (one seed)'
    return 'B-A ' + B.interval(m, half, digits=3)


def paired(a_dir, b_dir, cases):
    """Each case's sweep in both directories: (trace, level, A's file,
    B's file), in the order of cases; exits when no case is in both."""
    found = False
    for t, lv in cases:
        pa, pb = (os.path.join(x, f'{t}-{lv}.json') for x in (a_dir, b_dir))
        if os.path.exists(pa) and os.path.exists(pb):
            found = True
            yield t, lv, pa, pb
    if not found:
        sys.exit(f'develop.py: no case is in both {a_dir} and {b_dir}')


def compare(a_dir, b_dir):
    for t, lv, pa, pb in paired(a_dir, b_dir, CASES):
        (a, ra, ca), (b, rb, cb) = load(pa), load(pb)
        if set(a) != set(b):
            sys.exit(f'develop.py: {t} {lv}: the two runs have different seeds')
        ma, mb = sum(a.values()) / len(a), sum(b.values()) / len(b)
        lower = sum(1 for s in a if b[s] < a[s])
        higher = sum(1 for s in a if b[s] > a[s])
        print(f'{t:8s} {lv:4s} {ma:7.3f} -> {mb:7.3f}  {difference(a, b)}  seeds lower/higher {lower}/{higher}  '
              f'reversals {ra}/{ca} -> {rb}/{cb}')


def grid_runs(path):
    """A sweep's grid rates and its adaptive runs at them, keyed (seed,
    rate); the rates its refinement added per seed are left out (they
    differ from seed to seed and from build to build)."""
    with open(path) as f:
        d = json.load(f)
    rates = [round(r, 6) for r in d.get('rates', [])]
    if not rates or not d.get('per_seed'):
        sys.exit(f'develop.py: {path}: no grid rates or no seeds (expected a sim --seeds ... --json sweep)')
    grid = set(rates)
    runs = {(s['seed'], round(r['rate'], 6)): r for s in d['per_seed'] for r in s['runs']
            if r['arm'] == 'adaptive' and round(r['rate'], 6) in grid}
    top = max((s['sustained'].get('adaptive') or 0) for s in d['per_seed'])
    return rates, runs, top


# Student's t at 0.975 by degrees of freedom (1-30, then 40, 60, 120).
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160,
        2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056,
        2.052, 2.048, 2.045, 2.042]


def t975(df):
    """Student's t quantile at 0.975 for df degrees of freedom: exact to
    three places up to 30; past it the value at the tabulated df just
    below (30, 40, 60 or 120), so never narrower than the exact one."""
    if df <= 30:
        return T975[df - 1]
    return 2.042 if df <= 40 else 2.021 if df <= 60 else 2.000 if df <= 120 else 1.980


def t_interval(diff):
    """The mean of per-seed differences and the half-width of its 95%
    Student-t interval (nan under two seeds): over the 5-20 seeds of most
    cases the normal approximation compare uses is too narrow."""
    if len(diff) < 2:
        return statistics.mean(diff), float('nan')
    return statistics.mean(diff), t975(len(diff) - 1) * statistics.stdev(diff) / math.sqrt(len(diff))


def attainment(a_dir, b_dir, cases, all_rates):
    for t, lv, pa, pb in paired(a_dir, b_dir, cases):
        (ra, a, top), (rb, b, _) = grid_runs(pa), grid_runs(pb)
        if ra != rb or set(a) != set(b):
            sys.exit(f'develop.py: {t} {lv}: the two runs have different seeds or grids')
        print(f'{t:8s} {lv:4s} {"rate":>7s}  {"A mean":>7s}  {"B-A points [95% t]":26s} lower/higher  '
              f'TTFT misses A -> B   TPOT misses A -> B   spilled A -> B')
        lower, higher = [], []
        for rate in ra:
            keys = sorted(k for k in a if k[1] == rate)
            if not keys:
                continue
            diff = [100 * (b[k]['attainment'] - a[k]['attainment']) for k in keys]
            m, half = t_interval(diff)
            mark = ' '
            if not math.isnan(half) and (m - half > 0 or m + half < 0):
                mark = '*'
                (higher if m > 0 else lower).append(f'{rate:.3f}')
            mean_a = 100 * sum(a[k]['attainment'] for k in keys) / len(keys)

            def tot(runs, field):
                return sum(runs[k].get(field, 0) for k in keys)
            cmp = f'{B.interval(m, half, digits=2)} {mark}'
            print(f'{"":13s} {rate:7.3f}  {mean_a:6.2f}%  {cmp:26s} '
                  f'{sum(1 for x in diff if x < 0):5d}/{sum(1 for x in diff if x > 0):<5d}  '
                  f'{tot(a, "miss_ttft"):8d} -> {tot(b, "miss_ttft"):<8d} '
                  f'{tot(a, "miss_tpot"):8d} -> {tot(b, "miss_tpot"):<8d} '
                  f'{tot(a, "spilled"):6d} -> {tot(b, "spilled"):<6d}')
            if rate > top and not all_rates:
                break
        print(f'{t:8s} {lv:4s} B lower (interval below zero) at: {", ".join(lower) or "none"}; '
              f'higher (interval above zero) at: {", ".join(higher) or "none"}')


def failure_kind(run):
    """How a run under 90% attainment failed: 'ttft' or 'tpot' when that
    SLO alone missed more than 10% of the offered requests (a request is
    counted under the first check it failed, TTFT before TPOT), 'both'
    when both did, 'joint' when neither did but their misses add up past
    10%, 'other' when they do not (refusals, expiries, answers cut at
    their cap or too short make up the rest)."""
    o = max(run['offered'], 1)
    t, p = run['miss_ttft'] / o, run['miss_tpot'] / o
    if t > 0.1 and p > 0.1:
        return 'both'
    if t > 0.1:
        return 'ttft'
    if p > 0.1:
        return 'tpot'
    return 'joint' if t + p > 0.1 else 'other'


def failures(directory, arm):
    if not os.path.isdir(directory):
        sys.exit(f'develop.py: failures: {directory}: not a directory (expected a directory of sweeps)')
    names = sorted(n for n in os.listdir(directory) if n.endswith('.json'))
    if not names:
        sys.exit(f'develop.py: failures: {directory} holds no .json sweep')
    for n in names:
        path = os.path.join(directory, n)
        try:
            with open(path) as f:
                d = json.load(f)
        except (OSError, ValueError) as e:
            sys.exit(f'develop.py: failures: {path}: not a sweep\'s JSON ({e})')
        if not isinstance(d, dict):
            sys.exit(f'develop.py: failures: {path}: not a sweep\'s JSON (expected an object)')
        per_seed = d.get('per_seed') or [d]
        counts = {k: 0 for k in ('ttft', 'tpot', 'both', 'joint', 'other', 'none')}
        seen = False
        for s in per_seed:
            runs = sorted((r for r in s.get('runs', []) if r['arm'] == arm), key=lambda r: r['rate'])
            seen = seen or bool(runs)
            first = next((r for r in runs if r['attainment'] < 0.9), None)
            counts[failure_kind(first) if first else 'none'] += 1
        if not seen:
            print(f'{n[:-5]:28s} no runs of {arm}')
            continue
        print(f'{n[:-5]:28s} ' + '  '.join(f'{k} {v}' for k, v in counts.items()))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    sub = ap.add_subparsers(dest='cmd', required=True)
    r = sub.add_parser('run', help='sweep a binary\'s adaptive arm on the development seeds')
    r.add_argument('--bin', default=os.path.join(B.ROOT, 'bin', 'narwhal-bench'))
    r.add_argument('--out', required=True)
    r.add_argument('--cases', default='')
    r.add_argument('--first', type=int, default=0,
                   help='evaluate on fresh seeds from FIRST (100 on demo and steady, 20 on chatdoc '
                        'and mixed, 5 on Azure) instead of the development seeds')
    r.add_argument('--refine', type=int, default=B.REFINE,
                   help=f'bisections of the sustained rate within its grid step (sim --refine; default '
                        f'{B.REFINE}, as the evaluation; 0 for the grid alone)')
    c = sub.add_parser('compare', help='compare two run directories case by case')
    c.add_argument('a')
    c.add_argument('b')
    at = sub.add_parser('attainment', help='pair two run directories\' attainment seed by seed at each grid rate')
    at.add_argument('a')
    at.add_argument('b')
    at.add_argument('--cases', default='')
    at.add_argument('--all-rates', action='store_true',
                    help='every grid rate (default: up to the first above every seed\'s sustained rate in A)')
    f = sub.add_parser('failures', help='how an arm fails at each seed\'s first rate under 90%%')
    f.add_argument('dir')
    f.add_argument('--arm', default='adaptive')
    args = ap.parse_args()
    if args.cmd == 'failures':
        failures(args.dir, args.arm)
        return
    if args.cmd == 'compare':
        compare(args.a, args.b)
        return
    if args.cmd == 'attainment':
        attainment(args.a, args.b, parse_cases(args.cases), args.all_rates)
        return
    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        sys.exit(f'develop.py: --bin {args.bin}: not an executable file (build it: make build)')
    os.makedirs(args.out, exist_ok=True)
    seeds = eval_seeds(args.first) if args.first else DEV_SEEDS
    stamp_dir(args.out, binary, seeds, args.refine)
    cases = parse_cases(args.cases)
    with cf.ThreadPoolExecutor(2) as ex:
        jobs = {ex.submit(run_case, binary, args.out, t, lv, seeds, args.refine): (t, lv) for t, lv in cases}
        for j in cf.as_completed(jobs):
            t, lv = jobs[j]
            try:
                print(f'{t} {lv}: {j.result()}', flush=True)
            except RuntimeError as e:
                sys.exit(f'develop.py: {e}')


if __name__ == '__main__':
    main()
