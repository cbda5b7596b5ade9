#!/usr/bin/env python3
"""The damping frontier (issue 10, eleventh round): how close the adaptive
arm comes to the hindsight bound when its damping is relaxed, and what
that costs in reversals. A diagnostic, not a tuning: it runs on the five
evaluation seeds of campaigns/burstiness.py so that it can be read against
the bound run there, and no knob it tries is shipped.

Usage:
  git apply campaigns/variants/damping-knobs.patch
  go build -o /tmp/nb-knobs ./cmd/narwhal-bench && git checkout core && rm core/knobs_variant.go
  campaigns/burstiness.py --bound --out out/bound          # the bound (about an hour)
  campaigns/frontier.py --bin /tmp/nb-knobs --bound out/bound [--variants shipped,no-damping,arrow]
                        [--cases demo:cv1,azure:b8,...] [--out out/frontier]

Each variant is the adaptive arm with some of its knobs overridden through
NB_KNOBS (the patch's hook; durations in seconds), or another shipped arm.
Its sweeps (`sim ... --arms ARM --rates GRID --seeds SEEDS --json`, the
grids and seeds of burstiness.py) are kept in --out under a name made of
the build's hash, the variant and the case, so a rerun only re-reads them.
The bound is the `oracle` arm's mean sustained rate in the --bound
directory's sweep of the same case.

It prints one markdown row per case: the bound, then per variant its mean
sustained rate over the seeds, that over the bound's, and its reversals
within 60 s over split changes (every swept rate; the rates it sustains).
"""
import argparse
import concurrent.futures as cf
import glob
import hashlib
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import burstiness as B  # noqa: E402  (the traces, levels, grids and seeds)

DAMPING_OFF = 'Confirmations=1,TransientConfirmations=1,Evidence=0,ThrashWindow=0'
VARIANTS = {
    'shipped': ('adaptive', ''),
    'no-damping': ('adaptive', DAMPING_OFF),
    'one-confirmation': ('adaptive', 'Confirmations=1,TransientConfirmations=1'),
    'no-thrash-window': ('adaptive', 'ThrashWindow=0'),
    'transient-3': ('adaptive', 'TransientConfirmations=3'),
    'arrow': ('arrow', ''),
}
CASES = [(t, lv) for t in B.TRACES for lv in B.LEVELS if t != 'azure' or lv in ('cv1', 'b4', 'b8')]


def bound_of(bound_dir, trace, level):
    """The oracle's mean sustained rate in bound_dir's sweep of the case."""
    for path in sorted(glob.glob(os.path.join(bound_dir, f'{trace}-{level}-*.json'))):
        with open(path) as f:
            d = json.load(f)
        if 'oracle' in d['arms']:
            return d['sustained']['oracle']['mean'] or 0.0
    sys.exit(f'frontier.py: --bound {bound_dir}: no sweep of {trace} {level} with the oracle arm '
             f'(run campaigns/burstiness.py --bound --out {bound_dir})')


def sweep(binary, tag, out, variant, trace, level):
    arm, knobs = VARIANTS[variant]
    path = os.path.join(out, f'{tag}-{variant}-{trace}-{level}.json')
    args = [binary, 'sim'] + B.TRACES[trace] + B.LEVELS[level] + [
        '--arms', arm, '--rates', B.GRID[trace], '--seeds', B.seeds_for(trace, level, B.SEEDS[trace]), '--json']
    try:
        B.run_cached(args, path, env=dict(os.environ, NB_KNOBS=knobs))
    except RuntimeError as e:
        raise RuntimeError(f'{variant} {trace} {level}: {e}') from None
    with open(path) as f:
        d = json.load(f)
    per = [s['sustained'].get(arm) or 0.0 for s in d['per_seed']]
    revs = changes = op_revs = op_changes = 0
    for s in d['per_seed']:
        sus = s['sustained'].get(arm) or 0.0
        for r in s['runs']:
            if r['arm'] != arm:
                continue
            revs += r['reversals_60s']
            changes += r['split_changes']
            if r['rate'] <= sus + 1e-9:
                op_revs += r['reversals_60s']
                op_changes += r['split_changes']
    return sum(per) / len(per), (revs, changes), (op_revs, op_changes)


def pct(rc):
    r, c = rc
    return f'{r}/{c} ({100 * r / c:.0f}%)' if c else '0/0'


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--bin', required=True, help='a build with campaigns/variants/damping-knobs.patch')
    ap.add_argument('--bound', required=True, help='a campaigns/burstiness.py --bound output directory')
    ap.add_argument('--variants', default='shipped,no-damping,arrow')
    ap.add_argument('--cases', default='')
    ap.add_argument('--out', default=os.path.join(B.ROOT, 'out', 'frontier'))
    args = ap.parse_args()
    binary = os.path.abspath(args.bin)
    if not os.access(binary, os.X_OK):
        sys.exit(f'frontier.py: --bin {args.bin}: not an executable file')
    variants = args.variants.split(',')
    for v in variants:
        if v not in VARIANTS:
            sys.exit(f'frontier.py: --variants: {v!r}: expected one of {", ".join(VARIANTS)}')
    cases = CASES
    if args.cases:
        cases = [tuple(c.split(':', 1)) for c in args.cases.split(',')]
        for c in cases:
            if c not in CASES:
                sys.exit(f'frontier.py: --cases: {":".join(c)!r}: expected TRACE:LEVEL among '
                         f'{", ".join(t + ":" + lv for t, lv in CASES)}')
    with open(binary, 'rb') as f:
        tag = hashlib.sha256(f.read()).hexdigest()[:16]
    os.makedirs(args.out, exist_ok=True)
    bounds = {c: bound_of(args.bound, *c) for c in cases}
    head = ['trace', 'arrivals', 'bound (oracle)'] + [f'{v}: mean sustained; / bound; reversals all rates; '
                                                      f'rates it sustains' for v in variants]
    print('| ' + ' | '.join(head) + ' |')
    print('|' + '---|' * len(head))
    with cf.ThreadPoolExecutor(2) as ex:
        jobs = {(v, c): ex.submit(sweep, binary, tag, args.out, v, *c) for c in cases for v in variants}
        for c in cases:
            label = B.LABEL[c[1]]
            if c[0] == 'azure':  # recorded arrival times; batches laid over them
                label = 'recorded arrivals' if c[1] == 'cv1' else 'recorded, in ' + label
            row = [c[0], label, f'{bounds[c]:.2f}']
            for v in variants:
                try:
                    m, rc, op = jobs[(v, c)].result()
                except RuntimeError as e:
                    sys.exit(f'frontier.py: {e}')
                ratio = m / bounds[c] if bounds[c] else float('nan')
                row.append(f'{m:.2f}; {ratio:.2f}; {pct(rc)}; {pct(op)}')
            print('| ' + ' | '.join(row) + ' |', flush=True)


if __name__ == '__main__':
    main()
