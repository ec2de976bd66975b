/**
 * The study on the in-memory runtime, for the unit tests of its run kinds: an image whose
 * `claude --version` answers the pin and whose attempts run a test function, and a study config
 * over the demo corpus's repository-arm attempts (no doc-bridge server is started).
 */
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll } from "vitest";
import { makeDemoCorpus } from "../../src/demo/corpus.ts";
import { loadManifest } from "../../src/manifest/load.ts";
import { DEMO_MANIFEST } from "../../src/util/paths.ts";
import { FakeRuntime, type FakeProcess } from "./fake-runtime.ts";
import type { StudyConfig } from "../../src/study/run.ts";
import type { AdjudicationConfig } from "../../src/adjudicate/run.ts";
import { syntheticLedger } from "./adjudication-fixtures.ts";
import type { LoadedManifest } from "../../src/manifest/load.ts";
import { planStudy } from "../../src/plan/plan.ts";
import { IMAGE_LABELS } from "../../src/image/specs.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { MODEL } from "../unit/transcript-fixtures.ts";

export const UNIT_IMAGE = "study-runner/claude-code:unit";

/**
 * A runtime whose `--version` probe answers the pinned version and whose attempt containers run
 * `attempt(index, proc)`. The image is labelled the fake claude image unless `fakeImage` is false
 * (then its CLI counts as one that would send real requests).
 */
export function fakeClaudeRuntime(attempt: (n: number, proc: FakeProcess) => Promise<number> | number, o: { fakeImage?: boolean } = {}): FakeRuntime {
  const runtime = new FakeRuntime({
    program: async (proc) => {
      if (proc.spec.cmd.includes("--version")) {
        proc.stdout.write(`${CLAUDE_CODE_VERSION} (Claude Code)\n`);
        return 0;
      }
      return attempt(Number(proc.spec.env.STUDY_RUNNER_ATTEMPT), proc);
    },
  });
  runtime.addImage(UNIT_IMAGE, { [IMAGE_LABELS.claudeSha256]: "a".repeat(64), ...(o.fakeImage === false ? {} : { [IMAGE_LABELS.kind]: "fake-claude" }) });
  return runtime;
}

/** Where a unit test's run reads and writes: its folder, the demo manifest and corpus, the login. */
interface UnitRunPlace {
  work: string;
  loaded: LoadedManifest;
  roots: ReadonlyMap<string, string>;
  loginDir: string;
}

/** A study of the first `attempts` repository-arm attempts of the demo plan, with a private ledger in `work`. */
export function unitStudyConfig(o: UnitRunPlace & { name: string; attempts: number; overrides?: Partial<StudyConfig> }): StudyConfig {
  const plan = planStudy(o.loaded.manifest, "full")
    .filter((a) => a.arm === "repository")
    .slice(0, o.attempts)
    .map((a, index) => ({ ...a, index }));
  return {
    loaded: o.loaded,
    mode: "full",
    plan,
    fullPlanSize: 36,
    roots: o.roots,
    model: MODEL,
    capUsd: 1,
    attemptBudgetUsd: 0.1,
    output: join(o.work, `${o.name}.ledger.json`),
    image: UNIT_IMAGE,
    expectedCliVersion: CLAUDE_CODE_VERSION,
    isolation: "offline",
    docBridgeCommand: ["false"],
    claudeConfigDir: o.loginDir,
    quiet: true,
    ...o.overrides,
  };
}

/** The demo corpus and manifest in a temporary folder of one test file: made before its tests, removed after. */
export interface UnitWorkspace {
  work: string;
  loaded: LoadedManifest;
  roots: Map<string, string>;
}

/** Registers the workspace's beforeAll and afterAll; its fields are set once the tests run. */
export function unitWorkspace(prefix: string): UnitWorkspace {
  const ws = {} as UnitWorkspace;
  beforeAll(async () => {
    ws.work = await mkdtemp(join(tmpdir(), prefix));
    const corpus = await makeDemoCorpus(join(ws.work, "corpus"));
    ws.roots = new Map(Object.entries(corpus).map(([n, { dir }]) => [n, dir]));
    ws.loaded = await loadManifest(DEMO_MANIFEST);
  });
  afterAll(() => rm(ws.work, { recursive: true, force: true }));
  return ws;
}

/** An adjudication of a synthetic pilot ledger over the demo corpus, on the unit image, offline, its record at `output`. */
export function unitAdjudicationConfig(o: UnitRunPlace & { output: string; overrides?: Partial<AdjudicationConfig> }): AdjudicationConfig {
  return {
    ledgerPath: join(o.work, "pilot.ledger.json"),
    ledger: syntheticLedger({ mode: "pilot" }),
    ledgerSha256: "0".repeat(64),
    loaded: o.loaded,
    roots: o.roots,
    model: "claude-sonnet-4-6",
    forceSameModel: false,
    capUsd: 1,
    itemBudgetUsd: 0.1,
    seed: 7,
    output: o.output,
    image: UNIT_IMAGE,
    expectedCliVersion: CLAUDE_CODE_VERSION,
    isolation: "offline",
    claudeConfigDir: o.loginDir,
    ...o.overrides,
  };
}
