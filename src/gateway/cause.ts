import type { GatewayRecord } from "./gateway.ts";

/**
 * What the gateway saw go wrong in an attempt, in words, when anything did (contract R194): the
 * requests the upstream never answered ("the model API was not reached (502, ENOTFOUND, 11
 * requests)"), those the gateway refused (by kind), and error statuses the API answered. This is
 * what the runner saw first and most, so an attempt's reason names it before the transcript's
 * own words. Null when every request was answered without an error.
 */
export function gatewayCause(record: Pick<GatewayRecord, "requests" | "dropped">): string | null {
  const parts: string[] = [];
  const count = (n: number) => `${n} request${n === 1 ? "" : "s"}`;
  const unreached = record.requests.filter((r) => r.refused?.kind === "upstream-unreachable");
  if (unreached.length) {
    const codes = [...new Set(unreached.map((r) => /\(([^)]*)\)$/.exec(r.refused!.reason)?.[1] ?? "error"))];
    const statuses = [...new Set(unreached.map((r) => r.status))];
    parts.push(`the model API was not reached (${[...statuses, ...codes].join(", ")}, ${count(unreached.length)})`);
  }
  const refused = record.requests.filter((r) => r.refused !== null && r.refused.kind !== "upstream-unreachable");
  if (refused.length) {
    const kinds = new Map<string, { n: number; status: number; reason: string }>();
    for (const r of refused) {
      const k = kinds.get(r.refused!.kind) ?? { n: 0, status: r.status, reason: r.refused!.reason };
      k.n++;
      kinds.set(r.refused!.kind, k);
    }
    parts.push(`the gateway refused ${[...kinds].map(([kind, k]) => `${count(k.n)} (${k.status}, ${kind}: ${k.reason})`).join(", ")}`);
  }
  const answered = record.requests.filter((r) => r.refused === null && r.status >= 400);
  if (answered.length) {
    const byStatus = new Map<number, number>();
    for (const r of answered) byStatus.set(r.status, (byStatus.get(r.status) ?? 0) + 1);
    parts.push(`the model API answered errors (${[...byStatus].map(([s, n]) => `${s}: ${count(n)}`).join(", ")})`);
  }
  if (parts.length === 0) return null;
  return parts.join("; ") + (record.dropped > 0 ? ` (of the first recorded requests; ${record.dropped} more not kept)` : "");
}
