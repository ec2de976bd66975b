#!/usr/bin/env python3
"""Reference values for the report's task-level statistics, computed with scipy/numpy from the
same attempt rows, independently of src/report (no code shared). Writes JSON to stdout:

    python3 scripts/stats-reference.py tests/fixtures/stats/demo-attempts.json > tests/fixtures/stats/demo-reference.json

tests/unit/report-stats.test.ts compares every figure of src/report/analysis.ts with these to
1e-9; the bootstrap interval is checked against the exact bootstrap distribution given here
(every multiset of n tasks with its multinomial probability, for n <= 6), within its Monte
Carlo error.
"""
import itertools, json, math, sys
from collections import Counter

import numpy as np
import scipy
from scipy import stats

METRICS = ["score", "tokens", "toolCalls", "wallTimeMs", "chargedUsd"]
EFFECTS = [0.1, 0.2, 0.3]
REPS = [1, 2, 3, 5]


def value(a, key):
    if key == "score":
        return a["score"]
    if a["status"] != "completed":
        return None
    if key == "tokens":
        parts = [a["inputTokens"], a["outputTokens"], a["cacheCreationInputTokens"], a["cacheReadInputTokens"]]
        return None if any(p is None for p in parts) else float(sum(parts))
    return a[key]


def exact_bootstrap(d):
    n = len(d)
    atoms = Counter()
    for combo in itertools.combinations_with_replacement(range(n), n):
        counts = Counter(combo)
        prob = math.factorial(n) / math.prod(math.factorial(c) for c in counts.values()) / n**n
        atoms[round(float(np.mean([d[i] for i in combo])), 12)] += prob
    xs = sorted(atoms)
    return {"values": xs, "probabilities": [atoms[x] for x in xs]}


def mde(sd, n):
    return (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / math.sqrt(n)


def main(path):
    # A fixture ({"attempts": [...]}) or a report.json: both hold the attempt rows.
    attempts = json.load(open(path))["attempts"]
    tasks = list(dict.fromkeys(a["task"] for a in attempts))
    out = {"command": "python3 scripts/stats-reference.py " + path, "scipy": scipy.__version__, "numpy": np.__version__, "metrics": {}}
    noise = {}
    for key in METRICS:
        rows, vals = [], {}
        for t in tasks:
            v = {arm: [value(a, key) for a in attempts if a["task"] == t and a["arm"] == arm and value(a, key) is not None] for arm in ("repository", "mcp")}
            if v["repository"] and v["mcp"]:
                rows.append((t, np.mean(v["repository"]), np.mean(v["mcp"]), len(v["repository"]), len(v["mcp"])))
                vals[t] = v
        d = np.array([r[2] - r[1] for r in rows])
        n = len(d)
        m = {"tasks": [r[0] for r in rows], "diffs": d.tolist(), "n": n, "meanDiff": float(d.mean()) if n else None}
        within = {}
        for arm in ("repository", "mcp"):
            ss = sum(float(np.var(vals[t][arm], ddof=0)) * len(vals[t][arm]) for t in vals if len(vals[t][arm]) >= 2)
            df = sum(len(vals[t][arm]) - 1 for t in vals if len(vals[t][arm]) >= 2)
            within[arm] = ss / df if df else None
        m["withinVariance"] = within
        if n >= 2:
            sd = float(np.std(d, ddof=1))
            # scipy returns nan for a zero-width interval; the interval is then the mean itself.
            lo, hi = (d.mean(), d.mean()) if sd == 0 else stats.t.interval(0.95, n - 1, loc=d.mean(), scale=stats.sem(d))
            m.update(sdDiff=sd, tLower=float(lo), tUpper=float(hi), mde80=float(mde(sd, n)))
            # C(2n-1, n) multisets: 462 at 6 tasks, 6435 at 8; kept small enough for a fixture.
            if n <= 6:
                m["bootstrap"] = exact_bootstrap(d.tolist())
        if n >= 1:
            m["permutationP"] = float(stats.permutation_test((d,), np.mean, permutation_type="samples", n_resamples=np.inf, alternative="two-sided").pvalue)
        if within["repository"] is not None and within["mcp"] is not None and n:
            nv = [within["repository"] / r[3] + within["mcp"] / r[4] for r in rows]
            se = math.sqrt(sum(nv)) / n
            band = stats.norm.ppf(0.975) * se
            m.update(noiseBand=float(band), shareOfDifference=None if d.mean() == 0 else float(min(1.0, band / abs(d.mean()))))
            noise[key] = nv
        out["metrics"][key] = m

    score = out["metrics"]["score"]
    # Differences within 1e-9 are equal (the same scores averaged in another order differ by
    # ~1e-16): rounded to 9 decimals before the sign test and the ranks, as src/report/stats.ts does.
    d = np.round(np.array(score["diffs"]), 9)
    pairs = {}
    for a in attempts:
        if a["score"] is None:
            continue
        pairs.setdefault((a["task"], a["repetition"]), {})[a["arm"]] = a["outcome"] == "correct"
    both = [p for p in pairs.values() if len(p) == 2]
    b = sum(1 for p in both if p["repository"] and not p["mcp"])
    c = sum(1 for p in both if p["mcp"] and not p["repository"])
    out["mcnemar"] = {"pairs": len(both), "onlyRepository": b, "onlyMcp": c, "p": None if len(both) == 0 else 1.0 if b + c == 0 else float(stats.binomtest(c, b + c, 0.5).pvalue)}
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    out["sign"] = {"positive": pos, "negative": neg, "p": None if len(d) == 0 else 1.0 if pos + neg == 0 else float(stats.binomtest(pos, pos + neg, 0.5).pvalue)}
    nz = d[d != 0]
    if len(nz):
        w = stats.wilcoxon(nz, zero_method="wilcox", method=stats.PermutationMethod(n_resamples=np.inf))
        ranks = stats.rankdata(np.abs(nz))
        out["wilcoxon"] = {"n": int(len(nz)), "wPlus": float(ranks[nz > 0].sum()), "p": float(w.pvalue)}
    else:
        out["wilcoxon"] = {"n": 0, "wPlus": 0.0, "p": None}
    dis = {}
    for arm in ("repository", "mcp"):
        tot = bad = 0
        for t in tasks:
            o = [a["outcome"] == "correct" for a in attempts if a["task"] == t and a["arm"] == arm and a["score"] is not None]
            for x, y in itertools.combinations(o, 2):
                tot += 1
                bad += x != y
        dis[arm] = {"pairs": tot, "disagreeing": bad, "rate": bad / tot if tot else None}
    out["disagreement"] = dis
    w = score["withinVariance"]
    if "sdDiff" in score and "score" in noise:
        tau2 = max(0.0, score["sdDiff"] ** 2 - float(np.mean(noise["score"])))
        plan = []
        for e in EFFECTS:
            row = []
            for r in REPS:
                s = math.sqrt(tau2 + (w["repository"] + w["mcp"]) / r)
                need = 2 if s == 0 else next((k for k in range(2, 10001) if mde(s, k) <= e), None)
                row.append(need)
            plan.append({"effect": e, "tasks": row})
        out["planning"] = {"tau2": tau2, "effects": plan}
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1])
