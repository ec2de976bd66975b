import { resolve } from "node:path";
import { z } from "zod";
import { isExactUsd } from "../../cost/money.ts";
import { DEFAULT_EXPORT_LIMITS, type ExportLimits } from "../../export/export.ts";
import { runtimeNameProblem } from "../../isolation/profile.ts";
import type { Transport } from "../../terms/terms.ts";
import { errorMessage, UsageError } from "../../util/errors.ts";

/**
 * The value shapes the commands share, each a zod schema (or a parser over one) whose refusal
 * names the flag or variable and the fix. The commands' flag schemas (flags.ts) say which
 * command takes which flag; the command parsers (commands.ts) apply these to the values.
 */

/**
 * An amount such as a cap, a limit or a price: a plain positive decimal (no sign, no exponent),
 * refused with `what` (the flag or variable) and an example of the fix. Every command's USD
 * values go through it: the one check of an amount.
 */
export const positiveDecimal = (what: string, example = "0.10") =>
  z
    .string()
    .trim()
    .regex(/^\d+(\.\d+)?$/, `${what} must be a positive decimal number such as ${example}`)
    .transform(Number)
    .refine((n) => n > 0 && Number.isFinite(n), `${what} must be greater than 0, such as ${example}`)
    // Every amount a record holds is whole pico-USD (contract R201).
    .refine(isExactUsd, `${what} must have at most 12 decimals (a whole number of pico-USD), such as ${example}`);

/** The first message of a failed zod parse: each schema below says the flag and the fix itself. */
export const firstMessage = (error: z.ZodError): string => error.issues[0]!.message;

/** Parses `value` with `schema`, pushing its message onto `problems` on failure. */
export function take<T>(schema: z.ZodType<T, string>, value: string, problems: string[]): T | undefined {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  problems.push(firstMessage(parsed.error));
  return undefined;
}

/** `--seed`: an unsigned 32-bit whole number. */
export const SeedSchema = z
  .string()
  .trim()
  .regex(/^\d+$/, "--seed must be a whole number from 0 to 4294967295")
  .transform(Number)
  .refine((n) => n <= 0xffffffff, "--seed must be a whole number from 0 to 4294967295");

/** `--cpus`: a number of CPUs of at least 0.01 (Docker's smallest useful share). */
export const CpusSchema = z
  .string()
  .refine((v) => v.trim() !== "" && Number.isFinite(Number(v)) && Number(v) >= 0.01 && Number(v) <= 1024, {
    error: (issue) => `--cpus must be a number of CPUs between 0.01 and 1024, e.g. --cpus 1 or --cpus 0.5; got '${issue.input}'`,
  })
  .transform(Number);

/** `--concurrency`: a whole number of attempts at once, 1 to 64. */
export const ConcurrencySchema = z
  .string()
  .refine((v) => v.trim() !== "" && Number.isSafeInteger(Number(v)) && Number(v) >= 1 && Number(v) <= 64, {
    error: (issue) => `--concurrency must be a whole number of attempts from 1 to 64, e.g. --concurrency 4; got '${issue.input}'`,
  })
  .transform(Number);

/** A hidden test flag's positive whole number. */
export const testNumberSchema = (flag: string) =>
  z
    .string()
    .refine((v) => Number.isSafeInteger(Number(v)) && Number(v) > 0, { error: (issue) => `${flag} must be a positive whole number, got '${issue.input}'` })
    .transform(Number);

const NON_EMPTY_ENGINE_COMMAND = "--doc-bridge-command must be a non-empty JSON array of non-empty strings";

/** `--doc-bridge-command`: a non-empty JSON array of non-empty strings (never a shell string). */
const EngineCommandSchema = z
  .string()
  .transform((value, ctx) => {
    try {
      return JSON.parse(value) as unknown;
    } catch {
      ctx.addIssue({ code: "custom", message: `--doc-bridge-command must be a JSON array of strings, e.g. '["node","/opt/ak/bin/ak-docs.js","mcp"]'` });
      return z.NEVER;
    }
  })
  .pipe(z.array(z.string({ error: NON_EMPTY_ENGINE_COMMAND }).min(1, NON_EMPTY_ENGINE_COMMAND), { error: NON_EMPTY_ENGINE_COMMAND }).min(1, NON_EMPTY_ENGINE_COMMAND));

