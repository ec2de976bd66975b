import { resolve } from "node:path";
import { UsageError, errorMessage } from "../util/errors.ts";
import { CLAUDE_CODE_VERSION, claudeCodeImageRef } from "../claude/version.ts";
import { checkAdjudicationOutput, credentialOptions, parseAdjudicateFlags, type AdjudicateFlags, type AdjudicateOptions } from "./config/commands.ts";
import { commandEnvironment, commandFlags, type EnvOf } from "./config/flags.ts";
import { withStopSignals } from "./signals.ts";
import { requireProfileFor } from "../profile/load.ts";

/**
 * `study-runner adjudicate`: blind agent adjudication of a ledger into a separate private
 * record. Every missing flag or variable is reported at once (exit 2) before anything starts.
 */

type LedgerInput = Awaited<ReturnType<typeof import("../adjudicate/input.ts").readLedgerInput>>;
type LedgerManifest = Awaited<ReturnType<typeof import("../adjudicate/input.ts").loadLedgerManifest>>;

/** What the ledger settles: the ledger itself, its manifest, the adjudicator's model; the checkouts it records fill `options.roots`. */
interface LedgerSide {
  input?: LedgerInput;
  loaded?: LedgerManifest;
  model?: string;
}

/** Reads the ledger and what follows from it, adding every problem to `options.problems`. */
async function readLedgerSide(flags: AdjudicateFlags, options: AdjudicateOptions): Promise<LedgerSide> {
  const { problems, roots } = options;
  const [{ readLedgerInput, loadLedgerManifest }, { chooseAdjudicatorModel }] = await Promise.all([import("../adjudicate/input.ts"), import("../cost/models.ts")]);
  const side: LedgerSide = {};
  if (!flags.ledger) return side;
  try {
    side.input = await readLedgerInput(resolve(flags.ledger));
  } catch (err) {
    problems.push(errorMessage(err));
    return side;
  }
  const { ledger } = side.input;
  if (ledger.status === "running") {
    problems.push(`ledger ${side.input.path} is still running (or its runner died before ending it); adjudicate a ledger that is awaiting-adjudication or blocked`);
  }
  // Unset: a different priced model by default; --force-same-model alone: the answering model.
  const choice = chooseAdjudicatorModel({ requested: options.adjudicatorModel, answeringModel: ledger.model, forceSameModel: flags.forceSameModel === true });
  if ("problem" in choice) problems.push(choice.problem);
  else side.model = choice.model;
  try {
    side.loaded = await loadLedgerManifest(ledger, flags.manifest && resolve(flags.manifest));
  } catch (err) {
    problems.push(errorMessage(err));
  }
  // The ledger's checkouts unless --root overrides one.
  for (const c of ledger.corpus) if (c.root && !roots.has(c.repository)) roots.set(c.repository, c.root);
  return side;
}

/**
 * `adjudicate`, given its flags and its environment variables parsed at the entry (the demo
 * passes its own values, contract R214).
 */
export async function adjudicateCommand(given: AdjudicateFlags, env: EnvOf<"adjudicate"> = commandEnvironment("adjudicate")): Promise<number> {
  const flags = commandFlags("adjudicate", given);
  const options = parseAdjudicateFlags(flags, env);
  const { problems } = options;
  const { input, loaded, model } = await readLedgerSide(flags, options);
  if (flags.output) await checkAdjudicationOutput(flags.output, options.roots, input?.path, problems);
  const { capUsd, itemBudgetUsd, seed } = options;
  if (problems.length || !input || !loaded || !model || capUsd === undefined || itemBudgetUsd === undefined || seed === undefined || !flags.output) {
    throw new UsageError(problems.join("\n"), problems);
  }

  // The adjudicator runs in the containers the attempts ran in: the ledger's runtime unless --runtime names another.
  const runtimeName = flags.runtime ?? input.ledger.runtime ?? undefined;
  const [{ runAdjudication }, { DockerRuntime }] = await Promise.all([import("../adjudicate/run.ts"), import("../sandbox/docker.ts")]);
  const credentials = await credentialOptions(flags, options.credentials, options.standIns);
  const expectedCliVersion = flags.cliVersion ?? input.ledger.expectedCliVersion ?? CLAUDE_CODE_VERSION;
  // The version's calibration profile, before anything is probed or reserved (contract R221), showing structured output (contract R265).
  requireProfileFor(expectedCliVersion, "adjudicator");
  return withStopSignals("adjudicator run", (signal) =>
    runAdjudication(
      {
        ledgerPath: input.path,
        ledger: input.ledger,
        ledgerSha256: input.sha256,
        loaded,
        roots: options.roots,
        exportLimits: options.exportLimits,
        model,
        forceSameModel: flags.forceSameModel === true,
        capUsd,
        itemBudgetUsd,
        seed,
        output: resolve(flags.output!),
        image: flags.image ?? input.ledger.image?.ref ?? claudeCodeImageRef(),
        expectedCliVersion,
        isolation: flags.isolation ?? "standard",
        claudeConfigDir: flags.claudeConfigDir,
        ...(runtimeName !== undefined ? { runtime: runtimeName } : {}),
        ...(flags.sandboxChannel !== undefined ? { sandboxChannel: flags.sandboxChannel } : {}),
        ...credentials,
        ...(options.standIns?.timeoutMs !== undefined ? { timeoutMs: options.standIns.timeoutMs } : {}),
        quiet: flags.quiet,
      },
      { runtime: new DockerRuntime(), stdout: (t) => process.stdout.write(t), stderr: process.stderr, signal },
    ),
  );
}
