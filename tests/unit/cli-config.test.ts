/**
 * src/cli/config/flags.ts: one flag schema per command, checked against what commander declares;
 * the hidden flags are exactly the stand-in section, parsed into one object a production path
 * never has.
 */
import { resolve } from "node:path";
import type { Command } from "commander";
import { describe, expect, it } from "vitest";
import { leafCommands } from "../support/cli-commands.ts";
import { buildProgram } from "../../src/cli/main.ts";
import { COMMAND_FLAGS, commandEnvironment, commandFlags, parseStandIns, type CommandName } from "../../src/cli/config/flags.ts";
import { parseRunExecution, parseSessionRuntimeFlags } from "../../src/cli/config/commands.ts";
import { UsageError } from "../../src/util/errors.ts";

/** What commander declares and the schemas say apart, one line per difference. */
function mismatches(program: Command): string[] {
  const found: string[] = [];
  const schemas = COMMAND_FLAGS as Record<string, { schema: { shape: Record<string, { safeParse(v: unknown): { success: boolean } }> }; standIns: readonly string[] }>;
  const declared = leafCommands(program);
  for (const [name, command] of declared) {
    const schema = schemas[name];
    if (!schema) {
      found.push(`${name}: no flag schema`);
      continue;
    }
    const options = command.options.map((o) => o.attributeName());
    const keys = Object.keys(schema.schema.shape);
    for (const o of options) if (!keys.includes(o)) found.push(`${name}: --${o} is declared but not in the schema`);
    for (const k of keys) if (!options.includes(k)) found.push(`${name}: ${k} is in the schema but not declared`);
    // The kind: a switch is a boolean in the schema, a flag with a value a string (or a list when repeatable).
    for (const o of command.options) {
      const field = schema.schema.shape[o.attributeName()];
      if (!field) continue;
      const takesValue = o.required || o.optional;
      const sample = o.argChoices?.[0] ?? "x";
      const accepts = takesValue ? field.safeParse(sample).success || field.safeParse([sample]).success : field.safeParse(true).success;
      if (!accepts) found.push(`${name}: --${o.attributeName()} ${takesValue ? "takes a value" : "is a switch"} but its schema field does not accept one`);
      for (const c of o.argChoices ?? []) if (!field.safeParse(c).success) found.push(`${name}: --${o.attributeName()} offers ${c}, which its schema refuses`);
    }
    const hidden = command.options.filter((o) => o.hidden).map((o) => o.attributeName());
    for (const h of hidden) if (!schema.standIns.includes(h)) found.push(`${name}: hidden --${h} is not a stand-in`);
    for (const s of schema.standIns) if (!hidden.includes(s)) found.push(`${name}: stand-in ${s} is not hidden`);
  }
  for (const name of Object.keys(schemas)) if (!declared.some(([n]) => n === name)) found.push(`${name}: a schema without a command`);
  return found;
}

describe("the commands' flag schemas", () => {
  // contract: R210
  it("match commander's declarations: every option of every command, and the hidden ones are exactly its stand-ins", () => {
    const program = buildProgram(() => {});
    expect(leafCommands(program).length).toBeGreaterThan(15);
    expect(mismatches(program)).toEqual([]);
  });

  // contract: R210
  it("the check fails on an option declared in commander only, or declared visible where the schema has a stand-in", () => {
    const program = buildProgram(() => {});
    const run = program.commands.find((c) => c.name() === "run")!;
    run.option("--new-knob <n>", "added to commander only");
    const demo = program.commands.find((c) => c.name() === "demo")!;
    demo.option("--model-api-socket <path>", "a stand-in shown in --help");
    expect(mismatches(program)).toEqual(["run: --newKnob is declared but not in the schema", "demo: --modelApiSocket is declared but not in the schema"]);
    const session = program.commands.find((c) => c.name() === "resume")!;
    for (const o of session.options) if (o.attributeName() === "fakeRecords") o.hidden = false;
    expect(mismatches(program)).toContain("resume: stand-in fakeRecords is not hidden");
    const plan = program.commands.find((c) => c.name() === "plan")!;
    for (const o of plan.options) if (o.attributeName() === "json") o.required = true;
    expect(mismatches(program)).toContain("plan: --json takes a value but its schema field does not accept one");
  });

  // contract: R211
  it("a command refuses a flag it does not take, or a value of the wrong kind, naming the flag", () => {
    const refused = (name: CommandName, flags: object) => {
      try {
        commandFlags(name, flags);
      } catch (err) {
        expect(err).toBeInstanceOf(UsageError);
        return (err as UsageError).problems;
      }
      return [];
    };
    expect(commandFlags("run", { manifest: "m.json", transport: "cli", pilot: true })).toEqual({ manifest: "m.json", transport: "cli", pilot: true });
    expect(refused("run", { manifest: "m.json", transport: "ftp", pilot: "yes", cpus: 2, root: "a=b", seed: "1" })).toEqual([
      "--pilot is a switch: pass --pilot alone, without a value",
      "--transport must be one of cli, http",
      "--root takes a list: pass --root <value> once for each value",
      "--cpus takes one value: pass --cpus <value> (see --help)",
      "--seed is not a flag of this command; see its --help",
    ]);
    expect(refused("demo", { modelApiSocket: "s" })).toEqual(["--model-api-socket is not a flag of this command; see its --help"]);
    expect(refused("export", { manifest: "m.json", repository: "r", out: "o" })).toEqual(["--root is required"]);
  });
});

