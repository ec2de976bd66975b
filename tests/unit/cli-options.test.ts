/**
 * src/cli/config/: each command's flags and environment parsed once into a typed config, every
 * refusal naming the flag and the fix, all of a command's problems reported at once.
 */
import { commandEnvironment } from "../../src/cli/config/flags.ts";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { checkDemoRuntime, parseAdjudicateFlags, parseDoctorFlags, parseRunExecution, parseSessionStartFlags, parseStudyInputs, runMode, type RunFlags } from "../../src/cli/config/commands.ts";
import { parseConcurrency, parseCpus, parseEngineCommand, parseRoots } from "../../src/cli/config/fields.ts";
import { UsageError } from "../../src/util/errors.ts";

const ENV = commandEnvironment("run", { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" });

let work: string;
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), "sr-unit-options-"));
});
afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

/** The flags of an execution that passes: the cli transport, the pilot, a new output outside the project. */
const runFlags = (extra: Partial<RunFlags> = {}): RunFlags => ({ manifest: "m.json", transport: "cli", pilot: true, approveBudget: true, output: join(work, "ledger.json"), ...extra });

async function refusal(p: Promise<unknown>): Promise<string[]> {
  const err = await p.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(UsageError);
  return [...(err as UsageError).problems];
}

describe("value shapes", () => {
  it("--root name=path: resolved; a malformed or repeated one named", () => {
    expect(parseRoots(["a=../x"])).toEqual(new Map([["a", resolve("../x")]]));
    expect(() => parseRoots(["a"])).toThrow("--root 'a': expected name=path, e.g. --root ledgerlite=../ledgerlite");
    expect(() => parseRoots(["a=x", "a=y"])).toThrow("--root 'a' is given twice; give each repository once");
  });

  it("--doc-bridge-command: a non-empty JSON array of non-empty strings", () => {
    expect(parseEngineCommand(undefined)).toBeUndefined();
    expect(parseEngineCommand('["node","x.js"]')).toEqual(["node", "x.js"]);
    expect(() => parseEngineCommand("node x.js")).toThrow(/^--doc-bridge-command must be a JSON array of strings, e.g. /);
    for (const bad of ["[]", '[""]', "[1]", '{"a":1}']) expect(() => parseEngineCommand(bad), bad).toThrow("--doc-bridge-command must be a non-empty JSON array of non-empty strings");
  });

  it("--cpus and --concurrency: ranges named with an example; concurrency above 1 for the cli transport only", () => {
    const problems: string[] = [];
    expect(parseCpus("0.5", problems)).toBe(0.5);
    expect(parseCpus("0", problems)).toBeUndefined();
    expect(parseConcurrency("4", "cli", problems)).toBe(4);
    expect(parseConcurrency("65", "cli", problems)).toBeUndefined();
    expect(parseConcurrency("2", "http", problems)).toBe(2);
    expect(problems).toEqual([
      "--cpus must be a number of CPUs between 0.01 and 1024, e.g. --cpus 1 or --cpus 0.5; got '0'",
      "--concurrency must be a whole number of attempts from 1 to 64, e.g. --concurrency 4; got '65'",
      "--concurrency above 1 applies to --transport cli only (the http transport runs one attempt at a time)",
    ]);
  });

  it("the checkouts given must be repositories of the manifest", () => {
    expect(parseStudyInputs(runFlags({ root: ["a=x"] }), ["a", "b"]).roots.get("a")).toBe(resolve("x"));
    expect(() => parseStudyInputs(runFlags({ root: ["c=x"] }), ["a", "b"])).toThrow("--root c=…: 'c' is not a repository of the manifest (known: a, b)");
  });
});

