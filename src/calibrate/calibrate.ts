/**
 * `study-runner calibrate --cli-version V` (contract R223): measures one Claude Code version into
 * its calibration profile, offline, on the real binary in the runner's own image, containers and
 * gateway, against the scripted Messages API. In order, each step refusing the version when it
 * cannot serve a study:
 *
 * 1. install V's native binary from the npm registry (its tarball integrity and sha256 recorded),
 *    build its image, probe its version;
 * 2. read V's own `--help` and walk every command line the runner builds (contract R222);
 * 3. read V's price table out of the binary (the adaptive prober, prices.ts);
 * 4. run every scenario (scenarios.ts) on the direct route, recording what the CLI sends, with the
 *    inits adopted until each scenario completes (draft.ts);
 * 5. run every scenario again through the runner's model gateway with the profile measured so far:
 *    each must complete, its requests admitted and metered, its inits equal to the first runs';
 * 6. probe the `@` imports (with and without `--restricted`) and the retries on a 429 and a 529
 *    (behaviour.ts); structured output and resume are read off the scenarios of both rounds, which
 *    must agree (contract R263, R264).
 *
 * The result is sealed (its sha256 over its canonical body); nothing is written here.
 */
import { readFile } from "node:fs/promises";
import { isDeepStrictEqual } from "node:util";
import { join } from "node:path";
import { checkFlags } from "./flags.ts";
import { measureProbes } from "./behaviour.ts";
import { buildImage, probeVersion } from "../image/build.ts";
import { fileSha256 } from "../image/context.ts";
import { ensureClaudeBinary, NATIVE_PACKAGE } from "../image/install.ts";
import { claudeCodeImageSpec } from "../image/specs.ts";
import { CLAUDE_CODE_VERSION } from "../profile/pin.ts";
import { bundledProfilePath, readProfileFile, sealProfile, useCalibrationDraft } from "../profile/load.ts";
import type { Profile } from "../profile/schema.ts";
import type { ContainerRuntime } from "../sandbox/port.ts";
import type { RecordedRequest } from "../stand-ins/scripted-api/server.ts";
import { runnerVersion } from "../util/paths.ts";
import type { InitKind } from "../claude/init-expectation.ts";
import { adoptInits, seedInits } from "./draft.ts";
import { MODEL, prepareCorpus, type Corpus } from "./env.ts";
import { claudeInImage } from "./help.ts";
import { generatedFrom, initRuleProblems, type MeasuredInit } from "./init.ts";
import { measurePriceTable } from "./prices.ts";
import { shapesOf } from "./requests.ts";
import { adjudicatorScenario, pilotScenario, sessionsScenario, type Route, type ScenarioContext, type ScenarioResult } from "./scenarios.ts";
import type { StudyRun } from "./env.ts";
import { DEFAULT_ADJUDICATOR_MODELS } from "../cost/models.ts";

export interface CalibrateOptions {
  version: string;
  runtime: ContainerRuntime;
  /** Where V's binary is installed (default: the runner's cache folder). */
  binaryCacheDir?: string;
  /** One line per step, for a person (stderr). */
  progress?: (line: string) => void;
  /** The steps that reach the registry and the engine (default: the real ones); the unit tests give their own. */
  steps?: CalibrationSteps;
}

/** What a calibration does on the machine: install, build and probe, read the help, read the prices, set up the corpus, run the scenarios. */
export interface CalibrationSteps {
  install(version: string, cacheDir: string | undefined): Promise<{ path: string; packageDir?: string; sha256: string; npmIntegrity?: string }>;
  image(runtime: ContainerRuntime, binaryPath: string, version: string): Promise<{ id: string; version: string }>;
  help(runtime: ContainerRuntime, image: string): Promise<{ exitCode: number; stdout: string }>;
  prices(runtime: ContainerRuntime, image: string, binaryPath: string, progress: (line: string) => void): Promise<{ table: Profile["prices"]; failures: string[] }>;
  corpus(): Promise<Corpus>;
  /** The import probes (without and with `--restricted`) and the retry probe. */
  probes(runtime: ContainerRuntime, image: string, corpus: Corpus): Promise<{ imports: Profile["imports"]; retries: Profile["retries"]; problems: string[] }>;
  pilot: typeof pilotScenario;
  adjudicator: typeof adjudicatorScenario;
  sessions: typeof sessionsScenario;
}

