import { UsageError } from "../util/errors.ts";
import { assertReadableLedger, LEDGER_CHECK_EXIT } from "../ledger/check.ts";
import { checkAnyLedger } from "../verify/check.ts";
import { isSessionLedgerFile } from "../session/check.ts";

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
 * `study-runner ledger verify PATH`: the ledger's invariants, its protocol and plan re-derived from
 * the manifest, and every stored transcript read again with the runner's rules and compared with
 * the ledger; with `--report`, the private files checked against the digest the published report
 * committed to. Prints differences that name the field or the file, never an answer.
 * Exit 0 all agree, 1 differences.
 */
export async function ledgerVerifyCommand(path: string, flags: LedgerCheckFlags & { adjudication?: string; manifest?: string; report?: string; digest?: string; profile?: string }): Promise<number> {
  const { verifyLedger, verifyRecord, verifyAgainstReport, verifySessionLedger, verifyDigest } = await import("../verify/verify.ts");
  // A session ledger is verified the same way, from its calls' transcripts (contract R162).
  const isSession = isSessionLedgerFile(await assertReadableLedger(path));
  const result = isSession
    ? await verifySessionLedger(path, { manifest: flags.manifest })
    : await verifyLedger(path, { manifest: flags.manifest, ...(flags.profile !== undefined ? { profile: flags.profile } : {}) });
  if (flags.adjudication) {
    const rec = await verifyRecord(flags.adjudication, { ledger: path, manifest: flags.manifest });
    result.differences.push(...rec.differences.map((d) => `adjudication ${d}`));
    result.verified += rec.verified;
    result.observations += rec.observations;
  }
  let evidence: { root: string; files: number; adjudication?: string } | null = null;
  if (flags.report) {
    const checked = await verifyAgainstReport(flags.report, { ledger: path, manifest: flags.manifest, adjudication: flags.adjudication });
    result.differences.push(...checked.differences.map((d) => `report ${d}`));
    // The record the report names, found beside the ledger when --adjudication was not given.
    evidence = { root: checked.root, files: checked.files, ...(checked.adjudication && !flags.adjudication ? { adjudication: checked.adjudication } : {}) };
  }
  let digest: string | null = null;
  if (flags.digest !== undefined) {
    if (isSession) throw new UsageError("--digest applies to a study ledger (a study run prints the digest of each settled state); drop it for a session ledger");
    const checked = await verifyDigest(path, flags.digest);
    result.differences.push(...checked.differences);
    digest = checked.note;
  }
  const ok = result.differences.length === 0;
  if (flags.json) process.stdout.write(JSON.stringify({ ...result, ...(evidence ? { evidence } : {}), ...(digest ? { digest } : {}), verdict: ok ? "verified" : "differs" }, null, 2) + "\n");
  else {
    const lines = [
      `ledger ${result.path}: ${ok ? "verified" : `${result.differences.length} difference${result.differences.length === 1 ? "" : "s"}`}`,
      `${flags.adjudication ? "observations and adjudication items" : "observations"}: ${result.observations} (${result.verified} read again from their transcripts)`,
    ];
    if (evidence) lines.push(`evidence: ${evidence.files} private files against the report's digest ${evidence.root}`);
    if (digest) lines.push(digest);
    if (evidence?.adjudication)
      lines.push(`adjudication record: ${evidence.adjudication}, the one the report names, found beside the ledger (its runs are verified with --adjudication ${evidence.adjudication})`);
    for (const d of result.differences) lines.push(`  - ${d}`);
    process.stdout.write(lines.join("\n") + "\n");
  }
  return ok ? 0 : 1;
}
