import type { ExportLimits } from "../export/export.ts";
import { parseExportLimits } from "../export/options.ts";
import { randomInt } from "node:crypto";
import { readFile } from "node:fs/promises";
import { resolve } from "node:path";
import { z } from "zod";
import { ExitCode, UsageError, errorMessage } from "../util/errors.ts";
import { runtimeNameProblem } from "../isolation/profile.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { CLAUDE_CODE_VERSION, claudeCodeImageRef } from "../claude/version.ts";
import { DEFAULT_ATTEMPT_BUDGET_USD, parseRoots } from "../settings/run-options.ts";

/**
 * `study-runner adjudicate`: blind agent adjudication of a ledger into a separate private
 * record. Every missing flag or variable is reported at once (exit 2) before anything starts.
 */

export interface AdjudicateFlags {
  ledger?: string;
  maxExportFiles?: string;
  maxExportBytes?: string;
  output?: string;
  manifest?: string;
  root?: string[];
  approveBudget?: boolean;
  seed?: string;
  itemBudgetUsd?: string;
  forceSameModel?: boolean;
  image?: string;
  cliVersion?: string;
  isolation?: "standard" | "offline";
  claudeConfigDir?: string;
  /** OCI runtime of the adjudicator's containers; default: the ledger's. */
  runtime?: string;
  /** gateway (default) or login-copy, as for `run --transport cli`. */
  credentials?: "gateway" | "login-copy";
  oauthTokenFile?: string;
  /** Tests only: the gateway's upstream origin and the CA it trusts. */
  testGatewayUpstream?: string;
  testGatewayCa?: string;
  quiet?: boolean;
  fakeBehaviour?: string;
  fakeRecords?: string;
  testItemTimeoutMs?: string;
}

export const DEFAULT_ITEM_BUDGET_USD = DEFAULT_ATTEMPT_BUDGET_USD;

const Positive = (what: string) =>
  z
    .string()
    .trim()
    .regex(/^\d+(\.\d+)?$/, `${what} must be a positive decimal number such as 0.10`)
    .transform(Number)
    .refine((n) => n > 0 && Number.isFinite(n), `${what} must be greater than 0`);

const Seed = z
  .string()
  .trim()
  .regex(/^\d+$/, "--seed must be a whole number from 0 to 4294967295")
  .transform(Number)
  .refine((n) => n <= 0xffffffff, "--seed must be a whole number from 0 to 4294967295");