describe("the stand-ins", () => {
  // contract: R212
  it("are one section, parsed into one object: paths resolved, bounds in milliseconds and bytes, each bad value naming its flag", () => {
    const problems: string[] = [];
    expect(
      parseStandIns(
        { modelApiSocket: "api.sock", fakeBehaviour: "b.json", testMemoryLimitMb: "2", testItemTimeoutMs: "500", testGatewayUpstream: "https://127.0.0.1:1", testGatewayCa: "ca.pem" },
        problems,
      ),
    ).toEqual({
      modelApi: { socketPath: resolve("api.sock") },
      fake: { behaviourFile: resolve("b.json"), recordsDir: undefined },
      memoryBytes: 2 * 1024 * 1024,
      timeoutMs: 500,
      gatewayUpstream: { url: "https://127.0.0.1:1", caFile: resolve("ca.pem") },
    });
    expect(problems).toEqual([]);
    expect(parseStandIns({ testAttemptTimeoutMs: "soon", testHomeSizeMb: "0" }, problems)).toBeUndefined();
    expect(problems).toEqual(["--test-attempt-timeout-ms must be a positive whole number, got 'soon'", "--test-home-size-mb must be a positive whole number, got '0'"]);
  });

  // contract: R212
  it("a session command takes a dead runner's login lock over sooner only when --test-login-lock-stale-ms says so, its value checked", () => {
    expect(parseSessionRuntimeFlags({ isolation: "offline", fakeBehaviour: "b.json", testLoginLockStaleMs: "2000" })).toMatchObject({ loginLockStaleMs: 2000 });
    expect(() => parseSessionRuntimeFlags({ isolation: "offline", testLoginLockStaleMs: "soon" })).toThrow("--test-login-lock-stale-ms must be a positive whole number, got 'soon'");
    expect(COMMAND_FLAGS.resume.standIns).toContain("testLoginLockStaleMs");
  });

  // contract: R212
  it("are never set on a production path: a command given only visible flags has none", async () => {
    const problems: string[] = [];
    expect(parseStandIns({ manifest: "m.json", transport: "cli", output: "o.json", quiet: true }, problems)).toBeUndefined();
    expect(parseSessionRuntimeFlags({ isolation: "standard" })).not.toHaveProperty("fake");
    expect(parseSessionRuntimeFlags({ isolation: "standard" })).not.toHaveProperty("loginLockStaleMs");
    const env = commandEnvironment("run", { STUDY_MODEL: "claude-haiku-5-5", STUDY_BUDGET_USD: "1" });
    const execution = await parseRunExecution({ manifest: "m.json", transport: "cli", pilot: true, approveBudget: true, output: resolve("/tmp/sr-unit-config-none.json") }, env, [], new Map());
    for (const key of ["fake", "modelApi", "gatewayUpstream", "apiBaseUrl", "timeoutMs", "loginLockTimeoutMs", "loginLockStaleMs", "memoryBytes", "homeBytes"]) {
      expect(execution, key).not.toHaveProperty(key);
    }
    expect(problems).toEqual([]);
  });
});
