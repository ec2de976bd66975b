// Compares the analysis of a report.json with scipy reference values computed from the same
// attempts (scripts/stats-reference.py); prints the worst relative error and the bootstrap
// endpoints' exact levels. Usage, on a fresh demo run:
//   python3 scripts/stats-reference.py REPORT.json > REFERENCE.json
//   npx tsx scripts/stats-compare-report.ts REPORT.json REFERENCE.json
import { readFileSync } from "node:fs";
const rep = JSON.parse(readFileSync(process.argv[2]!, "utf8"));
const ref = JSON.parse(readFileSync(process.argv[3]!, "utf8"));
const a = rep.analysis;
let worst = 0; let n = 0; const bad: string[] = [];
const c = (x: number | null | undefined, y: number | null | undefined, what: string) => {
  if (y === null || y === undefined) { if (x !== null && x !== undefined) bad.push(what); return; }
  const e = Math.abs((x as number) - y) / Math.max(1, Math.abs(y)); n++; worst = Math.max(worst, e); if (e > 1e-9) bad.push(`${what} ${x} ${y}`);
};
for (const m of a.metrics) {
  const r = ref.metrics[m.metric];
  m.tasks.forEach((t: any, i: number) => c(t.diff, r.diffs[i], `${m.metric} diff`));
  c(m.meanDiff, r.meanDiff, `${m.metric} mean`); c(m.sdDiff, r.sdDiff, "sd"); c(m.tInterval?.lower, r.tLower, "tl"); c(m.tInterval?.upper, r.tUpper, "tu");
  c(m.mde80, r.mde80, "mde"); c(m.permutation?.p, r.permutationP, "perm"); c(m.noise.withinVariance.repository, r.withinVariance.repository, "wr"); c(m.noise.withinVariance.mcp, r.withinVariance.mcp, "wm");
  c(m.noise.noiseBand, r.noiseBand, "band"); c(m.noise.shareOfDifference, r.shareOfDifference, "share");
  if (r.bootstrap) for (const [x, q] of [[m.bootstrapInterval.lower, 0.025], [m.bootstrapInterval.upper, 0.975]] as const) {
    let below = 0, atOr = 0; r.bootstrap.values.forEach((v: number, i: number) => { if (v < x - 1e-9) below += r.bootstrap.probabilities[i]; if (v <= x + 1e-9) atOr += r.bootstrap.probabilities[i]; });
    console.log(`${m.metric} bootstrap ${q}: endpoint ${x}, exact P(X<x)=${below.toFixed(5)} P(X<=x)=${atOr.toFixed(5)}`);
  }
}
const o = a.outcomes;
c(o.mcnemar.p, ref.mcnemar.p, "mcnemar"); c(o.sign.p, ref.sign.p, "sign"); c(o.wilcoxon.p, ref.wilcoxon.p, "wilcoxon"); c(o.wilcoxon.wPlus, ref.wilcoxon.wPlus, "W+");
c(o.disagreement.repository.rate, ref.disagreement.repository.rate, "dr"); c(o.disagreement.mcp.rate, ref.disagreement.mcp.rate, "dm"); c(a.planning.betweenTaskVariance, ref.planning?.tau2, "tau2");
console.log(JSON.stringify(a.planning.effects.map((e: any) => e.byRepetitions.map((r: any) => r.tasks))) === JSON.stringify(ref.planning.effects.map((e: any) => e.tasks)) ? "planning equal" : "planning DIFFERS");
console.log(`compared ${n} figures; worst relative error ${worst}; over 1e-9: ${bad.length}`, bad);
