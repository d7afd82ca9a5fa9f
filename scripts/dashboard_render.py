#!/usr/bin/env python3
"""Renders the panels of docs/dashboard/grafana-dashboard.json from a real run.

  dashboard_render.py sample PORT OUT.jsonl   scrape http://127.0.0.1:PORT/metrics
                                              once a second until interrupted
  dashboard_render.py plot IN.jsonl OUT.png   compute each panel's series the way
                                              its PromQL does (rates and
                                              histogram_quantile over a 10 s
                                              window) and plot them with gnuplot

scripts/dashboard_run.sh drives both around a fencegate-bench run.
"""
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
WINDOW = 10  # seconds, the rate window


def parse(text):
    samples = []
    for line in text.splitlines():
        if not line or line.startswith('#'):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(3) or ''))
        samples.append([m.group(1), labels, float(m.group(4))])
    return samples


def sample(port, out):
    with open(out, 'a') as f:
        while True:
            start = time.time()
            try:
                text = urllib.request.urlopen(
                    'http://127.0.0.1:%d/metrics' % port, timeout=10).read().decode()
                f.write(json.dumps({'t': start, 'samples': parse(text)}) + '\n')
                f.flush()
            except OSError:
                pass  # Not serving yet, or gone: try again.
            time.sleep(max(0, 1 - (time.time() - start)))


def total(snapshot, name, match=None, by=()):
    """Sums the samples of `name` whose labels include `match`, grouped by `by`."""
    groups = {}
    for n, labels, value in snapshot['samples']:
        if n != name or any(labels.get(k) != v for k, v in (match or {}).items()):
            continue
        key = tuple(labels.get(k, '') for k in by)
        groups[key] = groups.get(key, 0) + value
    return groups


def rate(snaps, i, name, match=None, by=()):
    # The oldest scrape within WINDOW seconds: late or failed scrapes leave
    # fewer in the window, never a longer window.
    j = i
    while j > 0 and snaps[i]['t'] - snaps[j - 1]['t'] <= WINDOW:
        j -= 1
    if i == j:
        return {}
    now, then = total(snaps[i], name, match, by), total(snaps[j], name, match, by)
    dt = snaps[i]['t'] - snaps[j]['t']
    return {k: max(0, v - then.get(k, 0)) / dt for k, v in now.items()}


def quantile(q, snaps, i, name, by=()):
    """histogram_quantile(q, sum by (by, le) (rate(name_bucket[WINDOW])))."""
    buckets = rate(snaps, i, name + '_bucket', by=tuple(by) + ('le',))
    series = {}
    for key, value in buckets.items():
        le = key[-1]
        series.setdefault(key[:-1], []).append(
            (math.inf if le == '+Inf' else float(le), value))
    out = {}
    for key, bs in series.items():
        bs.sort()
        count = bs[-1][1]
        if count <= 0:
            continue
        rank, lower, below = q * count, 0.0, 0.0
        for upper, cumulative in bs:
            if cumulative >= rank:
                if math.isinf(upper):
                    out[key] = lower
                else:
                    out[key] = lower + (upper - lower) * (rank - below) / max(
                        cumulative - below, 1e-12)
                break
            lower, below = upper, cumulative
    return out