export async function adjudicateCommand(flags: AdjudicateFlags, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const problems: string[] = [];
  if (!flags.ledger) problems.push("--ledger PATH is required: the private ledger of the run to adjudicate (it is only read)");
  if (!flags.output) problems.push("--output PATH is required: a new file outside every checkout and outside this project, for the private adjudication record");
  if (!flags.approveBudget) problems.push("--approve-budget is required to spend money; pass it once the adjudication budget (STUDY_ADJUDICATION_BUDGET_USD) is approved");
  let model: string | undefined;
  const cap = Positive("STUDY_ADJUDICATION_BUDGET_USD").safeParse(env.STUDY_ADJUDICATION_BUDGET_USD ?? "");
  if (env.STUDY_ADJUDICATION_BUDGET_USD === undefined)
    problems.push("STUDY_ADJUDICATION_BUDGET_USD is not set; export the approved cumulative cap of the adjudication in USD, e.g. STUDY_ADJUDICATION_BUDGET_USD=1");
  else if (!cap.success) problems.push(cap.error.issues[0]!.message);
  const item = Positive("--item-budget-usd").safeParse(flags.itemBudgetUsd ?? String(DEFAULT_ITEM_BUDGET_USD));
  if (!item.success) problems.push(item.error.issues[0]!.message);
  const seed = flags.seed === undefined ? { success: true as const, data: randomInt(0, 2 ** 32 - 1) } : Seed.safeParse(flags.seed);
  if (!seed.success) problems.push(seed.error.issues[0]!.message);

  const credentials = flags.credentials ?? "gateway";
  if (credentials !== "gateway" && (flags.oauthTokenFile !== undefined || flags.testGatewayUpstream !== undefined))
    problems.push("--oauth-token-file and --test-gateway-upstream apply to --credentials gateway only");
  if (flags.testGatewayCa !== undefined && flags.testGatewayUpstream === undefined) problems.push("--test-gateway-ca needs --test-gateway-upstream");
  const runtimeProblem = flags.runtime !== undefined && runtimeNameProblem(flags.runtime);
  if (runtimeProblem) problems.push(runtimeProblem);

  let exportLimits: ExportLimits | undefined;
  try {
    exportLimits = parseExportLimits(flags);
  } catch (err) {
    problems.push(...(err as UsageError).problems);
  }
  let roots = new Map<string, string>();
  try {
    roots = parseRoots(flags.root);
  } catch (err) {
    problems.push(...((err as UsageError).problems ?? [errorMessage(err)]));
  }

  const [{ readLedgerInput, loadLedgerManifest }, { chooseAdjudicatorModel }, { checkOutputPath }] = await Promise.all([
    import("../adjudicate/input.ts"),
    import("../cost/models.ts"),
    import("../ledger/store.ts"),
  ]);
  let input: Awaited<ReturnType<typeof readLedgerInput>> | undefined;
  let loaded: Awaited<ReturnType<typeof loadLedgerManifest>> | undefined;
  if (flags.ledger) {
    try {
      input = await readLedgerInput(resolve(flags.ledger));
    } catch (err) {
      problems.push(errorMessage(err));
    }
  }
  if (input) {
    const { ledger } = input;
    if (ledger.status === "running") {
      problems.push(`ledger ${input.path} is still running (or its runner died before ending it); adjudicate a ledger that is awaiting-adjudication or blocked`);
    }
    // Unset: a different priced model by default; --force-same-model alone: the answering model.
    const choice = chooseAdjudicatorModel({ requested: env.STUDY_ADJUDICATOR_MODEL, answeringModel: ledger.model, forceSameModel: flags.forceSameModel === true });
    if ("problem" in choice) problems.push(choice.problem);
    else model = choice.model;
    try {
      loaded = await loadLedgerManifest(ledger, flags.manifest && resolve(flags.manifest));
    } catch (err) {
      problems.push(errorMessage(err));
    }
    // The ledger's checkouts unless --root overrides one.
    for (const c of ledger.corpus) if (c.root && !roots.has(c.repository)) roots.set(c.repository, c.root);
  }
  if (flags.output) {
    problems.push(...(await checkOutputPath(flags.output, { checkouts: [...roots.values()], projectRoot: PROJECT_ROOT }, "adjudication record")));
    if (input && resolve(flags.output) === resolve(input.path)) problems.push("--output names the ledger itself; the ledger is never modified: choose a new file");
  }
  if (problems.length || !input || !loaded || !model || !cap.success || !item.success || !seed.success || !flags.output) {
    throw new UsageError(problems.join("\n"), problems);
  }

  // The adjudicator runs in the containers the attempts ran in: the ledger's runtime unless --runtime names another.
  const runtimeName = flags.runtime ?? input.ledger.runtime ?? undefined;
  const [{ runAdjudication }, { DockerRuntime }] = await Promise.all([import("../adjudicate/run.ts"), import("../sandbox/docker.ts")]);
  const controller = new AbortController();
  let signals = 0;
  const onSignal = (sig: NodeJS.Signals) => {
    signals++;
    if (signals > 1) process.exit(sig === "SIGTERM" ? ExitCode.sigterm : ExitCode.sigint);
    process.stderr.write(`study-runner: ${sig} received; stopping the current adjudicator run (send it again to exit at once)\n`);
    controller.abort(sig);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);
  try {
    return await runAdjudication(
      {
        ledgerPath: input.path,
        ledger: input.ledger,
        ledgerSha256: input.sha256,
        loaded,
        roots,
        exportLimits,
        model,
        forceSameModel: flags.forceSameModel === true,
        capUsd: cap.data,
        itemBudgetUsd: item.data,
        seed: seed.data,
        output: resolve(flags.output),
        image: flags.image ?? input.ledger.image?.ref ?? claudeCodeImageRef(),
        expectedCliVersion: flags.cliVersion ?? input.ledger.expectedCliVersion ?? CLAUDE_CODE_VERSION,
        isolation: flags.isolation ?? "standard",
        claudeConfigDir: flags.claudeConfigDir,
        ...(runtimeName !== undefined ? { runtime: runtimeName } : {}),
        credentials,
        ...(flags.oauthTokenFile !== undefined ? { oauthTokenFile: resolve(flags.oauthTokenFile) } : {}),
        ...(flags.testGatewayUpstream !== undefined
          ? { gatewayUpstream: { url: flags.testGatewayUpstream, ...(flags.testGatewayCa ? { ca: await readFile(resolve(flags.testGatewayCa), "utf8") } : {}) } }
          : {}),
        fake:
          flags.fakeBehaviour || flags.fakeRecords ? { behaviourFile: flags.fakeBehaviour && resolve(flags.fakeBehaviour), recordsDir: flags.fakeRecords && resolve(flags.fakeRecords) } : undefined,
        timeoutMs: flags.testItemTimeoutMs ? Number(flags.testItemTimeoutMs) : undefined,
        quiet: flags.quiet,
      },
      { runtime: new DockerRuntime(), stdout: (t) => process.stdout.write(t), stderr: process.stderr, signal: controller.signal },
    );
  } finally {
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
  }
}