/** `--root name=path` (repeatable): each repository's checkout, resolved; every malformed or repeated one named at once. */
export function parseRoots(values: readonly string[] = []): Map<string, string> {
  const roots = new Map<string, string>();
  const problems: string[] = [];
  for (const value of values) {
    const eq = value.indexOf("=");
    if (eq <= 0 || eq === value.length - 1) {
      problems.push(`--root '${value}': expected name=path, e.g. --root ledgerlite=../ledgerlite`);
      continue;
    }
    const name = value.slice(0, eq);
    if (roots.has(name)) problems.push(`--root '${name}' is given twice; give each repository once`);
    roots.set(name, resolve(value.slice(eq + 1)));
  }
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  return roots;
}

/** `--doc-bridge-command`, parsed; undefined when absent (the bundled reference server). */
export function parseEngineCommand(value: string | undefined): string[] | undefined {
  if (value === undefined) return undefined;
  const parsed = EngineCommandSchema.safeParse(value);
  if (!parsed.success) throw new UsageError(firstMessage(parsed.error));
  return parsed.data;
}

/** `--cpus`: the number of CPUs, or undefined when absent; pushes a problem otherwise. */
export function parseCpus(value: string | undefined, problems: string[]): number | undefined {
  return value === undefined ? undefined : take(CpusSchema, value, problems);
}

/** `--concurrency`: the number of attempts at once, or undefined when absent; above 1 for the cli transport only. */
export function parseConcurrency(value: string | undefined, transport: Transport, problems: string[]): number | undefined {
  if (value === undefined) return undefined;
  const n = take(ConcurrencySchema, value, problems);
  if (n !== undefined && n > 1 && transport !== "cli") problems.push("--concurrency above 1 applies to --transport cli only (the http transport runs one attempt at a time)");
  return n;
}

/** `--runtime NAME`: pushes the refusal of a name no OCI runtime has. */
export function checkRuntimeName(name: string | undefined, problems: string[]): void {
  const problem = name !== undefined && runtimeNameProblem(name);
  if (problem) problems.push(problem);
}

/**
 * `--max-export-files` and `--max-export-bytes`: the run's export limits (docs/export.md,
 * "Limits"), the defaults where a flag is absent. A value that is not a positive whole number is
 * refused naming the flag.
 */
export function parseExportLimits(flags: { maxExportFiles?: string; maxExportBytes?: string }): ExportLimits {
  const problems: string[] = [];
  const parse = (flag: string, value: string | undefined, fallback: number) => {
    if (value === undefined) return fallback;
    const n = Number(value);
    if (value.trim() === "" || !Number.isSafeInteger(n) || n <= 0) {
      problems.push(`${flag} must be a positive whole number (default ${fallback}), got '${value}'`);
      return fallback;
    }
    return n;
  };
  const limits = {
    maxFiles: parse("--max-export-files", flags.maxExportFiles, DEFAULT_EXPORT_LIMITS.maxFiles),
    maxBytes: parse("--max-export-bytes", flags.maxExportBytes, DEFAULT_EXPORT_LIMITS.maxBytes),
  };
  if (problems.length) throw new UsageError(problems.join("\n"), problems);
  return limits;
}

/** Throws one UsageError listing every problem, when there is any. */
export function refuse(problems: readonly string[]): void {
  if (problems.length) throw new UsageError(problems.join("\n"), [...problems]);
}

/** Pushes a thrown UsageError's problems (or its message) and returns the fallback. */
export function collecting<T>(parse: () => T, fallback: T, problems: string[]): T {
  try {
    return parse();
  } catch (err) {
    problems.push(...((err as UsageError).problems ?? [errorMessage(err)]));
    return fallback;
  }
}
