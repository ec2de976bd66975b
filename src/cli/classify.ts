import { createReadStream } from "node:fs";
import { createInterface } from "node:readline";
import { TranscriptReader } from "../transcript/reader.ts";
import { classifyAttempt } from "../transcript/classify.ts";
import { computeCost } from "../cost/compute.ts";
import { expectedInitTools } from "../claude/args.ts";
import { attemptInitKind, expectedInit } from "../claude/init-expectation.ts";
import { ExitCode, UsageError } from "../util/errors.ts";
import type { Arm } from "../terms/terms.ts";
import { STDOUT_LIMIT_BYTES } from "../terms/limits.ts";

export interface ClassifyFlags {
  arm: Arm;
  model: string;
  tools?: string;
  cliVersion?: string;
  exitCode?: string;
  timedOut?: boolean;
  truncated?: boolean;
}

/**
 * Re-checks a saved stream-json transcript with the runner's own reader, cost check and
 * classifier, and prints the facts and the status. The answer is withheld (its length only).
 */
export async function classifyCommand(file: string, flags: ClassifyFlags): Promise<number> {
  const exitCode = flags.exitCode === undefined ? 0 : Number(flags.exitCode);
  if (!Number.isInteger(exitCode)) throw new UsageError(`--exit-code must be a whole number, got '${flags.exitCode}'`);
  const expectedTools = flags.tools
    ? flags.tools
        .split(",")
        .map((t) => t.trim())
        .filter(Boolean)
    : expectedInitTools(flags.arm);
  // The measured init of an attempt of this arm; with --tools, its tool list is the one given.
  const measured = expectedInit(attemptInitKind(flags.arm), { model: flags.model });
  const init = flags.tools ? { ...measured, fields: { ...measured.fields, tools: [...expectedTools].sort() } } : measured;
  const reader = new TranscriptReader({ arm: flags.arm, model: flags.model, expectedTools, cliVersion: flags.cliVersion, init });
  try {
    const lines = createInterface({ input: createReadStream(file), crlfDelay: Infinity });
    for await (const line of lines) reader.pushLine(line);
  } catch (err) {
    throw new UsageError(`cannot read transcript ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const facts = reader.finish();
  const cost = computeCost({ ...facts, model: flags.model });
  const verdict = classifyAttempt({ facts, exitCode, timedOut: flags.timedOut ?? false, truncated: flags.truncated ?? false, stdoutLimitBytes: STDOUT_LIMIT_BYTES, cost });
  const { answer, ...shown } = facts;
  const out = {
    status: verdict.status,
    reason: verdict.reason,
    facts: { ...shown, answer: answer === null ? null : `(withheld: ${answer.length} characters)` },
    cost,
  };
  process.stdout.write(JSON.stringify(out, null, 2) + "\n");
  return ExitCode.ok;
}
