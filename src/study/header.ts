import { randomBytes } from "node:crypto";
import type { ExportLimits } from "../export/export.ts";
import type { LoadedManifest } from "../manifest/load.ts";
import type { Mode, PlannedAttempt } from "../plan/plan.ts";
import type { Ledger } from "../ledger/schema.ts";
import { computeRunnerHash } from "../ledger/runner-hash.ts";
import { PROJECT_ROOT } from "../util/paths.ts";
import { spendLabel } from "../cost/labels.ts";

/** A run id: sortable by time, unique by a random suffix, safe in file names. */
export function newRunId(): string {
  return `run-${new Date().toISOString().replace(/[:.]/g, "-")}-${randomBytes(3).toString("hex")}`;
}

/** The part of a ledger header every transport writes the same way. */
export async function commonHeader(
  runId: string,
  loaded: LoadedManifest,
  roots: ReadonlyMap<string, string>,
  transport: Ledger["transport"],
): Promise<Pick<Ledger, "schemaVersion" | "runId" | "createdAt" | "protocol" | "runnerHash" | "corpus" | "spendLabel">> {
  return {
    schemaVersion: 1,
    runId,
    createdAt: new Date().toISOString(),
    protocol: { manifestPath: loaded.path, protocolHash: loaded.protocolHash },
    runnerHash: await computeRunnerHash(PROJECT_ROOT),
    corpus: Object.entries(loaded.manifest.repositories).map(([repository, pin]) => ({
      repository,
      pin,
      ...(roots.has(repository) ? { root: roots.get(repository)! } : {}),
    })),
    spendLabel: { ...spendLabel(transport) },
  };
}

/** What every transport's study run is given: the study, its plan and checkouts, the model and the money. */
export interface StudyRunBase {
  loaded: LoadedManifest;
  mode: Mode;
  plan: PlannedAttempt[];
  /** Attempts of the full study, for the pilot's extrapolation. */
  fullPlanSize: number;
  roots: ReadonlyMap<string, string>;
  model: string;
  capUsd: number;
  output: string;
  /** The doc-bridge engine command (never a shell string); run with a checkout as cwd. */
  docBridgeCommand: string[];
  quiet?: boolean;
  /** The export limits every attempt's export is checked against (default DEFAULT_EXPORT_LIMITS). */
  exportLimits?: ExportLimits;
}