export const MACHINE_STEPS: CalibrationSteps = {
  install: async (version, cacheDir) => {
    const binary = await ensureClaudeBinary({ version, cacheDir });
    const integrity = binary.packageDir ? await npmIntegrity(binary.packageDir) : undefined;
    return { path: binary.path, sha256: await fileSha256(binary.path), ...(integrity ? { npmIntegrity: integrity } : {}) };
  },
  image: async (runtime, binaryPath, version) => {
    const built = await buildImage(runtime, await claudeCodeImageSpec({ claudeBinary: binaryPath, version }));
    return { id: built.id, version: (await probeVersion(runtime, built.id)).version };
  },
  help: (runtime, image) => claudeInImage(runtime, image, ["--help"], { "study-runner.calibrate": "help" }),
  prices: (runtime, image, binaryPath, progress) => measurePriceTable(runtime, image, binaryPath, { progress: (l) => progress(`  price ${l}`) }),
  corpus: () => prepareCorpus("calibrate"),
  probes: (runtime, image, corpus) => measureProbes({ runtime, image, loginDir: corpus.loginDir, work: corpus.work }),
  pilot: pilotScenario,
  adjudicator: adjudicatorScenario,
  sessions: sessionsScenario,
};

export interface Calibration {
  /** The sealed profile, or null when the version was refused. */
  profile: Profile | null;
  /** Why V cannot serve a study; empty when the profile was made. */
  problems: string[];
  /** Seconds per step (install, image, help, prices, direct, gateway, probes). */
  seconds: Record<string, number>;
}

/** The tarball integrity npm recorded when it installed the package (its hidden lock file), or undefined. */
async function npmIntegrity(packageDir: string): Promise<string | undefined> {
  const lock = join(packageDir, "..", "..", ".package-lock.json");
  try {
    const parsed = JSON.parse(await readFile(lock, "utf8")) as { packages?: Record<string, { integrity?: unknown }> };
    const integrity = parsed.packages?.[`node_modules/${NATIVE_PACKAGE}`]?.integrity;
    return typeof integrity === "string" && integrity.startsWith("sha512-") ? integrity : undefined;
  } catch {
    return undefined;
  }
}

/** Measures version `o.version`; see the file's comment. The draft profile is cleared whatever happens. */
export async function calibrate(o: CalibrateOptions): Promise<Calibration> {
  const seconds: Record<string, number> = {};
  const progress = o.progress ?? (() => {});
  const timed = async <T>(step: string, f: () => Promise<T>): Promise<T> => {
    const started = Date.now();
    progress(`${step}…`);
    try {
      return await f();
    } finally {
      seconds[step] = (Date.now() - started) / 1000;
    }
  };
  const steps = o.steps ?? MACHINE_STEPS;
  const binary = await timed("install", () => steps.install(o.version, o.binaryCacheDir));
  const built = await timed("image", () => steps.image(o.runtime, binary.path, o.version));
  if (built.version !== o.version) return { profile: null, problems: [`the binary installed as ${o.version} reports Claude Code ${built.version}`], seconds };
  const help = await timed("help", () => steps.help(o.runtime, built.id));
  const flags = checkFlags(help.stdout);
  if (help.exitCode !== 0) flags.problems.unshift(`claude --help exited ${help.exitCode}`);
  if (flags.problems.length > 0) return { profile: null, problems: flags.problems.map((p) => `flag: ${p}`), seconds };
  const prices = await timed("prices", () => steps.prices(o.runtime, built.id, binary.path, progress));
  const needed = [MODEL, DEFAULT_ADJUDICATOR_MODELS[0]!].filter((m) => !prices.table.models[m]);
  const priceProblems = [...prices.failures.map((f) => `price: ${f}`), ...needed.map((m) => `price: ${o.version} does not price ${m} as list, and the calibration's scenarios run it`)];
  if (priceProblems.length > 0) return { profile: null, problems: priceProblems, seconds };
  const pin = readProfileFile(bundledProfilePath(CLAUDE_CODE_VERSION), CLAUDE_CODE_VERSION);
  const { sha256: _pinSha, npmIntegrity: _pinIntegrity, ...pinBody } = pin;
  let body: Omit<Profile, "sha256"> = {
    ...pinBody,
    cliVersion: o.version,
    binarySha256: binary.sha256,
    ...(binary.npmIntegrity ? { npmIntegrity: binary.npmIntegrity } : {}),
    runnerVersion: runnerVersion(),
    measuredOn: new Date().toISOString().slice(0, 10),
    flags: flags.flags,
    prices: prices.table,
    initEvents: seedInits(pin.initEvents, o.version),
  };
  const corpus = await steps.corpus();
  try {
    const ctx: ScenarioContext = { runtime: o.runtime, image: built.id, cliVersion: o.version, corpus };
    const draft = () => useCalibrationDraft(sealProfile(body));
    draft();
    const direct = await timed("direct", () => directRound(ctx, steps, body, draft, progress));
    if (direct.problems.length > 0) return { profile: null, problems: direct.problems, seconds };
    body = { ...body, requestShapes: shapesOf(direct.requests) };
    draft();
    const gateway = await timed("gateway", () => gatewayRound(ctx, steps, progress));
    const inits = generatedFrom([...direct.inits, ...gateway.inits]);
    const probes = await timed("probes", () => steps.probes(o.runtime, built.id, corpus));
    const problems = [...gateway.problems, ...inits.problems, ...initRuleProblems(gateway.inits, o.version), ...probes.problems, ...roundsDisagree(direct.measured, gateway.measured)];
    if (problems.length > 0) return { profile: null, problems, seconds };
    const { structuredOutput, resume } = direct.measured;
    return { profile: sealProfile({ ...body, initEvents: inits.data, imports: probes.imports, retries: probes.retries, structuredOutput: structuredOutput!, resume: resume! }), problems: [], seconds };
  } finally {
    useCalibrationDraft(undefined);
    await corpus.cleanup();
  }
}

