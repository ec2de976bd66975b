import { assertReadableLedger, LEDGER_CHECK_EXIT } from "../ledger/check.ts";
import { checkAnyLedger } from "../session/check.ts";

export interface LedgerCheckFlags {
  json?: boolean;
}

/**
 * `study-runner ledger check PATH`: validates the ledger against its schema and arithmetic and
 * says whether its run finished or was interrupted. Prints counts and money only, never an answer.
 * Exit 0 valid and finished, 4 valid but interrupted (status running), 1 invalid, 2 unreadable.
 */
export async function ledgerCheckCommand(path: string, flags: LedgerCheckFlags): Promise<number> {
  const check = checkAnyLedger(path, await assertReadableLedger(path));
  if (flags.json) {
    process.stdout.write(JSON.stringify(check, null, 2) + "\n");
  } else {
    const lines = [`ledger ${check.path}: ${check.verdict}`];
    if (check.observations) lines.push(`observations: ${check.observations.total} (${check.observations.settled} settled, ${check.observations.open} open)`);
    for (const problem of check.problems) lines.push(`  - ${problem}`);
    process.stdout.write(lines.join("\n") + "\n");
  }
  return LEDGER_CHECK_EXIT[check.state];
}

/**
 * `study-runner ledger verify PATH`: every stored transcript read again with the runner's rules
 * and compared with the ledger. Prints differences that name the field, never an answer.
 * Exit 0 all agree, 1 differences.
 */
export async function ledgerVerifyCommand(path: string, flags: LedgerCheckFlags & { adjudication?: string }): Promise<number> {
  const { verifyLedger, verifyRecord } = await import("../verify/verify.ts");
  const result = await verifyLedger(path);
  if (flags.adjudication) {
    const rec = await verifyRecord(flags.adjudication);
    result.differences.push(...rec.differences.map((d) => `adjudication ${d}`));
    result.verified += rec.verified;
    result.observations += rec.observations;
  }
  const ok = result.differences.length === 0;
  if (flags.json) process.stdout.write(JSON.stringify({ ...result, verdict: ok ? "verified" : "differs" }, null, 2) + "\n");
  else {
    const lines = [
      `ledger ${result.path}: ${ok ? "verified" : `${result.differences.length} difference${result.differences.length === 1 ? "" : "s"}`}`,
      `${flags.adjudication ? "observations and adjudication items" : "observations"}: ${result.observations} (${result.verified} read again from their transcripts)`,
    ];
    for (const d of result.differences) lines.push(`  - ${d}`);
    process.stdout.write(lines.join("\n") + "\n");
  }
  return ok ? 0 : 1;
}
