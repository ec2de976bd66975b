import { assertReadableLedger, checkLedger, LEDGER_CHECK_EXIT } from "../ledger/check.ts";

export interface LedgerCheckFlags {
  json?: boolean;
}

/**
 * `study-runner ledger check PATH`: validates the ledger against its schema and arithmetic and
 * says whether its run finished or was interrupted. Prints counts and money only, never an answer.
 * Exit 0 valid and finished, 4 valid but interrupted (status running), 1 invalid, 2 unreadable.
 */
export async function ledgerCheckCommand(path: string, flags: LedgerCheckFlags): Promise<number> {
  const check = checkLedger(path, await assertReadableLedger(path));
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
