import { readFileSync } from "node:fs";
import { mkdtemp, readdir, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { calibrate, type Calibration, type CalibrationSteps } from "../../src/calibrate/calibrate.ts";
import type { StudyRun } from "../../src/calibrate/env.ts";
import type { ScenarioResult } from "../../src/calibrate/scenarios.ts";
import { measuredPart } from "../../src/calibrate/init.ts";
import { INIT_KINDS } from "../../src/claude/init-expectation.ts";
import type { ContainerRuntime } from "../../src/sandbox/port.ts";
import type { RecordedRequest } from "../../src/stand-ins/scripted-api/server.ts";
import { isDeepStrictEqual } from "node:util";
import { profileDifference, shapePaths } from "../../src/calibrate/difference.ts";
import { adoptInits, seedInits } from "../../src/calibrate/draft.ts";
import { initRuleProblems, type MeasuredInit } from "../../src/calibrate/init.ts";
import type { InitKind } from "../../src/claude/init-expectation.ts";
import { CLAUDE_CODE_VERSION } from "../../src/claude/version.ts";
import { calibrateCommand } from "../../src/cli/calibrate.ts";
import { activeProfile, cachedProfilePath, findProfile, readProfileFile, sealProfile, useCalibrationDraft } from "../../src/profile/load.ts";
import type { Profile } from "../../src/profile/schema.ts";
import { RefusalError, UsageError } from "../../src/util/errors.ts";
import { PROJECT_ROOT } from "../../src/util/paths.ts";

const pin = () => structuredClone(activeProfile());

/** The pin's profile as if measured on `version`, with `change` applied, sealed. */
function variant(version: string, change: (p: Omit<Profile, "sha256">) => void = () => {}): Profile {
  const { sha256: _s, ...body } = pin();
  const { npmIntegrity: _i, ...rest } = body;
  const next = { ...rest, cliVersion: version, binarySha256: "b".repeat(64) };
  change(next);
  return sealProfile(next);
}

/** A run's whole init of `kind`: its measured fields with the parameters and varying fields a run adds. */
function runInit(kind: InitKind, fields: Record<string, unknown>, status = "invalid-setup"): MeasuredInit {
  const session = kind.startsWith("session") ? "00000000-0000-4000-8000-000000000001" : "00000000-0000-4000-8000-000000000002";
  return { kind, model: "claude-haiku-5-5", ...(kind.startsWith("session") ? { sessionId: session } : {}), status, init: { ...fields, model: "claude-haiku-5-5", session_id: session, uuid: session } };
}

describe("the calibration's init bootstrap (contract R223)", () => {
  // contract: R223
  it("starts from the pin's inits naming the measured version, and adopts what a run wrote into its kind and, by analogy, into the kinds no run has measured yet", () => {
    const draft = seedInits(pin().initEvents, "2.1.999");
    for (const k of Object.values(draft.kinds)) expect(k.fields.claude_code_version).toBe("2.1.999");
    expect(pin().initEvents.kinds.adjudicator.fields.claude_code_version).toBe(CLAUDE_CODE_VERSION);

    const repo = structuredClone(draft.kinds["attempt-repository"].fields);
    repo.slash_commands = [...(repo.slash_commands as string[]), "brand-new"];
    repo.tools = ["Glob", "Grep", "Read", "Search"];
    repo.new_field = true;
    const measured = new Set<InitKind>();
    expect(adoptInits(draft, [runInit("attempt-repository", repo)], measured)).toBe(true);
    expect(draft.kinds["attempt-repository"].fields).toEqual(repo);
    expect(draft.kinds["attempt-repository"].varying).toEqual(["session_id", "uuid"]);
    // The same change in a kind that had the same value; the tools differed per kind, so they stay.
    expect(draft.kinds.adjudicator.fields.slash_commands).toEqual(repo.slash_commands);
    expect(draft.kinds.adjudicator.fields.new_field).toBe(true);
    expect(draft.kinds.adjudicator.fields.tools).toEqual(pin().initEvents.kinds.adjudicator.fields.tools);
    // A kind a run measured is not overwritten by analogy; a run that wrote what the draft holds changes nothing.
    const mcp = { ...structuredClone(draft.kinds["attempt-mcp"].fields), slash_commands: ["only-mcp"] };
    expect(adoptInits(draft, [runInit("attempt-mcp", mcp)], measured)).toBe(true);
    expect(draft.kinds["attempt-repository"].fields.slash_commands).toEqual(repo.slash_commands);
    expect(adoptInits(draft, [runInit("attempt-repository", repo)], measured)).toBe(false);
  });

  // contract: R223
  it("refuses an init that lacks what the transcript rules read: the tools, the version, no API key, the arm's exact tools", () => {
    const kinds = pin().initEvents.kinds;
    const good = runInit("attempt-repository", { ...kinds["attempt-repository"].fields, claude_code_version: "2.1.999" }, "completed");
    expect(initRuleProblems([good], "2.1.999")).toEqual([]);
    const { tools: _t, ...noTools } = good.init;
    expect(initRuleProblems([{ ...good, init: noTools }], "2.1.999")).toEqual([
      "attempt-repository: the init lacks what the transcript rules read (tools: Invalid input: expected array, received undefined)",
      "attempt-repository: the init lists the tools , not the arm's Glob, Grep, Read",
    ]);
    expect(initRuleProblems([{ ...good, init: { ...good.init, apiKeySource: "ANTHROPIC_API_KEY" } }], "2.1.998")).toEqual([
      'attempt-repository: the init names claude_code_version "2.1.999", not 2.1.998',
      'attempt-repository: the init\'s apiKeySource is "ANTHROPIC_API_KEY", not "none"',
    ]);
  });

  // contract: R223
  it("a draft being calibrated is found for its version before the bundled profile, and only while the calibration runs", () => {
    const draft = variant(CLAUDE_CODE_VERSION, (p) => (p.measuredOn = "2099-01-01"));
    useCalibrationDraft(draft);
    try {
      expect(findProfile(CLAUDE_CODE_VERSION)).toMatchObject({ source: "being calibrated", profile: { measuredOn: "2099-01-01" } });
      expect(findProfile("2.1.998")).toBeNull();
    } finally {
      useCalibrationDraft(undefined);
    }
    expect(findProfile(CLAUDE_CODE_VERSION)?.source).toBe("bundled");
  });
});

describe("the difference against the bundled profile (contract R224)", () => {
  // contract: R224
  it("names the flags gone, the init fields and tools added or gone, the headers, beta values and body members, the price changes", () => {
    const to = variant("2.1.999", (p) => {
      delete p.flags["--json-schema"];
      p.initEvents.kinds.adjudicator.fields.tools = [...(p.initEvents.kinds.adjudicator.fields.tools as string[]), "Think"];
      p.initEvents.kinds.adjudicator.fields.claude_code_version = "2.1.999";
      delete p.initEvents.kinds["session-start"].fields.view_mode;
      p.requestShapes.headers = [...p.requestShapes.headers.filter((h) => h !== "x-app"), "x-new-header"];
      p.requestShapes.anthropicBeta = [...p.requestShapes.anthropicBeta, "new-beta-2026-12-01"];
      p.requestShapes.body.object![""]!.speed = { string: true };
      delete p.requestShapes.body.object![""]!.metadata;
      p.prices.models["claude-haiku-5-5"]!.tier1.output = 99;
      delete p.prices.models["claude-3-5-haiku"];
    });
    const from = pin();
    const was = from.prices.models["claude-haiku-5-5"]!.tier1.output;
    expect(profileDifference(from, to)).toEqual([
      "flags gone: --json-schema",
      'init adjudicator: claude_code_version: "2.1.296" → "2.1.999"',
      "init adjudicator: tools added: Think",
      `init session-start: view_mode gone (was ${JSON.stringify(from.initEvents.kinds["session-start"].fields.view_mode)})`,
      "request headers added: x-new-header",
      "request headers gone: x-app",
      "anthropic-beta values added: new-beta-2026-12-01",
      "request body members added: speed",
      `request body members gone: ${shapePaths(from.requestShapes.body)
        .filter((m) => m.startsWith("metadata"))
        .join(", ")}`,
      "priced models gone: claude-3-5-haiku",
      `price claude-haiku-5-5 tier 1 output: ${was} → 99 USD per million tokens`,
    ]);
    expect(profileDifference(from, variant(CLAUDE_CODE_VERSION))).toEqual([]);
  });

  // contract: R224, R263
  it("names the imports, structured output, resume and retry readings that changed", () => {
    const from = pin();
    const to = variant("2.1.999", (p) => {
      p.imports.plain.maxHops = 5;
      p.imports.restricted.claudeMd = !from.imports.restricted.claudeMd;
      p.structuredOutput.resultField = false;
      p.resume.cost = "per-call";
      p.retries.requests = 4;
      p.retries.retryAfter = "shorter";
      p.retries.events[0]!.fields = [...p.retries.events[0]!.fields.filter((f) => f !== "uuid"), "retry_reason"];
    });
    expect(profileDifference(from, to)).toEqual([
      `imports plain.maxHops: ${from.imports.plain.maxHops} → 5`,
      `imports restricted.claudeMd: ${from.imports.restricted.claudeMd} → ${!from.imports.restricted.claudeMd}`,
      "structured output resultField: true → false",
      'resume cost: "cumulative" → "per-call"',
      `retries requests: ${from.retries.requests} → 4`,
      "retries events[0].fields added: retry_reason",
      "retries events[0].fields gone: uuid",
      `retries retryAfter: ${JSON.stringify(from.retries.retryAfter)} → "shorter"`,
    ]);
  });
});

describe("study-runner calibrate (contract R223, R224)", () => {
  let cache: string;
  const before = process.env.STUDY_RUNNER_CACHE;
  beforeEach(async () => {
    cache = await mkdtemp(join(tmpdir(), "sr-calibrate-"));
    process.env.STUDY_RUNNER_CACHE = cache;
  });
  afterEach(async () => {
    if (before === undefined) delete process.env.STUDY_RUNNER_CACHE;
    else process.env.STUDY_RUNNER_CACHE = before;
    vi.restoreAllMocks();
    await rm(cache, { recursive: true, force: true });
  });

  const measured = (c: Calibration) => async () => c;

  // contract: R223
  it("refuses a version that cannot serve a study with each problem, and writes nothing", async () => {
    const problems = ["flag: --json-schema (adjudicator) is not in claude --help: the runner needs it"];
    const err = await calibrateCommand({ cliVersion: "2.1.999", quiet: true }, measured({ profile: null, problems, seconds: {} })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RefusalError);
    expect((err as RefusalError).problems).toEqual([`Claude Code 2.1.999 cannot serve a study: ${problems[0]}`]);
    expect((err as Error).message).toMatch(/nothing was written; study a version that calibrates, e\.g\. the pinned 2\.1\.296$/);
    expect(await readdir(cache)).toEqual([]);
  });

  // contract: R223
  it("refuses a --cli-version that is not a version, naming the flag", async () => {
    const err = await calibrateCommand({ cliVersion: "latest\u001b[2J", quiet: true }, measured({ profile: null, problems: [], seconds: {} })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(UsageError);
    expect((err as Error).message).toBe("--cli-version latest\\u001b[2J is not a version like 2.1.296; pass the Claude Code version to measure");
  });

  // contract: R224
  it("writes the sealed profile into the cache folder, readable by every user, and prints its difference against the bundled one", async () => {
    const profile = variant("2.1.999", (p) => (p.requestShapes.anthropicBeta = [...p.requestShapes.anthropicBeta, "new-beta-2026-12-01"]));
    let out = "";
    vi.spyOn(process.stdout, "write").mockImplementation((chunk) => {
      out += String(chunk);
      return true;
    });
    expect(await calibrateCommand({ cliVersion: "2.1.999", quiet: true }, measured({ profile, problems: [], seconds: { prices: 150.2 } }))).toBe(0);
    const path = cachedProfilePath("2.1.999");
    expect(readProfileFile(path, "2.1.999")).toEqual(profile);
    expect((await stat(path)).mode & 0o777).toBe(0o644);
    expect(await readdir(join(cache, "profiles"))).toEqual(["claude-code-2.1.999.json"]);
    expect(findProfile("2.1.999")?.source).toBe("calibrated on this machine");
    expect(out).toMatch(/^Claude Code 2\.1\.999 calibrated in \d+ s \(prices 150 s\): /);
    expect(out).toContain(`profile sha256 ${profile.sha256}; binary sha256 ${"b".repeat(64)}\n`);
    expect(out).toContain("difference against the bundled profile of 2.1.296 (1 lines):\n  anthropic-beta values added: new-beta-2026-12-01\n");
    expect(JSON.parse(await readFile(path, "utf8")).sha256).toBe(profile.sha256);
  });
});

/**
 * A version "2.1.999" whose binary writes the pin's init with its own version and one new field,
 * and sends one request shape: the fake steps stand in for the registry, the engine and the CLI,
 * and judge each run's init against the draft being calibrated as the runner's init check does.
 */
function fakeVersion(
  o: { help?: (help: string) => string; unpriced?: string; sessionsFail?: boolean; probes?: Partial<Awaited<ReturnType<CalibrationSteps["probes"]>>>; gatewayResume?: Profile["resume"] } = {},
) {
  const V = "2.1.999";
  const tries: string[] = [];
  const writes = (kind: InitKind, i: number): MeasuredInit => {
    const fields = { ...pin().initEvents.kinds[kind].fields, claude_code_version: V, ultrathink_available: false };
    const id = `00000000-0000-4000-8000-00000000000${i}`;
    const model = kind === "adjudicator" ? "claude-sonnet-5-5" : "claude-haiku-5-5";
    return { kind, model, ...(kind.startsWith("session") ? { sessionId: id } : {}), status: "", init: { ...fields, model, uuid: id, session_id: id } };
  };
  /** Runs `kinds` in order as the runner would: a run whose init is not the draft's is invalid-setup and stops the scenario. */
  const run = (name: ScenarioResult["name"], kinds: InitKind[], route: string): ScenarioResult & { run: StudyRun } => {
    const draft = findProfile(V)!.profile.initEvents;
    const inits: MeasuredInit[] = [];
    for (const [i, kind] of kinds.entries()) {
      const m = writes(kind, i);
      const ok = isDeepStrictEqual(measuredPart(kind, m.init), draft.kinds[kind]) && !(o.sessionsFail && name === "sessions");
      inits.push({ ...m, status: ok ? "completed" : "invalid-setup" });
      if (!ok) break;
    }
    tries.push(`${route} ${name}: ${inits.map((m) => m.status).join(" ")}`);
    const request: RecordedRequest = {
      seq: 0,
      at: "",
      method: "POST",
      path: "/v1/messages?beta=true",
      headers: { "content-type": "application/json" },
      auth: { bearer: true, apiKey: false },
      rawBody: { model: "m", stream: true },
    } as unknown as RecordedRequest;
    const completed = inits.length === kinds.length && inits.every((m) => m.status === "completed");
    const measuredHere =
      name === "adjudicator"
        ? { structuredOutput: { initTool: true, resultField: true, equalsToolInput: true, resultTextIsJson: false } }
        : name === "sessions"
          ? { resume: route === "gateway" && o.gatewayResume ? o.gatewayResume : { completed: true, sessionIdKept: true, historySent: true, cost: "cumulative" as const } }
          : {};
    return { name, inits, statuses: inits.map((m) => m.status), requests: route === "direct" ? [request] : [], completed, detail: "", run: {} as StudyRun, ...measuredHere };
  };
  const restricted = { claudeMd: false, relative: false, absoluteInWorkspace: false, absoluteOutside: false, tilde: false, maxHops: 0 };
  const probed = {
    imports: { plain: { ...pin().imports.plain, maxHops: 5 }, restricted },
    retries: { ...pin().retries, retryAfter: "longer" as const },
    problems: [],
    ...o.probes,
  };
  const help = readFileSync(join(PROJECT_ROOT, "tests", "fixtures", "claude-2.1.296-help.txt"), "utf8");
  const prices = structuredClone(pin().prices);
  if (o.unpriced) delete prices.models[o.unpriced];
  const steps: CalibrationSteps = {
    install: async () => ({ path: "/nonexistent/claude", sha256: "c".repeat(64), npmIntegrity: "sha512-AAAA" }),
    image: async () => ({ id: "sha256:fake", version: V }),
    help: async () => ({ exitCode: 0, stdout: o.help ? o.help(help) : help }),
    prices: async () => ({ table: prices, failures: [] }),
    corpus: async () => ({ work: tmpdir(), roots: new Map(), loginDir: tmpdir(), cleanup: async () => {} }),
    probes: async () => probed,
    pilot: async (_ctx, route) => run("pilot", ["attempt-repository", "attempt-mcp"], route),
    adjudicator: async (_ctx, route) => run("adjudicator", ["adjudicator", "adjudicator"], route),
    sessions: async (_ctx, route) => run("sessions", ["session-start", "session-resume", "session-start", "session-resume"], route),
  };
  return { V, tries, steps, calibrate: () => calibrate({ version: V, runtime: {} as ContainerRuntime, steps }) };
}

describe("calibrate() over its steps (contract R223)", () => {
  // contract: R223
  it("runs a scenario again with the inits its runs wrote adopted, keeps only completed runs' inits, and seals the profile", async () => {
    const v = fakeVersion();
    const c = await v.calibrate();
    expect(c.problems).toEqual([]);
    expect(v.tries).toEqual([
      "direct pilot: invalid-setup",
      "direct pilot: completed completed",
      "direct adjudicator: completed completed",
      "direct sessions: completed completed completed completed",
      "gateway pilot: completed completed",
      "gateway adjudicator: completed completed",
      "gateway sessions: completed completed completed completed",
    ]);
    const profile = c.profile!;
    expect(profile.sha256).toBe(sealProfile(profile).sha256);
    expect([profile.cliVersion, profile.binarySha256, profile.npmIntegrity]).toEqual([v.V, "c".repeat(64), "sha512-AAAA"]);
    for (const kind of INIT_KINDS) expect(profile.initEvents.kinds[kind].fields).toEqual({ ...pin().initEvents.kinds[kind].fields, claude_code_version: v.V, ultrathink_available: false });
    expect(profile.requestShapes.requestCount).toBe(4);
    expect(profile.requestShapes.headers).toEqual(["content-type"]);
    // The draft is gone once the calibration ends.
    expect(findProfile(v.V)).toBeNull();
  });

  // contract: R263
  it("puts the probed imports (without and with --restricted), the retries, and the scenarios' structured output and resume into the profile", async () => {
    const c = await fakeVersion().calibrate();
    expect(c.problems).toEqual([]);
    const p = c.profile!;
    expect(p.imports).toEqual({
      plain: { ...pin().imports.plain, maxHops: 5 },
      restricted: { claudeMd: false, relative: false, absoluteInWorkspace: false, absoluteOutside: false, tilde: false, maxHops: 0 },
    });
    expect(p.retries.retryAfter).toBe("longer");
    expect(p.structuredOutput).toEqual({ initTool: true, resultField: true, equalsToolInput: true, resultTextIsJson: false });
    expect(p.resume.cost).toBe("cumulative");
    expect(Object.keys(c.seconds)).toContain("probes");
    // A help without --restricted is refused before any probe: session calls pass it, so there is always a restricted reading.
    const none = await fakeVersion({ help: (h) => h.replace(/^ {2}--restricted .*$/m, "") }).calibrate();
    expect(none.profile).toBeNull();
    expect(none.problems).toContain("flag: --restricted (session-start) is not in claude --help: the runner needs it");
  });

  // contract: R264
  it("refuses a version whose retries the runner's backoff cannot read, or whose rounds read structured output or resume differently", async () => {
    const retry = "retry: the stream announced the statuses [] where the runner reads them (system/api_retry error_status), not [429,529]: its backoff would not see a rate limit";
    const c = await fakeVersion({ probes: { problems: [retry] } }).calibrate();
    expect(c.profile).toBeNull();
    expect(c.problems).toEqual([retry]);
    const split = await fakeVersion({ gatewayResume: { completed: true, sessionIdKept: true, historySent: true, cost: "per-call" } }).calibrate();
    expect(split.profile).toBeNull();
    expect(split.problems).toEqual([
      'resume: the direct route measured {"completed":true,"sessionIdKept":true,"historySent":true,"cost":"cumulative"}, the gateway {"completed":true,"sessionIdKept":true,"historySent":true,"cost":"per-call"}',
    ]);
  });

  // contract: R222, R223
  it("refuses a version whose help lacks a flag the runner needs before measuring anything else", async () => {
    const v = fakeVersion({ help: (h) => h.replace(/^ {2}--json-schema .*$/m, "") });
    const c = await v.calibrate();
    expect(c.profile).toBeNull();
    expect(c.problems).toEqual([
      "flag: --json-schema (adjudicator) is not in claude --help: the runner needs it",
      "flag: --json-schema (session-start) is not in claude --help: the runner needs it",
      "flag: --json-schema (session-resume) is not in claude --help: the runner needs it",
    ]);
    expect(v.tries).toEqual([]);
  });

  // contract: R223
  it("refuses a version that does not price the scenarios' model, or whose scenario does not complete", async () => {
    const unpriced = fakeVersion({ unpriced: "claude-haiku-5-5" });
    expect((await unpriced.calibrate()).problems).toEqual(["price: 2.1.999 does not price claude-haiku-5-5 as list, and the calibration's scenarios run it"]);
    const stuck = fakeVersion({ sessionsFail: true });
    const c = await stuck.calibrate();
    expect(c.profile).toBeNull();
    expect(c.problems).toEqual(["scenario sessions did not complete (invalid-setup): "]);
    expect(stuck.tries.at(-1)).toBe("direct sessions: invalid-setup");
    expect(findProfile(stuck.V)).toBeNull();
  });
});