describe("run", () => {
  it("--pilot and --run exclude each other; neither is the full study", () => {
    expect(runMode({ pilot: true })).toBe("pilot");
    expect(runMode({})).toBe("full");
    expect(() => runMode({ pilot: true, run: true })).toThrow("--pilot and --run exclude each other; choose one");
  });

  it("parses an execution into typed options: defaults, resolved paths, test knobs in bytes", async () => {
    const options = await parseRunExecution(
      runFlags({ cpus: "2", concurrency: "3", testMemoryLimitMb: "512", testLoginLockStaleMs: "2500", modelApiSocket: "api.sock", docBridgeCommand: '["x"]' }),
      ENV,
      [],
      new Map(),
    );
    expect(options).toMatchObject({
      settings: { model: "claude-haiku-5-5", capUsd: 1, attemptBudgetUsd: 0.1 },
      isolation: "offline",
      credentials: "login-copy",
      cpus: 2,
      concurrency: 3,
      memoryBytes: 512 * 1024 * 1024,
      loginLockStaleMs: 2500,
      modelApi: { socketPath: resolve("api.sock") },
      docBridgeCommand: ["x"],
    });
    expect(options.fake).toBeUndefined();
    expect((await parseRunExecution(runFlags(), ENV, [], new Map())).credentials).toBe("gateway");
  });

  it("reports every problem of an execution at once, each naming its flag", async () => {
    const problems = await refusal(
      parseRunExecution(
        runFlags({ approveBudget: false, transport: "http", apiBaseUrl: undefined, credentials: "login-copy", runtime: "bad name", cpus: "x", egressAllow: ["a.example"], testGatewayCa: "ca.pem" }),
        commandEnvironment("run", { STUDY_BUDGET_USD: "1" }),
        ["ledgerlite"],
        new Map(),
      ),
    );
    const expected = [
      /^--approve-budget is required/,
      /^STUDY_MODEL is not set/,
      /^--root ledgerlite=<path> is missing/,
      /^ANTHROPIC_API_KEY is not set/,
      /^--input-price-usd-per-mtok/,
      /^--output-price-usd-per-mtok/,
      /^--credentials and --oauth-token-file apply to --transport cli only$/,
      /^--test-gateway-ca needs --test-gateway-upstream$/,
      /^--runtime applies to --transport cli only/,
      /^--egress-allow applies to --isolation strict only$/,
      /^--runtime "bad name" is not a runtime name/,
      /^--cpus must be a number of CPUs/,
    ];
    expect(problems).toHaveLength(expected.length);
    for (const [i, re] of expected.entries()) expect(problems[i]).toMatch(re);
  });

  it("the gateway's own flags: a socket bypasses it, a token file or test upstream needs it", async () => {
    expect(await refusal(parseRunExecution(runFlags({ credentials: "gateway", modelApiSocket: "s" }), ENV, [], new Map()))).toEqual([
      "--model-api-socket reaches the API directly; use it with --credentials login-copy",
    ]);
    expect(await refusal(parseRunExecution(runFlags({ credentials: "login-copy", oauthTokenFile: "t" }), ENV, [], new Map()))).toEqual([
      "--oauth-token-file and --test-gateway-upstream apply to --credentials gateway only",
    ]);
    expect(await refusal(parseRunExecution(runFlags({ isolation: "strict", egressAllow: ["a.example"] }), ENV, [], new Map()))).toEqual([
      expect.stringMatching(/^--egress-allow has no effect with --credentials gateway/),
    ]);
  });

  it("reads the test upstream's CA only once the flags are accepted, and a bad hidden test number names its flag", async () => {
    const ca = join(work, "ca.pem");
    await writeFile(ca, "PEM");
    const options = await parseRunExecution(runFlags({ testGatewayUpstream: "https://127.0.0.1:1", testGatewayCa: ca, oauthTokenFile: "token" }), ENV, [], new Map());
    expect(options.gatewayUpstream).toEqual({ url: "https://127.0.0.1:1", ca: "PEM" });
    expect(options.oauthTokenFile).toBe(resolve("token"));
    await expect(parseRunExecution(runFlags({ testHomeSizeMb: "0" }), ENV, [], new Map())).rejects.toThrow("--test-home-size-mb must be a positive whole number, got '0'");
  });
});