PANELS = [
    ('Writes per second, by outcome (log scale)', 'writes/s',
     lambda s, i: {'%s' % k[0]: v for k, v in
                   rate(s, i, 'fencegate_writes_total', by=('outcome',)).items()}),
    ('Write latency by route (p50, p99)', 'ms',
     lambda s, i: {**{'p50 %s' % k[0]: v * 1000 for k, v in quantile(
         0.5, s, i, 'fencegate_write_duration_seconds', ('route',)).items()},
                   **{'p99 %s' % k[0]: v * 1000 for k, v in quantile(
                       0.99, s, i, 'fencegate_write_duration_seconds', ('route',)).items()}}),
    ('Fence advances per second, and fence store sync p99', '',
     lambda s, i: {**{'advances/s': v for v in rate(
         s, i, 'fencegate_fence_advances_total').values()},
                   **{'sync p99 (ms)': v * 1000 for v in quantile(
                       0.99, s, i, 'fencegate_fence_store_sync_duration_seconds').values()}}),
    ('Fence calls per second, by outcome', 'fences/s',
     lambda s, i: {k[0]: v for k, v in
                   rate(s, i, 'fencegate_fences_total', by=('outcome',)).items()}),
    ('PostgreSQL connections by route and state', 'connections',
     lambda s, i: {'%s %s' % k: v for k, v in total(
         s[i], 'fencegate_postgres_connections', by=('route', 'state')).items()}),
    ('PostgreSQL queue wait p99', 'ms',
     lambda s, i: {k[0]: v * 1000 for k, v in quantile(
         0.99, s, i, 'fencegate_postgres_queue_wait_seconds', ('route',)).items()}),
    ('Leases: held, grants and expiries per second', '',
     lambda s, i: {**{'held': v for v in total(s[i], 'fencegate_leases_held').values()},
                   **{'grants/s': v for v in rate(s, i, 'fencegate_lease_grants_total').values()},
                   **{'expiries/s': v for v in rate(
                       s, i, 'fencegate_lease_expiries_total').values()}}),
    ('Watchers connected (left), and domains (right)', 'connected',
     lambda s, i: {**{'%s connected' % k[0]: v for k, v in total(
         s[i], 'fencegate_watcher_connected', by=('source',)).items()},
                   **{'domains': v for v in total(s[i], 'fencegate_domains').values()}}),
]


def plot(inp, out):
    snaps = [json.loads(line) for line in open(inp)]
    if len(snaps) < 2:
        sys.exit('plot: fewer than two scrapes in %s' % inp)
    t0 = snaps[0]['t']
    work = tempfile.mkdtemp(prefix='fgdash-')
    script = ['set terminal pngcairo size 1600,1800 font "DejaVu Sans,10"',
              'set output "%s"' % out,
              'set multiplot layout 4,2 title "fencegate — %s, %d s of a fencegate-bench run" '
              'font ",14"' % (time.strftime('%Y-%m-%d', time.gmtime(t0)),
                              snaps[-1]['t'] - t0),
              'set key top left font ",9"', 'set grid', 'set xlabel "seconds"',
              'set datafile missing "?"']
    for p, (title, ylabel, series) in enumerate(PANELS):
        rows = [series(snaps, i) for i in range(len(snaps))]
        names = sorted({k for r in rows for k in r})
        data = os.path.join(work, 'panel%d.dat' % p)
        with open(data, 'w') as f:
            for i, r in enumerate(rows):
                f.write(' '.join(['%.1f' % (snaps[i]['t'] - t0)] +
                                 ['%g' % r[n] if n in r else '?' for n in names]) + '\n')
        log = 'log scale' in title
        script.append('set title "%s"' % title)
        script.append('set ylabel "%s"' % ylabel)
        script.append('set logscale y' if log else 'unset logscale y')
        # Domains on a right-hand axis of their own, beside 0/1 gauges.
        right = [n for n in names if n == 'domains']
        script.append('set y2tics' if right else 'unset y2tics')
        script.append('set yrange [0:1.2]' if right else 'set yrange [*:*]')
        if names:
            # A zero has no place on a log scale: it is left out.
            column = '($%d > 0 ? $%d : 1/0)' if log else '%d'
            script.append('plot ' + ', '.join(
                '"%s" using 1:%s with lines lw 2 title "%s"%s' % (
                    data, column % ((c + 2,) * column.count('%d')), n,
                    ' axes x1y2' if n in right else '')
                for c, n in enumerate(names)))
        else:
            script.append('plot NaN title "no samples"')
    script.append('unset multiplot')
    subprocess.run(['gnuplot'], input='\n'.join(script), text=True, check=True)


if __name__ == '__main__':
    if len(sys.argv) == 4 and sys.argv[1] == 'sample':
        sample(int(sys.argv[2]), sys.argv[3])
    elif len(sys.argv) == 4 and sys.argv[1] == 'plot':
        plot(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