/** How many times a scenario is run while its inits are still being adopted. */
const MAX_TRIES = 4;

/**
 * The direct round: each scenario until it completes, the inits its runs wrote adopted into the
 * draft after each try. A scenario that does not complete although nothing new was adopted is a
 * problem. Returns every request recorded and the inits of the completed tries.
 */
async function directRound(
  ctx: ScenarioContext,
  steps: CalibrationSteps,
  body: Omit<Profile, "sha256">,
  reseal: () => void,
  progress: (line: string) => void,
): Promise<{ requests: RecordedRequest[]; inits: MeasuredInit[]; measured: Measured; problems: string[] }> {
  const requests: RecordedRequest[] = [];
  const inits: MeasuredInit[] = [];
  const measured: Measured = {};
  const adopted = new Set<InitKind>();
  let pilot: StudyRun | undefined;
  const scenarios: Array<() => Promise<ScenarioResult>> = [
    async () => {
      const r = await steps.pilot(ctx, "direct");
      pilot = r.run;
      return r;
    },
    () => steps.adjudicator(ctx, "direct", pilot!),
    () => steps.sessions(ctx, "direct"),
  ];
  for (const run of scenarios) {
    for (let attempt = 1; ; attempt++) {
      const result = await run();
      requests.push(...result.requests);
      const changed = adoptInits(body.initEvents, result.inits, adopted);
      progress(`  direct ${result.name} (try ${attempt}): ${result.statuses.join(", ") || "no run"}${changed ? "; init adopted" : ""}`);
      if (changed) reseal();
      if (result.completed) {
        inits.push(...result.inits);
        Object.assign(measured, measuredOf([result]));
        break;
      }
      if (!changed || attempt >= MAX_TRIES) return { requests, inits, measured, problems: [`scenario ${result.name} did not complete (${result.statuses.join(", ") || "no run"}): ${result.detail}`] };
    }
  }
  return { requests, inits, measured, problems: [] };
}

/** The gateway round: every scenario once through the runner's model gateway with the measured profile; each must complete. */
async function gatewayRound(ctx: ScenarioContext, steps: CalibrationSteps, progress: (line: string) => void): Promise<{ inits: MeasuredInit[]; measured: Measured; problems: string[] }> {
  const route: Route = "gateway";
  const pilot = await steps.pilot(ctx, route);
  const results: ScenarioResult[] = [pilot];
  if (pilot.completed) results.push(await steps.adjudicator(ctx, route, pilot.run));
  results.push(await steps.sessions(ctx, route));
  for (const r of results) progress(`  gateway ${r.name}: ${r.statuses.join(", ") || "no run"}`);
  return {
    inits: results.flatMap((r) => r.inits),
    measured: measuredOf(results),
    problems: results.filter((r) => !r.completed).map((r) => `scenario ${r.name} did not complete through the gateway (${r.statuses.join(", ") || "no run"}): ${r.detail}`),
  };
}

/** What the scenarios measured beyond their inits: structured output (the adjudicator) and resume (the sessions). */
type Measured = Pick<ScenarioResult, "structuredOutput" | "resume">;

function measuredOf(results: readonly ScenarioResult[]): Measured {
  const out: Measured = {};
  for (const r of results) {
    if (r.structuredOutput) out.structuredOutput = r.structuredOutput;
    if (r.resume) out.resume = r.resume;
  }
  return out;
}

/** Structured output and resume read the same on both routes, and both were measured (contract R263). */
function roundsDisagree(direct: Measured, gateway: Measured): string[] {
  const problems: string[] = [];
  for (const key of ["structuredOutput", "resume"] as const) {
    if (direct[key] === undefined) problems.push(`${key}: not measured (its scenario gave no reading)`);
    else if (gateway[key] !== undefined && !isDeepStrictEqual(direct[key], gateway[key]))
      problems.push(`${key}: the direct route measured ${JSON.stringify(direct[key])}, the gateway ${JSON.stringify(gateway[key])}`);
  }
  return problems;
}