describe("adjudicate", () => {
  const flags = { ledger: "l.json", output: "o.json", approveBudget: true };

  it("parses the money flags and variables and the seed", () => {
    const o = parseAdjudicateFlags({ ...flags, seed: "7", itemBudgetUsd: "0.5" }, commandEnvironment("adjudicate", { STUDY_ADJUDICATION_BUDGET_USD: "2" }));
    expect(o).toMatchObject({ problems: [], capUsd: 2, itemBudgetUsd: 0.5, seed: 7, credentials: "gateway" });
    expect(parseAdjudicateFlags(flags, commandEnvironment("adjudicate", { STUDY_ADJUDICATION_BUDGET_USD: "2" })).seed).toBeTypeOf("number");
  });

  it("collects every problem before the ledger is read", () => {
    const o = parseAdjudicateFlags(
      { seed: "4294967296", itemBudgetUsd: "0", root: ["x"], maxExportFiles: "-1", credentials: "login-copy", testGatewayUpstream: "https://h" },
      commandEnvironment("adjudicate", {}),
    );
    expect(o.problems).toEqual([
      expect.stringMatching(/^--ledger PATH is required/),
      expect.stringMatching(/^--output PATH is required/),
      expect.stringMatching(/^--approve-budget is required/),
      expect.stringMatching(/^STUDY_ADJUDICATION_BUDGET_USD is not set/),
      "--item-budget-usd must be greater than 0, such as 0.10",
      "--seed must be a whole number from 0 to 4294967295",
      "--oauth-token-file and --test-gateway-upstream apply to --credentials gateway only",
      expect.stringMatching(/^--max-export-files must be a positive whole number/),
      expect.stringMatching(/^--root 'x': expected name=path/),
    ]);
  });
});

describe("sessions start", () => {
  const start = { manifest: "m.json", output: "o.json", image: "i", model: "claude-haiku-5-5", callBudgetUsd: "0.5", sessionBudgetUsd: "10" };

  it("every amount is checked as every other command's: a plain positive decimal, a missing one named with what it is", () => {
    expect(parseSessionStartFlags({ ...start, capUsd: "2.5" }, commandEnvironment("sessions start", {}))).toMatchObject({ capUsd: 2.5, callBudgetUsd: 0.5, sessionBudgetUsd: 10 });
    const problems = (flags: object) => {
      try {
        parseSessionStartFlags({ ...start, ...flags }, commandEnvironment("sessions start", {}));
      } catch (err) {
        return (err as UsageError).problems;
      }
      return [];
    };
    expect(problems({})).toEqual(["--cap-usd is required: the cumulative cap in USD of every call of this ledger, e.g. --cap-usd 0.5"]);
    expect(problems({ capUsd: "1e-1", callBudgetUsd: "0", sessionBudgetUsd: "-1" })).toEqual([
      "--cap-usd must be a positive decimal number such as 0.5",
      "--call-budget-usd must be greater than 0, such as 0.5",
      "--session-budget-usd must be a positive decimal number such as 0.5",
    ]);
  });
});

describe("doctor and demo", () => {
  const doctor = { manifest: "m.json", transport: "cli" as const, image: "i", cliVersion: "1" };

  it("doctor: the pilot unless --run; the run's own refusals", () => {
    expect(parseDoctorFlags(doctor).mode).toBe("pilot");
    expect(parseDoctorFlags({ ...doctor, run: true }).mode).toBe("full");
    expect(() => parseDoctorFlags({ ...doctor, pilot: true, run: true })).toThrow("--pilot and --run exclude each other");
    expect(() => parseDoctorFlags({ ...doctor, egressAllow: ["a.example"] })).toThrow("--egress-allow applies to --isolation strict only");
  });

  it("demo --runtime: a name no runtime has is refused before anything is set up", () => {
    expect(() => checkDemoRuntime("run sc")).toThrow('--runtime "run sc" is not a runtime name such as runsc');
    expect(() => checkDemoRuntime(undefined)).not.toThrow();
  });
});
